"""HFile, the metadata table's file format: upsertlake's writer and reader against Apache Hudi's own
(hudi-io 1.2.1, from Maven Central, in a JVM), on the same records in the same run.

    python benchmarks/hfile_bench.py                          # 1M record-index-like records, NONE and GZ
    python benchmarks/hfile_bench.py --records 5000000 --codecs GZ --runs 5

The records are what the metadata table's record index holds: sorted 36-character UUID keys with a
small binary value (64 bytes here). Three steps, each run --runs times after as many warm-up runs
(so the JVM's JIT is warm; upsertlake's first-use costs are in its warm-up too):
- write: the whole file into memory (`HFileWriter.append_batch` of the key and value lists;
  Hudi: `HFileWriterImpl.append` per record);
- scan: every key and value (`HFileReader.read()`, an Arrow table; Hudi: `seekTo()`/`next()`);
- lookup: --probes random keys, sorted, looked up in one reader (`get_many`; Hudi: forward
  `seekTo(key)` per key).
Both write the same bytes (checked). Prints the median seconds of each and the ratio
(upsertlake / Hudi: below 1 is faster); writes nothing into the repository.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from upsertlake.hfile import HFileReader, HFileWriter  # noqa: E402

JARS = ["org.apache.hudi:hudi-io:1.2.1", "com.google.protobuf:protobuf-java:3.25.5", "io.airlift:aircompressor:2.0.3"]


def jar(coordinate: str) -> str:
    """A jar in the local Maven repository, fetched by Maven when absent."""
    group, artifact, version = coordinate.split(":")
    repository = Path(os.environ.get("UPSERTLAKE_MAVEN_REPO", Path.home() / ".m2" / "repository"))
    path = repository / group.replace(".", "/") / artifact / version / f"{artifact}-{version}.jar"
    if not path.is_file():
        subprocess.run(["mvn", "-B", "-q", f"-Dmaven.repo.local={repository}", "dependency:get",
                        f"-Dartifact={coordinate}", "-Dtransitive=false"], check=True)
    return str(path)


def framed(items: list[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(b)) + b for b in items)


def write(keys: list[str], values: list[bytes], block_size: int, codec: str) -> bytes:
    writer = HFileWriter(block_size=block_size, compression=codec, file_creation_time=0)
    writer.append_batch(keys, values)
    writer.close()
    return writer.getvalue()


def median_of(runs: int, step) -> tuple[float, object]:
    for _ in range(runs):  # warm-up
        step()
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = step()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--probes", type=int, default=10_000)
    parser.add_argument("--value-bytes", type=int, default=64)
    parser.add_argument("--block-size", type=int, default=1024 * 1024)
    parser.add_argument("--codecs", nargs="+", default=["NONE", "GZ"])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    rng = random.Random(51)
    keys = sorted(str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(args.records))
    values = [rng.randbytes(args.value_bytes) for _ in range(args.records)]
    probes = sorted(rng.sample(keys, args.probes))
    entries = list(zip(keys, values, strict=True))
    with tempfile.TemporaryDirectory() as work:
        workdir = Path(work)
        (workdir / "records.bin").write_bytes(framed([b for k, v in entries for b in (k.encode(), v)]))
        (workdir / "probes.bin").write_bytes(framed([p.encode() for p in probes]))
        classpath = os.pathsep.join([*map(jar, JARS), work])
        subprocess.run(["javac", "-nowarn", "-d", work, "-cp", classpath, str(HERE / "HFileBench.java")], check=True)
        print(f"{args.records:,} records ({len(keys[0])}-byte keys, {args.value_bytes}-byte values), "
              f"{args.probes:,} lookups, {args.block_size:,}-byte blocks, median of {args.runs} after as many warm-ups")
        for codec in args.codecs:
            ours: dict[str, float] = {}
            ours["write"], data = median_of(args.runs, lambda c=codec: write(keys, values, args.block_size, c))
            ours["scan"], table = median_of(args.runs, lambda d=data: HFileReader(d).read())
            assert table.num_rows == args.records
            ours["lookup"], found = median_of(args.runs, lambda d=data: HFileReader(d).get_many(probes))
            assert len(found) == args.probes
            java = subprocess.run(["java", "-Xmx8g", "-cp", classpath, "HFileBench", str(workdir / "records.bin"),
                                   str(workdir / "probes.bin"), "GZIP" if codec == "GZ" else "NONE",
                                   str(args.block_size), str(args.runs)], check=True, capture_output=True, text=True)
            hudi: dict[str, list[float]] = {}
            for line in java.stdout.splitlines():
                step, seconds, check = line.split()
                hudi.setdefault(step, []).append(float(seconds))
                if step == "write":
                    assert int(check) == len(data), "Hudi's writer wrote other bytes than ours"
                if step == "lookup":
                    assert int(check) == args.probes
            print(f"\n{codec}: {len(data) / 2**20:,.1f} MiB")
            print(f"{'step':8} {'upsertlake s':>13} {'Hudi (JVM) s':>13} {'ratio':>7}")
            for step in ("write", "scan", "lookup"):
                theirs = statistics.median(hudi[step])
                print(f"{step:8} {ours[step]:13.3f} {theirs:13.3f} {ours[step] / theirs:7.2f}")


if __name__ == "__main__":
    main()

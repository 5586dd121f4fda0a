"""The metadata table (.hoodie/metadata): what keeping it costs a small upsert, what it saves a
read of a table of many partitions, and the record index against the global indexes that read
files, measured in one run each on the same machine.

    python benchmarks/metadata_bench.py cost                  # 100-row upserts, local and on S3, after 5 and 50 commits
    python benchmarks/metadata_bench.py cost --commits 5,500  # the issue's 500 (slow)
    python benchmarks/metadata_bench.py listing --partitions 1000
    python benchmarks/metadata_bench.py index --rows 10000000 --batch 1000,100000 --chunk 5000000

- cost: a version 8 copy-on-write table of --rows rows in 10 partitions; small upserts of 100 rows
  (one partition each) with hoodie.metadata.enable true and false side by side (same data, same
  process, alternating), after --commits commits; per upsert the median seconds, the files it
  created (data and metadata), and on the S3 test server (tests/scripts/s3_server.py, moto on loopback)
  the requests by kind, the server's count.
- listing: a table of --partitions partitions on the S3 test server; a full read's planning (the
  file system view and its listing) with and without the metadata table: seconds and LIST/GET.
- index: upserts of each --batch size (half updates spread over the table, half inserts) into a
  table of --rows rows in 100 partitions, written --chunk rows per bulk-insert commit with the
  record index kept from the first commit. Tagged by RECORD_INDEX with the record index as the
  build left it (in log files: one per file group and commit) and, on a copy whose metadata table
  was compacted, in base HFiles (RECORD_INDEX:base); by GLOBAL_SIMPLE and GLOBAL_BLOOM; and
  delta-rs's MERGE of the same rows into its own table appended in the same chunks. Each upsert on
  its own copy of its table (hard links), no metadata compaction inside a measured upsert; every
  kind warmed up once on a small table first. Prints the tag step's and the whole upsert's
  seconds, progress with the peak RSS of each step, and the machine's load.
Prints the figures; writes nothing into the repository.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import upsertlake  # noqa: E402

SERVER = HERE.parent / "tests" / "scripts" / "s3_server.py"
V8 = {"hoodie.write.table.version": "8"}


def keys(ids: np.ndarray) -> pa.Array:
    """`key-{id:012d}` for each id, built a digit column at a time (no per-row Python): a 50M-row
    table is built in chunks of millions of rows."""
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= 10**12):
        raise ValueError("ids must be in [0, 10**12) to print as 12 digits")
    chars = np.empty((len(ids), 16), dtype=np.uint8)
    chars[:, :4] = np.frombuffer(b"key-", dtype=np.uint8)
    for k in range(12):
        chars[:, 4 + k] = ids // 10 ** (11 - k) % 10 + ord("0")
    offsets = np.arange(0, 16 * (len(ids) + 1), 16, dtype=np.int32)
    return pa.StringArray.from_buffers(len(ids), pa.py_buffer(offsets), pa.py_buffer(chars))


def rows(ids: np.ndarray, partitions: int, ts: int = 1) -> pa.Table:
    """The bench's rows: key `key-{id:012d}`, partition `p{id % partitions:04d}`, `ts`, `val` = id."""
    ids = np.asarray(ids, dtype=np.int64)
    names = pa.array([f"p{i:04d}" for i in range(partitions)])
    return pa.table({
        "id": keys(ids),
        "part": names.take(pa.array(ids % partitions)),
        "ts": pa.array(np.full(len(ids), ts, dtype=np.int64)),
        "val": pa.array(ids.astype(np.float64)),
    })


def new_table(uri: str, metadata: bool, storage_options: dict | None = None, index: str = "SIMPLE") -> upsertlake.Table:
    options = {
        **V8,
        "hoodie.metadata.enable": str(metadata).lower(),
        "hoodie.index.type": index,
        "hoodie.cleaner.commits.retained": "1000",
        "hoodie.keep.min.commits": "1001",
        "hoodie.keep.max.commits": "1002",
    }
    return upsertlake.create_table(
        uri,
        "bench",
        record_key="id",
        precombine_field="ts",
        partition_fields="part",
        options=options,
        storage_options=storage_options,
    )


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


class S3:
    """The moto S3 server of the tests, on loopback, counting requests by kind."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, str(SERVER)], stdout=subprocess.PIPE, text=True)
        self.endpoint = f"http://127.0.0.1:{int(self.process.stdout.readline())}"
        self.options = {
            "aws_endpoint": self.endpoint,
            "aws_allow_http": "true",
            "aws_access_key_id": "bench",
            "aws_secret_access_key": "bench",
            "aws_region": "us-east-1",
        }
        import boto3

        self.client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
            region_name="us-east-1",
        )

    def bucket(self, name: str) -> str:
        self.client.create_bucket(Bucket=name)
        return f"s3://{name}/t"

    def counts(self) -> dict[str, int]:
        with urllib.request.urlopen(f"{self.endpoint}/__requests") as resp:
            return json.loads(resp.read())

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


# -- cost ----------------------------------------------------------------------------------------
def cost(args: argparse.Namespace) -> None:
    marks = sorted(int(c) for c in args.commits.split(","))
    rng = np.random.default_rng(7)
    s3 = S3() if args.s3 else None
    try:
        for where in ["local"] + (["s3"] if s3 else []):
            tables = {}
            for metadata in (True, False):
                if where == "local":
                    root = Path(tempfile.mkdtemp(prefix=f"mdt-{metadata}-"))
                    uri, opts = str(root / "t"), None
                else:
                    uri, opts = s3.bucket(f"cost-{str(metadata).lower()}"), s3.options
                t = new_table(uri, metadata, opts)
                t.bulk_insert(rows(np.arange(args.rows), 10), options={"hoodie.metadata.enable": str(metadata).lower()})
                tables[metadata] = (t, uri)
            done = 1
            for mark in marks:
                while done < mark - args.samples:
                    for metadata, (t, _) in tables.items():
                        t.upsert(
                            rows(rng.integers(0, args.rows, 100) // 10 * 10, 10, ts=done + 1),
                            options={"hoodie.metadata.enable": str(metadata).lower()},
                        )
                    done += 1
                figures = {}
                for metadata, (t, uri) in tables.items():
                    seconds, created, requests = [], [], []
                    for _ in range(args.samples):
                        before = files_under(Path(uri)) if where == "local" else None
                        if s3:
                            s3.counts()
                        began = time.perf_counter()
                        t.upsert(
                            rows(rng.integers(0, args.rows, 100) // 10 * 10, 10, ts=done + 1),
                            options={"hoodie.metadata.enable": str(metadata).lower()},
                        )
                        seconds.append(time.perf_counter() - began)
                        if where == "local":
                            created.append(len(files_under(Path(uri)) - before))
                        else:
                            requests.append(s3.counts())
                        done += 1 if metadata else 0
                    figures[metadata] = (statistics.median(seconds), created, requests)
                on, off = figures[True], figures[False]
                line = (
                    f"{where:5} after {mark:4} commits: upsert {on[0]:.3f} s with the metadata table, "
                    f"{off[0]:.3f} s without ({on[0] / off[0]:.2f}x)"
                )
                if where == "local":
                    line += f"; files created {statistics.median(on[1]):.0f} vs {statistics.median(off[1]):.0f}"
                else:
                    kinds = sorted({k for r in on[2] + off[2] for k in r})
                    def median(runs: list[dict[str, int]], kind: str) -> float:
                        return statistics.median([r.get(kind, 0) for r in runs])

                    line += "; requests " + ", ".join(
                        f"{k} {median(on[2], k):.0f} vs {median(off[2], k):.0f}" for k in kinds
                    )
                print(line, flush=True)
    finally:
        if s3:
            s3.close()


# -- listing -------------------------------------------------------------------------------------
def listing(args: argparse.Namespace) -> None:
    from upsertlake.layout.file_system_view import FileSystemView
    from upsertlake.timeline.active import Timeline

    s3 = S3()
    try:
        for metadata in (True, False):
            uri = s3.bucket(f"list-{str(metadata).lower()}")
            t = new_table(uri, metadata, s3.options)
            t.bulk_insert(
                rows(np.arange(args.partitions * 10), args.partitions),
                options={"hoodie.metadata.enable": str(metadata).lower()},
            )
            t.upsert(
                rows(np.arange(0, args.partitions * 10, 7), args.partitions, ts=2),
                options={"hoodie.metadata.enable": str(metadata).lower()},
            )
            seconds, requests = [], []
            for _ in range(args.samples):
                table = upsertlake.open_table(uri, storage_options=s3.options)
                s3.counts()
                began = time.perf_counter()
                files = FileSystemView(Timeline.load(table.storage)).latest_base_files()
                seconds.append(time.perf_counter() - began)
                requests.append(s3.counts())
            assert len(files) >= args.partitions
            print(
                f"{args.partitions} partitions, metadata table {'on ' if metadata else 'off'}: "
                f"plan {statistics.median(seconds):.3f} s, "
                f"requests {requests[len(requests) // 2]} ({len(files)} files)",
                flush=True,
            )
    finally:
        s3.close()


# -- index ---------------------------------------------------------------------------------------
PARTITIONS = 100
NO_COMPACTION = {"hoodie.metadata.compact.max.delta.commits": "1000000"}  # none inside a measured upsert
RI_LOGS, RI_BASE = "RECORD_INDEX", "RECORD_INDEX:base"


class Progress:
    """Seconds since the start and the process's peak RSS since the last mark (VmHWM, reset
    through /proc/self/clear_refs), printed per step: the build must stay bounded in memory."""

    def __init__(self) -> None:
        self.began, self.peak = time.perf_counter(), 0.0

    @staticmethod
    def peak_gb() -> float:
        status = Path("/proc/self/status").read_text()
        return int(status.split("VmHWM:")[1].split()[0]) / 2**20

    @staticmethod
    def reset() -> None:
        with contextlib.suppress(OSError):  # not Linux, or not allowed: the peak is then the process's so far
            Path("/proc/self/clear_refs").write_text("5")

    def mark(self, what: str) -> None:
        seconds, load, peak = time.perf_counter() - self.began, os.getloadavg()[0], self.peak_gb()
        self.peak = max(self.peak, peak)
        print(f"[{seconds:7.1f} s, peak RSS {peak:.2f} GB, load {load:4.1f}] {what}", flush=True)
        self.reset()


def link_copy(source: Path, target: Path) -> Path:
    """A copy of a table whose data files are hard links (a writer never changes a file in place:
    it writes new files, and rewrites small ones by rename), so a 50M-row table is copied per
    measurement in no time and no disk; small files (the timelines, properties) are copied."""

    def link(src: str, dst: str) -> None:
        if os.path.getsize(src) >= 1 << 20:
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, copy_function=link)
    return target


def record_index_state(table: Path) -> str:
    """The record index's latest slices: their base HFiles and the log files written after them
    (a log file's name carries its deltacommit's time, a base file's its compaction's)."""
    folder = table / ".hoodie" / "metadata" / "record_index"
    newest: dict[str, tuple[str, int]] = {}
    for f in folder.glob("*.hfile"):
        group, time_ = f.name.split("_")[0], f.stem.rpartition("_")[2]
        newest[group] = max(newest.get(group, ("", 0)), (time_, f.stat().st_size))
    logs = [
        f.stat().st_size
        for f in folder.glob(".*.log.*")
        if f.name[1:].split("_")[1].split(".")[0] > newest.get(f.name[1:].split("_")[0], ("", 0))[0]
    ]
    bases, logged = sum(size for _, size in newest.values()) / 2**20, sum(logs) / 2**20
    return f"record index: {len(newest)} base HFiles of {bases:.0f} MiB, {len(logs)} log files of {logged:.0f} MiB"


def gib(folder: Path) -> float:
    """The size of the files under `folder` (a hard link counted in each copy)."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**30


def build(root: Path, n: int, chunk: int, peers: list[str], progress: Progress) -> dict[str, Path]:
    """The tables of `n` rows, written `chunk` rows per commit: the Hudi table with its record
    index kept from the first commit (so every chunk's keys go to the record index's log files,
    uncompacted), and delta-rs's table appended chunk by chunk."""
    tables = {"hudi": root / "hudi"}
    t = new_table(str(tables["hudi"]), True)
    for start in range(0, n, chunk):
        part = rows(np.arange(start, min(n, start + chunk)), PARTITIONS)
        t.bulk_insert(part, options={"hoodie.metadata.record.index.enable": "true", **NO_COMPACTION})
        size = gib(tables["hudi"])
        progress.mark(f"hudi: rows {start:,} to {min(n, start + chunk):,} bulk-inserted ({size:.2f} GiB)")
    if "delta-rs" in peers:
        import deltalake

        tables["delta"] = root / "delta"
        for start in range(0, n, chunk):
            part = rows(np.arange(start, min(n, start + chunk)), PARTITIONS)
            deltalake.write_deltalake(str(tables["delta"]), part, partition_by=["part"], mode="append")
        progress.mark(f"delta-rs: {n:,} rows appended in chunks of {chunk:,} ({gib(tables['delta']):.2f} GiB)")
    return tables


def upsert_once(kind: str, tables: dict[str, Path], run: Path, batch: pa.Table, expected: tuple[int, int]) -> str:
    """One measured upsert of `batch` by `kind` on a fresh copy of its table; the line to print."""
    if kind == "delta-rs":
        import deltalake

        dt = deltalake.DeltaTable(str(link_copy(tables["delta"], run)))
        began = time.perf_counter()
        (
            dt.merge(batch, "t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        return f"upsert {time.perf_counter() - began:.2f} s"
    copy = link_copy(tables["hudi:base" if kind == RI_BASE else "hudi"], run)
    state = record_index_state(copy)
    table = upsertlake.open_table(copy)
    began = time.perf_counter()
    result = table.upsert(batch, options={"hoodie.index.type": kind.split(":")[0], **NO_COMPACTION})
    total = time.perf_counter() - began
    assert (result.num_updates, result.num_inserts) == expected, result
    return f"upsert {total:.2f} s (tag {result.stage_seconds.get('tag', 0):.2f} s; {state} before)"


def compacted(tables: dict[str, Path], root: Path, progress: Progress) -> Path:
    """A copy of the Hudi table whose metadata table was compacted (the record index in base
    HFiles), by a one-row upsert that makes a metadata compaction due."""
    copy = link_copy(tables["hudi"], root / "hudi-base")
    upsertlake.open_table(copy).upsert(
        rows(np.arange(1), PARTITIONS), options={"hoodie.metadata.compact.max.delta.commits": "1"}
    )
    progress.mark(f"hudi: a copy with its metadata table compacted ({record_index_state(copy)})")
    return copy


def measure(root: Path, n: int, chunk: int, sizes: list[int], kinds: list[str], progress: Progress) -> None:
    """Build the tables of `n` rows, then each batch size by each kind, each on its own copy; the
    compacted copy last (its compaction is the run's largest step in memory)."""
    tables = build(root, n, chunk, kinds, progress)
    rng = np.random.default_rng(3)
    batches = []
    for size in sizes:
        updates = rng.choice(n, size // 2, replace=False)
        inserts = np.arange(n, n + size - len(updates))
        batches.append((rows(np.concatenate([updates, inserts]), PARTITIONS, ts=2), (len(updates), len(inserts))))
    later = [RI_BASE] if RI_BASE in kinds else []
    for group in ([k for k in kinds if k not in later], later):
        if group == [RI_BASE]:
            tables["hudi:base"] = compacted(tables, root, progress)
        for (batch, expected), size in zip(batches, sizes):
            for kind in group:
                run = root / f"run-{kind.replace(':', '-')}-{size}"
                line = upsert_once(kind, tables, run, batch, expected)
                progress.mark(f"{n:,} rows, batch {size:,}: {kind:17} {line}")
                shutil.rmtree(run)
    for path in tables.values():
        shutil.rmtree(path)


def index(args: argparse.Namespace) -> None:
    kinds = [*args.indexes.split(","), *args.peers.split(",")]
    kinds = list(dict.fromkeys(k for k in kinds if k))
    sizes = [int(b) for b in args.batch.split(",")]
    progress = Progress()
    root = Path(tempfile.mkdtemp(prefix="mdt-index-", dir=args.work))
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # every peer warmed up the same way, on a small table
            measure(root / "warm", 20_000, 10_000, [1_000], kinds, progress)
        progress.mark("warm-up: every kind once on a table of 20,000 rows")
        measure(root / "bench", args.rows, args.chunk, sizes, kinds, progress)
        print(f"process peak RSS {max(progress.peak, progress.peak_gb()):.2f} GB", flush=True)
    finally:
        shutil.rmtree(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["cost", "listing", "index"])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--commits", default="5,50")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--s3", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--batch", default="100000", help="index: batch sizes, comma-separated")
    parser.add_argument("--chunk", type=int, default=5_000_000, help="index: rows per commit of the table's build")
    parser.add_argument("--indexes", default=f"{RI_LOGS},{RI_BASE},GLOBAL_SIMPLE,GLOBAL_BLOOM")
    parser.add_argument("--work", default=None, help="index: the folder for the tables (default: the system's temp)")
    parser.add_argument("--peers", default="delta-rs")
    args = parser.parse_args()
    {"cost": cost, "listing": listing, "index": index}[args.what](args)


if __name__ == "__main__":
    main()

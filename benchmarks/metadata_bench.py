"""The metadata table (.hoodie/metadata): what keeping it costs a small upsert, what it saves a
read of a table of many partitions, and the record index against the global indexes that read
files, measured in one run each on the same machine.

    python benchmarks/metadata_bench.py cost                  # 100-row upserts, local and on S3, after 5 and 50 commits
    python benchmarks/metadata_bench.py cost --commits 5,500  # the issue's 500 (slow)
    python benchmarks/metadata_bench.py listing --partitions 1000
    python benchmarks/metadata_bench.py index --rows 1000000 --batch 100000

- cost: a version 8 copy-on-write table of --rows rows in 10 partitions; small upserts of 100 rows
  (one partition each) with hoodie.metadata.enable true and false side by side (same data, same
  process, alternating), after --commits commits; per upsert the median seconds, the files it
  created (data and metadata), and on the S3 test server (tests/scripts/s3_server.py, moto on loopback)
  the requests by kind, the server's count.
- listing: a table of --partitions partitions on the S3 test server; a full read's planning (the
  file system view and its listing) with and without the metadata table: seconds and LIST/GET.
- index: an upsert of --batch keys (half updates spread over the table, half inserts) into a
  table of --rows rows, tagged by RECORD_INDEX, GLOBAL_SIMPLE and GLOBAL_BLOOM (each on its own
  copy of the same table), and delta-rs's MERGE on the same rows as the peer; the tag step's and
  the whole upsert's seconds.
Prints the figures; writes nothing into the repository.
"""

from __future__ import annotations

import argparse
import json
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


def rows(ids: np.ndarray, partitions: int, ts: int = 1) -> pa.Table:
    return pa.table({
        "id": pa.array([f"key-{i:012d}" for i in ids.tolist()]),
        "part": pa.array([f"p{i % partitions:04d}" for i in ids.tolist()]),
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
def index(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="mdt-index-"))
    base = root / "base"
    partitions = 100
    began = time.perf_counter()
    t = new_table(str(base), True)
    t.bulk_insert(rows(np.arange(args.rows), partitions), options={"hoodie.metadata.record.index.enable": "true"})
    t.upsert(
        rows(np.arange(1), partitions, ts=1), options={"hoodie.metadata.record.index.enable": "true"}
    )  # builds the record index
    print(f"table of {args.rows} rows with its record index built in {time.perf_counter() - began:.1f} s", flush=True)
    rng = np.random.default_rng(3)
    updates = rng.choice(args.rows, args.batch // 2, replace=False)
    inserts = np.arange(args.rows, args.rows + args.batch - len(updates))
    batch = rows(np.concatenate([updates, inserts]), partitions, ts=2)
    for kind in args.indexes.split(","):
        copy = root / kind
        shutil.copytree(base, copy)
        table = upsertlake.open_table(copy)
        began = time.perf_counter()
        result = table.upsert(batch, options={"hoodie.index.type": kind})
        total = time.perf_counter() - began
        assert (result.num_updates, result.num_inserts) == (len(updates), len(inserts)), result
        print(f"{kind:14} upsert {total:.2f} s (tag {result.stage_seconds.get('tag', 0):.2f} s)", flush=True)
        shutil.rmtree(copy)
    if "delta-rs" in args.peers:
        import deltalake

        path = root / "delta"
        deltalake.write_deltalake(str(path), rows(np.arange(args.rows), partitions), partition_by=["part"])
        dt = deltalake.DeltaTable(str(path))
        began = time.perf_counter()
        (
            dt.merge(batch, "t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        print(f"{'delta-rs MERGE':14} upsert {time.perf_counter() - began:.2f} s", flush=True)
    shutil.rmtree(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["cost", "listing", "index"])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--commits", default="5,50")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--s3", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--indexes", default="RECORD_INDEX,GLOBAL_SIMPLE,GLOBAL_BLOOM")
    parser.add_argument("--peers", default="delta-rs")
    args = parser.parse_args()
    {"cost": cost, "listing": listing, "index": index}[args.what](args)


if __name__ == "__main__":
    main()

"""Test helpers shared by the test folders: the repository's paths, Hudi-written fixture tables,
exact snapshots and file digests, Apache Hudi's reader, instant files, the command line in process."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SCRIPTS = TESTS / "scripts"  # programs tests start as processes of their own
HUDI_TABLES = TESTS / "hudi_tables"
MOR_TABLES = ["mor_v6_nonpartitioned", "mor_v6_simplekeygen_nonhivestyle", "mor_v6_trips_8i1u", "mor_v8_trips_8i3u1d"]


def pyproject() -> dict:
    """The repository's pyproject.toml, parsed (tomllib from Python 3.11, tomli before: the package
    supports 3.10)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def unzip_hudi_table(name: str, dest: Path) -> Path:
    """Unzip `<name>.zip` from tests/hudi_tables into dest; returns the table's folder."""
    with zipfile.ZipFile(HUDI_TABLES / f"{name}.zip") as zf:
        members = [m for m in zf.namelist() if not m.startswith("__MACOSX")]
        zf.extractall(dest, members)
    return dest / name


def unzip_mor_table(name: str, dest: Path) -> Path:
    """Unzip `mor/<name>.zip` (a merge-on-read table Hudi wrote) into dest; returns the table's folder."""
    with zipfile.ZipFile(HUDI_TABLES / "mor" / f"{name}.zip") as zf:
        members = [m for m in zf.namelist() if not m.startswith("__MACOSX")]
        zf.extractall(dest, members)
    (table,) = {dest / m.split("/")[0] for m in members}
    return table


def unzip_v9_table(kind: str, name: str, dest: Path) -> Path:
    """Unzip `v9/<kind>/<name>.zip` (a table Apache Hudi 1.1 wrote, `kind` cow or mor) into dest;
    returns the table's folder."""
    with zipfile.ZipFile(HUDI_TABLES / "v9" / kind / f"{name}.zip") as zf:
        members = [m for m in zf.namelist() if not m.startswith("__MACOSX")]
        zf.extractall(dest, members)
    (table,) = {dest / m.split("/")[0] for m in members}
    return table


def tree_digest(root: Path) -> dict[str, str]:
    """Every file below root with the SHA-256 of its bytes: 'the table is exactly as it was'."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def decoded(table: pa.Table) -> pa.Table:
    """`table` with its dictionary-encoded columns (a scan's one-value-per-file meta columns) as
    plain values, to compare with tables read or built otherwise (`equals` compares dictionaries
    and indices, not the values they stand for)."""
    fields = [f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in table.schema]
    return table.cast(pa.schema(fields, table.schema.metadata))


def rows(table: pa.Table, columns: list[str], key: str) -> list[dict]:
    """The given columns as dicts, sorted by `key`: an exact, order-free view of a snapshot."""
    return sorted(table.select(columns).to_pylist(), key=lambda r: r[key])


def hudi_read(path: str | Path, **read: str) -> pa.Table:
    """Read a table with Apache Hudi's reader (hudi-rs): snapshot, as_of or incremental."""
    from hudi import HudiQueryType, HudiReadOptions, HudiTableBuilder

    table = HudiTableBuilder.from_base_uri(Path(path).resolve().as_uri()).build()
    opts = HudiReadOptions()
    if "as_of" in read:
        opts = opts.with_as_of_timestamp(read["as_of"])
    if "begin" in read:
        opts = opts.with_query_type(HudiQueryType.Incremental).with_start_timestamp(read["begin"])
        if read.get("end"):
            opts = opts.with_end_timestamp(read["end"])
    batches = table.read(opts)
    if not batches:
        return pa.table({})
    return pa.Table.from_batches(batches)


def data_bytes(path: str | Path) -> int:
    """A parquet file's column chunk bytes, its footer left out: what bulk insert fills a file
    with up to hoodie.parquet.max.file.size (the bloom filter footer comes on top, as in Hudi)."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path)
    return sum(
        meta.row_group(g).column(c).total_compressed_size
        for g in range(meta.num_row_groups)
        for c in range(meta.num_columns)
    )


def record_bytes(probe: object, data: pa.Table) -> float:
    """Column chunk bytes per record of `data` bulk-inserted into the empty table `probe`, one file
    a partition (the most of any partition). Bulk insert measures records the same way, so a max
    file size of k.5 times this makes files of k records (for a batch of up to 32K records a
    partition, which it measures whole)."""
    import pyarrow.parquet as pq

    r = probe.bulk_insert(data, {"hoodie.parquet.max.file.size": 1 << 40})
    files = [Path(probe.path) / f for f in r.files_written]
    return max(data_bytes(f) / pq.read_metadata(f).num_rows for f in files)


def timeline_dir(root: str | Path) -> Path:
    """The folder of a table's instant files: `.hoodie/timeline` (version 8) or `.hoodie` (6)."""
    hoodie = Path(root) / ".hoodie"
    layout2 = "hoodie.timeline.layout.version=2" in (hoodie / "hoodie.properties").read_text("latin-1")
    return hoodie / "timeline" if layout2 else hoodie


def instant_file(root: str | Path, time: str, action: str) -> Path:
    """A completed instant's file in either layout (`<t>.<action>` or `<t>_<completion>.<action>`)."""
    folder = timeline_dir(root)
    found = [*folder.glob(f"{time}.{action}"), *folder.glob(f"{time}_*.{action}")]
    assert len(found) == 1, f"completed {action} {time}: {found}"
    return found[0]


def completed_times(root: str | Path, action: str = "commit") -> list[str]:
    """Requested times of the completed instants of `action` in the active timeline, sorted."""
    return sorted(p.name.split(".")[0].split("_")[0] for p in timeline_dir(root).glob(f"*.{action}"))


def trips(n: int, day: str = "2026-11-23", seed: int = 7) -> pa.Table:
    """Sorted keys, a constant ordering value, a repeating rider and random fares and counts."""
    rng = np.random.default_rng(seed)
    ids = np.arange(n)
    return pa.table(
        {
            "key": pc.binary_join_element_wise("k", pc.utf8_lpad(pc.cast(pa.array(ids), pa.string()), 8, "0"), ""),
            "ts": pa.array(np.ones(n, np.int64)),
            "day": pa.array([day] * n),
            "fare": pa.array(np.round(rng.random(n) * 100, 2)),
            "rider": pc.binary_join_element_wise("rider-", pc.cast(pa.array(ids % 500), pa.string()), ""),
            "passengers": pa.array(rng.integers(1, 6, n, dtype=np.int32)),
        }
    )


def assert_one_winner_per_name(storage: object, rounds: int, racers: int = 4) -> None:
    """`racers` threads create one name at once (a conditional create), `rounds` names in turn:
    exactly one of them wins each."""
    import threading

    for round_ in range(rounds):
        wins: list[bool] = []

        def race(i: int, name: str = f"x/{round_}", wins: list[bool] = wins) -> None:
            wins.append(storage.write_if_absent(name, f"{i}".encode()))

        threads = [threading.Thread(target=race, args=(i,)) for i in range(racers)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert sorted(wins) == [False] * (racers - 1) + [True]


def cli_in_process(capsys, *args: object) -> tuple[int, str, str]:
    """The command line run in this process: exit code, stdout, stderr. `ingest` then reuses the
    test session's SparkSession (a process of its own starts a JVM: 20-30 s on 2 cores)."""
    from upsertlake.cli import main

    capsys.readouterr()  # what came before is not the command's
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def storage_failing_write_tasks(path: str | Path, failures: Path, armed: Path | None = None,
                                 message: str = "injected failure after the write"):
    """A table's storage whose Spark write tasks each fail once right after writing their files, as
    an executor lost then would: a task's first attempt (while the file `armed` exists, if given)
    leaves a file in `failures` and raises `message` when it stores its key summaries; the retry
    writes again.
    Shipped to the tasks by value (the workers cannot import this module)."""
    import sys
    import uuid

    from pyspark import cloudpickle

    from upsertlake.storage import Storage

    class FailingWriteTasks(Storage):
        def write_bytes(self, rel: str, data: bytes | memoryview) -> None:
            from pyspark import TaskContext

            ctx = TaskContext.get()
            if ctx is not None and ctx.attemptNumber() == 0 and "/.keys/" in rel and (armed is None or armed.exists()):
                failures.mkdir(parents=True, exist_ok=True)
                (failures / uuid.uuid4().hex).touch()
                raise RuntimeError(message)
            super().write_bytes(rel, data)

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return FailingWriteTasks(path)


def storage_failing_record_index_logs(path: str | Path, message: str = "injected failure after a record index log"):
    """A table's storage whose metadata table (its child storage) raises `message` in a Spark task
    right after writing a log file of the record index, as an executor lost then would.
    Shipped to the tasks by value (the workers cannot import this module)."""
    import sys

    from pyspark import cloudpickle

    from upsertlake.storage import Storage

    class FailingRecordIndexLogs(Storage):
        def child(self, rel: str) -> Storage:
            return FailingRecordIndexLogs(self.full_path(rel), self.options, requests=self.requests)

        def write_bytes(self, rel: str, data: bytes | memoryview) -> None:
            from pyspark import TaskContext

            super().write_bytes(rel, data)
            if TaskContext.get() is not None and rel.startswith("record_index/") and ".log." in rel:
                raise RuntimeError(message)

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return FailingRecordIndexLogs(path)


def spark_write_started(spark, path: Path, batch, options: dict, storage=None):
    """A Spark write of `batch` with `options` started and written as write_dataframe does, not
    committed yet (on `storage`, e.g. one that injects faults, when given): (client, instant, result)."""
    from upsertlake.layout.markers import reconcile_markers
    from upsertlake.spark.options import write_options
    from upsertlake.spark.record_index import by_key_group_on
    from upsertlake.spark.types import arrow_schema_of
    from upsertlake.spark.write import _write_distributed
    from upsertlake.table.open import open_table

    chosen = write_options(options, str(path), "upsert")
    df = spark.createDataFrame(batch)
    table = table_on(storage, chosen.hoodie) if storage is not None else open_table(path, chosen.hoodie)
    client = table.write_client()
    instant = client.start_commit(by_key=by_key_group_on(spark))
    parts = spark.sparkContext.defaultParallelism
    result = _write_distributed(df, arrow_schema_of(df.schema), client, instant, chosen, parts)
    reconcile_markers(client.storage, instant, result.files_written)
    return client, instant, result


def table_on(storage, options: dict | None = None):
    """The table at `storage` (an upsertlake Storage, e.g. one that injects faults), opened with `options`."""
    from upsertlake.config.table_config import TableConfig
    from upsertlake.table.table import Table

    return Table(storage, TableConfig.load(storage), options)


FAST_HEARTBEAT = {"hoodie.client.heartbeat.interval_in_ms": 100, "hoodie.client.heartbeat.tolerable.misses": 1}
KILL_MID_COMPACTION = """
import json, os, signal, sys
import upsertlake.services.compaction_slice as compaction
from upsertlake import open_table
real = compaction.write_base_file
def write_then_die(*args, **kwargs):
    real(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)  # one new base file written, the commit never comes
compaction.write_base_file = write_then_die
open_table(sys.argv[1], json.loads(sys.argv[2])).compact()
"""


def kill_mid_compaction(path: str | Path, options: dict) -> None:
    """Compact the table in a process of its own, killed (SIGKILL) right after its first new base
    file is written: the plan stays inflight, its compactor gone."""
    proc = subprocess.run([sys.executable, "-c", KILL_MID_COMPACTION, str(path), json.dumps(options)],
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()


# -- a table of files with known key ranges, for data skipping --------------------------------
CLUSTERED_ROWS = 200  # rows of the clustered table: key-0000 .. key-0199, v = the key's number


def clustered(tmp_path: Path, table_type: str = "COPY_ON_WRITE", **extra: object):
    """10 files of 20 consecutive keys each (v sorted with them), one partition."""
    from upsertlake import create_table, open_table

    n = CLUSTERED_ROWS
    data = pa.table({"id": [f"key-{i:04d}" for i in range(n)], "ts": [1] * n, "p": ["a"] * n, "v": list(range(n)),
                     "note": [None if i % 20 == 0 else f"n{i:04d}" for i in range(n)]})
    per_record = record_bytes(create_table(tmp_path / "probe", "t", "id", "ts", "p"), data)
    table = create_table(tmp_path / "t", "t", "id", "ts", "p", table_type=table_type)
    options = {"hoodie.parquet.max.file.size": int(20.5 * per_record), "hoodie.parquet.small.file.limit": 0,
               "hoodie.index.bloom.num_entries": 100, **extra}
    table = open_table(tmp_path / "t", options)
    table.bulk_insert(data)
    assert len(table.scan().plan.files) == 10
    return table


def file_of(table, v: int) -> str:
    """The base file holding the row whose v is `v` (read directly with pyarrow)."""
    import pyarrow.parquet as pq

    for bf in table.scan().plan.files:
        if v in pq.read_table(table.storage.full_path(bf.path), columns=["v"])["v"].to_pylist():
            return bf.path
    raise AssertionError(v)


def destroy_all_but(table, keep: set[str]) -> None:
    """Every other base file becomes zeros of the same size: opening one fails."""
    for p in Path(table.path).rglob("*.parquet"):
        rel = str(p.relative_to(table.path))
        if ".hoodie" not in p.parts and rel not in keep:
            p.write_bytes(b"\0" * p.stat().st_size)


def write_hudi_sink_checkpoint(root: Path, instant: str, identifier: str, batch_id: int) -> None:
    """Put the checkpoint into a Hudi-written commit as Hudi's streaming sink writes it
    (`CommitUtils.getCheckpointValueAsString` into `HoodieCommitMetadata.extraMetadata`): the JSON
    document of version 6, the Avro document of version 8."""
    from upsertlake.timeline import documents
    from upsertlake.timeline.stream_checkpoint import SINK_CHECKPOINT_KEY

    value = json.dumps({identifier: str(batch_id)}, separators=(",", ":"))
    path = instant_file(root, instant, "commit")
    data = path.read_bytes()
    if data.startswith(b"Obj\x01"):
        doc = documents.decode(data)
        doc["extraMetadata"] = {**(doc["extraMetadata"] or {}), SINK_CHECKPOINT_KEY: value}
        path.write_bytes(documents.encode("HoodieCommitMetadata", doc))
    else:
        doc = json.loads(data)
        doc["extraMetadata"][SINK_CHECKPOINT_KEY] = value
        path.write_text(json.dumps(doc, indent=2))

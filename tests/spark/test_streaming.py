"""Spark Structured Streaming into a table, exactly once: the sink
`writeStream.format("upsertlake")`, the `foreachBatch` hook (`upsertlake.spark.insert(df, path,
batch_id=n)`), merge-on-read streams. Streams read a folder of parquet files, one file a
micro-batch (`maxFilesPerTrigger`), and run with `availableNow`: each query processes what is
there and stops, so a test waits for no timer. Writes use `insert`, which shows a batch written
twice as duplicate keys. One shared local session (conftest `spark`)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import upsertlake.spark as uls
from upsertlake import open_table
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.stream_checkpoint import SINK_CHECKPOINT_KEY, last_batch_id

from helpers import tree_digest

OPTS = {"table": "t", "record_key": "id", "precombine_field": "ts", "partition_fields": "p", "operation": "insert"}
SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.string()), ("p", pa.string())])
SPARK_SCHEMA = "id string, ts long, v string, p string"


def batch(ids: range, ts: int = 1, tag: str = "v") -> pa.Table:
    return pa.table({"id": [f"k{i:03d}" for i in ids], "ts": [ts] * len(ids), "v": [f"{tag}{i}" for i in ids],
                     "p": [f"p{i % 2}" for i in ids]}, schema=SCHEMA)


def land(source: Path, *batches: pa.Table) -> None:
    """Files for the next micro-batches, each one newer than the last (the file source takes them
    oldest first)."""
    source.mkdir(exist_ok=True)
    n = len(list(source.glob("*.parquet")))
    for i, data in enumerate(batches, start=n):
        path = source / f"f{i:03d}.parquet"
        pq.write_table(data, path)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))


def stream(spark, source: Path, target: Path, checkpoint: Path, **options: str):
    """The source folder into the table, a file a micro-batch, until what is there is written."""
    query = (
        spark.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
        .writeStream.format("upsertlake").options(**{**OPTS, **options})
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start(str(target))
    )
    query.awaitTermination()
    return query


def ids(table: Path) -> list[str]:
    return sorted(open_table(table).read(columns=["id"]).column("id").to_pylist())


def batches(table: Path, identifier: str = "default_single_writer") -> list[int | None]:
    """The batch id each completed write recorded for the stream, in timeline order."""
    timeline = Timeline.load(open_table(table).storage)
    out = []
    for inst in timeline.completed_writes():
        value = timeline.commit_metadata(inst).extra_metadata.get(SINK_CHECKPOINT_KEY)
        out.append(int(json.loads(value)[identifier]) if value and identifier in json.loads(value) else None)
    return out


def test_sink_one_commit_per_batch_empty_batches_nothing_replays_skipped(spark, tmp_path: Path) -> None:
    source, table = tmp_path / "in", tmp_path / "t"
    land(source, batch(range(0, 5)), batch(range(0)), batch(range(5, 10)))
    stream(spark, source, table, tmp_path / "ck1")
    assert batches(table) == [0, 2]  # batch 1 had no rows: no commit
    assert ids(table) == [f"k{i:03d}" for i in range(10)]
    assert not list((table / ".hoodie" / ".temp").glob("*"))  # the staged rows went with the commits
    metadata = Timeline.load(open_table(table).storage)
    last = metadata.commit_metadata(metadata.completed_writes()[-1]).extra_metadata
    assert last[SINK_CHECKPOINT_KEY] == '{"default_single_writer":"2"}'  # as Hudi's sink writes it

    # The same query from a new checkpoint runs batches 0-2 again: skipped; batch 3 is new.
    land(source, batch(range(10, 15)))
    stream(spark, source, table, tmp_path / "ck2")
    assert batches(table) == [0, 2, 3]
    assert ids(table) == [f"k{i:03d}" for i in range(15)]  # inserts: a batch written twice would double keys


def test_a_batch_with_a_null_key_fails_the_stream_named_and_writes_nothing(spark, tmp_path: Path) -> None:
    source, table, checkpoint = tmp_path / "in", tmp_path / "t", tmp_path / "ck"
    land(source, batch(range(0, 5)))
    stream(spark, source, table, checkpoint)
    before = tree_digest(table)
    bad = batch(range(5, 10)).set_column(0, "id", pa.array(["k005", None, "k007", "k008", "k009"]))
    land(source, bad)
    with pytest.raises(Exception, match=r"SchemaError: record key field 'id' is null or empty in 1 row\(s\)"):
        stream(spark, source, table, checkpoint)
    assert tree_digest(table) == before  # nothing written, nothing staged left behind
    assert batches(table) == [0]


def test_a_micro_batch_over_the_one_process_limit_is_refused_pointing_to_foreach_batch(spark, tmp_path: Path) -> None:
    source, table = tmp_path / "in", tmp_path / "t"
    land(source, batch(range(5)))
    with pytest.raises(Exception, match=r"BatchTooLargeError: writeStream.format\('upsertlake'\) merges in one Python "
                                        r"worker and takes at most 3 rows \(upsertlake.save.max.records\); this batch "
                                        r"has 5\. .*foreachBatch\(lambda df, n: upsertlake.spark.upsert\(df, path, "
                                        r"batch_id=n"):
        stream(spark, source, table, tmp_path / "ck", **{"upsertlake.save.max.records": "3"})
    assert not table.exists()  # the first batch would have created it: nothing left behind


def test_two_streams_with_their_own_identifiers_write_one_table(spark, tmp_path: Path) -> None:
    """Under optimistic concurrency, side by side; each skips only its own replayed batches."""
    table = tmp_path / "t"
    occ = {"hoodie.write.concurrency.mode": "OPTIMISTIC_CONCURRENCY_CONTROL",
           "hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider"}
    land(tmp_path / "a", batch(range(0, 5)), batch(range(5, 10)))
    land(tmp_path / "b", batch(range(100, 105)), batch(range(105, 110)), batch(range(110, 115)))
    with pytest.raises(Exception, match=r"needs hoodie.datasource.write.streaming.checkpoint.identifier"):
        stream(spark, tmp_path / "a", table, tmp_path / "ck-none", **occ)
    key = "hoodie.datasource.write.streaming.checkpoint.identifier"
    queries = []
    for name in ("a", "b"):
        queries.append(
            spark.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(tmp_path / name))
            .writeStream.format("upsertlake").options(**OPTS, **occ, **{key: name})
            .option("checkpointLocation", str(tmp_path / f"ck-{name}")).trigger(availableNow=True).start(str(table))
        )
    for query in queries:
        query.awaitTermination()
    timeline = Timeline.load(open_table(table).storage)
    assert (last_batch_id(timeline, "a"), last_batch_id(timeline, "b")) == (1, 2)
    assert sorted(b for b in batches(table, "a") if b is not None) == [0, 1]
    assert sorted(b for b in batches(table, "b") if b is not None) == [0, 1, 2]
    # Stream a replays from a new checkpoint with one more file: only its batch 2 is new.
    land(tmp_path / "a", batch(range(10, 15)))
    stream(spark, tmp_path / "a", table, tmp_path / "ck-a2", **occ, **{key: "a"})
    assert ids(table) == sorted([f"k{i:03d}" for i in range(15)] + [f"k{i:03d}" for i in range(100, 115)])
    assert len(batches(table)) == 6


def test_merge_on_read_stream_compacts_inline_or_beside_it(spark, tmp_path: Path) -> None:
    """Deltacommits, compacted inline every 2; then inline compaction off and `compact` run while
    the stream writes."""
    source, table = tmp_path / "in", tmp_path / "t"
    mor = {"operation": "upsert", "table_type": "MERGE_ON_READ", "hoodie.compact.inline": "true",
           "hoodie.compact.inline.max.delta.commits": "2"}
    land(source, batch(range(0, 6), 1, "a"), batch(range(0, 3), 2, "b"), batch(range(2, 4), 3, "c"))
    stream(spark, source, table, tmp_path / "ck", **mor)
    actions = [(i.action.value, i.state.value) for i in open_table(table).timeline()]
    assert [a for a, s in actions if s == "completed"] == ["deltacommit", "deltacommit", "commit", "deltacommit"]
    expected = {**{f"k{i:03d}": f"a{i}" for i in range(6)}, "k000": "b0", "k001": "b1", "k002": "c2", "k003": "c3"}
    data = open_table(table).read(columns=["id", "v"]).to_pylist()
    assert {r["id"]: r["v"] for r in data} == expected and len(data) == 6

    land(source, batch(range(4, 6), 4, "d"), batch(range(0, 1), 5, "e"))
    query = (
        spark.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
        .writeStream.format("upsertlake").options(**{**OPTS, **mor, "hoodie.compact.inline": "false"})
        .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start(str(table))
    )
    compacted = open_table(table).compact()  # beside the stream: the deltacommit after the last compaction
    query.awaitTermination()
    assert compacted.instant_time is not None
    expected.update({"k004": "d4", "k005": "d5", "k000": "e0"})
    data = open_table(table).read(columns=["id", "v"]).to_pylist()
    assert {r["id"]: r["v"] for r in data} == expected and len(data) == 6
    assert batches(table)[-2:] in ([3, 4], [None, 4], [3, None])  # a compaction commit may fall between


def test_foreach_batch_hook_is_exactly_once(spark, tmp_path: Path) -> None:
    """`foreachBatch(lambda df, n: uls.insert(df, path, batch_id=n))`: the distributed writer, with
    the sink's check and key."""
    table = str(tmp_path / "t")
    opts = {k: v for k, v in OPTS.items() if k != "operation"}
    first = uls.insert(spark.createDataFrame(batch(range(5))), table, batch_id=0, **opts)
    assert first is not None and first.num_inserts == 5
    assert uls.insert(spark.createDataFrame(batch(range(5))), table, batch_id=0, **opts) is None  # replayed
    assert uls.insert(spark.createDataFrame(batch(range(5, 8))), table, batch_id=1, **opts).num_inserts == 3
    assert ids(Path(table)) == [f"k{i:03d}" for i in range(8)]
    assert batches(Path(table)) == [0, 1]
    unchecked = uls.insert(spark.createDataFrame(batch(range(8, 9))), table, **opts)  # no batch id: no check
    assert unchecked.num_inserts == 1
    assert batches(Path(table)) == [0, 1, None]


def test_a_table_hudis_streaming_sink_wrote_goes_on_with_the_hook(spark, hudi_table) -> None:
    """A table written by Apache Hudi whose last commit holds Hudi's sink checkpoint for batch 4
    (`test_stream_checkpoint.write_hudi_sink_checkpoint`): batch 4 is skipped, batch 5 written with
    the key in the same form; Hudi's reader reads the table."""
    from helpers import hudi_read, write_hudi_sink_checkpoint

    root = hudi_table("v6_nonpartitioned")
    timeline = Timeline.load(open_table(root).storage)
    write_hudi_sink_checkpoint(root, timeline.completed_writes()[-1].time, "default_single_writer", 4)
    df = spark.read.format("upsertlake").load(str(root))
    df = df.drop(*[c for c in df.columns if c.startswith("_hoodie_")]).where("id = 1")
    assert uls.upsert(df, str(root), batch_id=4) is None
    assert uls.upsert(df, str(root), batch_id=5).num_updates == 1
    timeline = Timeline.load(open_table(root).storage)
    assert timeline.commit_metadata(timeline.completed_writes()[-1]).extra_metadata[SINK_CHECKPOINT_KEY] == (
        '{"default_single_writer":"5"}')
    assert hudi_read(root).num_rows == 4

# -- kill -9 of the driver ---------------------------------------------------------------------
DRIVER = """
import os, signal, sys
import upsertlake.spark as uls
from upsertlake.spark.source import UpsertlakeDataSource
from upsertlake.spark.stream import StreamWriter

source, table, checkpoint = sys.argv[1:4]
kill_after, options = int(sys.argv[4]), eval(sys.argv[5])
GROUP = os.getpgid(0)  # this driver, its JVM and (but for the daemon's own group) the workers


class Writer(StreamWriter):
    def commit(self, messages, batchId):
        super().commit(messages, batchId)
        if batchId == kill_after:  # the table has the batch, Spark's commit log not yet
            os.killpg(GROUP, signal.SIGKILL)


class Source(UpsertlakeDataSource):  # pickled by value into the workers, with Writer
    def streamWriter(self, schema, overwrite):
        writer = super().streamWriter(schema, overwrite)
        return Writer(writer.options, writer.storage, writer.schema)


spark = uls.build_session("local[2]", "stream-driver", **{"spark.ui.enabled": "false"})
spark.dataSource.register(Source)
query = (spark.readStream.schema("id string, ts long, v string, p string").option("maxFilesPerTrigger", 1)
         .parquet(source).writeStream.format("upsertlake").options(**options)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start(table))
query.awaitTermination()
"""


def commits_logged(checkpoint: Path) -> list[int]:
    """The batches Spark's commit log has (`<checkpoint>/commits/<batch id>`)."""
    return sorted(int(p.name) for p in (checkpoint / "commits").glob("[0-9]*"))


def test_driver_killed_at_random_moments_every_row_once(spark, tmp_path: Path) -> None:
    """kill -9 of the driver right after the table's commit of a batch and before Spark's commit
    log has it, then at a random moment of a second run; a third run on the same checkpoint
    finishes the stream: every row is in the table exactly once, every batch in one commit."""
    import random
    import signal
    import subprocess
    import sys
    import time

    rng = random.Random(45)
    source, table, checkpoint = tmp_path / "in", tmp_path / "t", tmp_path / "ck"
    land(source, *[batch(range(20 * n, 20 * n + 20)) for n in range(8)])
    options = {**OPTS, "hoodie.client.heartbeat.interval_in_ms": "200"}  # a killed write's heartbeat expires fast

    def driver(kill_after: int) -> subprocess.Popen:
        args = [str(source), str(table), str(checkpoint), str(kill_after), repr(options)]
        return subprocess.Popen([sys.executable, "-c", DRIVER, *args], start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    first = rng.choice([1, 2])
    assert driver(first).wait(timeout=300) == -signal.SIGKILL
    assert batches(table) == list(range(first + 1))
    assert commits_logged(checkpoint) == list(range(first))  # killed between the two commits

    second = driver(-1)  # killed from outside, some time after it wrote its first batch
    deadline = time.monotonic() + 300
    while len(batches(table)) < first + 2 and second.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(rng.uniform(0.0, 0.6))
    with contextlib.suppress(ProcessLookupError):  # it finished first: the restart has nothing left to do
        os.killpg(second.pid, signal.SIGKILL)
    second.wait(timeout=60)

    stream(spark, source, table, checkpoint, **{k: v for k, v in options.items() if k not in OPTS})
    assert batches(table) == list(range(8))  # no batch written twice, none lost
    assert ids(table) == [f"k{i:03d}" for i in range(160)]  # inserts: each row exactly once
    assert commits_logged(checkpoint)[-1] == 7


# -- upsertlake ingest --continuous ------------------------------------------------------------
def pending(table: Path) -> list[str]:
    """Writes requested but not completed (version 6 layout)."""
    hoodie = table / ".hoodie"
    done = {p.name.split(".")[0] for p in hoodie.glob("*.commit")}
    return sorted(p.name.split(".")[0] for p in hoodie.glob("*.commit.requested") if p.name.split(".")[0] not in done)


def test_ingest_continuous_picks_up_files_as_they_land_and_goes_on_after_ctrl_c(spark, tmp_path: Path, capsys,
                                                                                caplog) -> None:
    """Run in this process (it reuses the test session's Spark): files landing while it runs are
    upserted (deduplicated), Ctrl-C (a real SIGINT) stops it after the batch in flight, and
    `--once` on the same checkpoint goes on with only what it has not read."""
    import signal
    import threading
    import time

    from helpers import cli_in_process

    source, table = tmp_path / "in", tmp_path / "t"
    land(source, batch(range(0, 5)))
    args = ["ingest", "--source", source, "--format", "parquet", "--table", table, "--record-key", "id",
            "--precombine-field", "ts", "--partition-fields", "p"]

    def wait(done, what: str) -> None:
        deadline = time.monotonic() + 120
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.02)

    def while_it_runs() -> None:
        wait(lambda: (table / ".hoodie" / "hoodie.properties").exists() and batches(table, "upsertlake_ingest"),
             "the first batch")
        # Two files land: new keys, and newer versions of three (plus an older one that must lose).
        newer = pa.concat_tables([batch(range(0, 3), 2, "new"), batch(range(0, 1), 0, "old")])
        land(source, batch(range(5, 10)), newer)
        wait(lambda: len(ids(table)) == 10 and open_table(table).read(filters=[("ts", "=", 2)]).num_rows == 3,
             "the landed files")
        land(source, batch(range(10, 12)))
        wait(lambda: pending(table) or len(ids(table)) == 12, "the next batch")
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, with the batch in flight when it could be caught

    helper = threading.Thread(target=while_it_runs)
    helper.start()
    with caplog.at_level("INFO", logger="upsertlake.progress"):  # stderr is no terminal: its lines are logged
        code, out, err = cli_in_process(capsys, *args, "--continuous", "--interval", "0.2")
    helper.join()
    assert code == 0, err
    assert "stopping after the batch in flight" in caplog.messages
    assert any(m.startswith("batch 0: 5 inserted") for m in caplog.messages)
    assert pending(table) == []  # the batch in flight was finished, not abandoned
    assert len(ids(table)) == 12

    land(source, batch(range(12, 14)))
    code, out, err = cli_in_process(capsys, *args, "--once")
    assert code == 0, err
    assert out.startswith("ingested 1 micro-batches") and "2 inserted" in out
    data = {r["id"]: r["v"] for r in open_table(table).read(columns=["id", "v"]).to_pylist()}
    assert data == {f"k{i:03d}": (f"new{i}" if i < 3 else f"v{i}") for i in range(14)}
    recorded = [b for b in batches(table, "upsertlake_ingest")]
    assert recorded == sorted(set(recorded)) and None not in recorded  # each batch once, in order

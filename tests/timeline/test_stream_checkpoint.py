"""Exactly-once streaming writes, without Spark: the batch id a stream's commit records (Hudi's
`_hudi_streaming_sink_checkpoint`), how the last one of a stream is found (active and archived
timeline, among other streams' commits), and tables Apache Hudi's streaming sink wrote."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import create_table, open_table
from upsertlake.config import Config
from upsertlake.errors import ConfigError, CorruptTableError
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.stream_checkpoint import SINK_CHECKPOINT_KEY, StreamBatch, last_batch_id

from helpers import write_hudi_sink_checkpoint

KEEP_FEW = {"hoodie.keep.min.commits": 2, "hoodie.keep.max.commits": 3, "hoodie.cleaner.commits.retained": 1}


def batch(ids: range) -> pa.Table:
    return pa.table({"id": [f"k{i}" for i in ids], "ts": [1] * len(ids)})


def test_the_key_and_value_are_hudis() -> None:
    """Byte for byte what Hudi's sink writes (Jackson's compact map, the batch id a string), with
    Hudi's default identifier when none is given."""
    assert StreamBatch.of(Config.resolve({}), 7).metadata() == {
        "_hudi_streaming_sink_checkpoint": '{"default_single_writer":"7"}'
    }
    named = {"hoodie.datasource.write.streaming.checkpoint.identifier": "orders"}
    assert StreamBatch.of(Config.resolve(named), 0).metadata() == {SINK_CHECKPOINT_KEY: '{"orders":"0"}'}


def test_identifier_is_required_under_optimistic_concurrency() -> None:
    occ = {"hoodie.write.concurrency.mode": "OPTIMISTIC_CONCURRENCY_CONTROL"}
    with pytest.raises(ConfigError, match=r"needs hoodie.datasource.write.streaming.checkpoint.identifier"):
        StreamBatch.of(Config.resolve(occ), 0)
    named = dict(occ, **{"hoodie.datasource.write.streaming.checkpoint.identifier": "a"})
    assert StreamBatch.of(Config.resolve(named), 0).identifier == "a"
    with pytest.raises(ConfigError, match="start at 0"):
        StreamBatch.of(Config.resolve({}), -1)


def test_last_batch_of_each_stream_among_others_and_in_the_archive(tmp_path: Path) -> None:
    t = create_table(tmp_path, name="t", record_key="id", precombine_field="ts")
    a = [StreamBatch("a", n) for n in range(3)]
    for n, b in enumerate(a):
        t.insert(batch(range(n * 10, n * 10 + 10)), extra_metadata=b.metadata())
    t.insert(batch(range(100, 110)), extra_metadata=StreamBatch("b", 5).metadata())
    timeline = Timeline.load(t.storage)
    assert (last_batch_id(timeline, "a"), last_batch_id(timeline, "b"), last_batch_id(timeline, "c")) == (2, 5, None)
    assert [StreamBatch("a", n).committed(timeline) for n in (1, 2, 3)] == [True, True, False]
    assert StreamBatch("b", 6).committed(timeline) is False

    # Other writers' commits get stream a's commits archived: its last batch is still found.
    for n in range(5):
        t.upsert(batch(range(200 + n, 201 + n)), KEEP_FEW)
    timeline = Timeline.load(t.storage)
    a_commits = [i for i in timeline.completed_writes()
                 if SINK_CHECKPOINT_KEY in timeline.commit_metadata(i).extra_metadata
                 and "\"a\"" in timeline.commit_metadata(i).extra_metadata[SINK_CHECKPOINT_KEY]]
    assert len(a_commits) == 3 and all(i in timeline.archived for i in a_commits)
    assert last_batch_id(timeline, "a") == 2 and StreamBatch("a", 2).committed(timeline)
    assert last_batch_id(timeline, "b") == 5


def test_a_damaged_checkpoint_value_is_named(tmp_path: Path) -> None:
    t = create_table(tmp_path, name="t", record_key="id", precombine_field="ts")
    r = t.insert(batch(range(3)), extra_metadata={SINK_CHECKPOINT_KEY: "batch 3"})
    with pytest.raises(CorruptTableError, match=f"commit {r.instant_time}: _hudi_streaming_sink_checkpoint='batch 3'"):
        last_batch_id(Timeline.load(t.storage), "default_single_writer")


@pytest.mark.parametrize("name", ["v6_nonpartitioned", "v8_nonpartitioned"])
def test_a_table_hudis_sink_wrote_goes_on_where_it_stopped(hudi_table, name: str) -> None:
    root = hudi_table(name)
    timeline = Timeline.load(open_table(root).storage)
    last = timeline.completed_writes()[-1].time
    write_hudi_sink_checkpoint(root, last, "default_single_writer", 4)
    timeline = Timeline.load(open_table(root).storage)
    assert last_batch_id(timeline, "default_single_writer") == 4
    assert StreamBatch("default_single_writer", 4).committed(timeline)
    assert not StreamBatch("default_single_writer", 5).committed(timeline)

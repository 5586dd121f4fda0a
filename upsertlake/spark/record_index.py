"""The metadata table's record index on Spark, as Hudi's Spark writer keeps it: the driver holds
its sources (files, slices) and write stats, never a key.

- `by_key_group_on`: the `ByKeyGroup` of a Spark write. Tasks read the sources (the key changes
  the write tasks staged, the slices an initialization reads), a shuffle gathers the rows by the
  record-index file group each key hashes to (Hudi's hash, `metadata.keys.file_group_index`), and
  each group is written by one task (a few groups a task) as its log file (or, at an
  initialization, its base file) with the in-process metadata writer's code; only write stats
  come back.
- `record_index_located`: RECORD_INDEX's lookup for the distributed tag (`tagging.tag`): the
  batch's keys shuffled the same way, each task looking its keys up in its file groups' files.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from functools import partial
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from upsertlake.index.record_index import record_index_table
from upsertlake.metadata.keys import file_group_index
from upsertlake.metadata.partitions import RECORD_INDEX
from upsertlake.schema.columns import FILE_NUMBER, KEY, LOOKUP_KEY, STORED_KEY
from upsertlake.services.key_groups import KEY_CHANGES, ByKeyGroup, Groups, GroupWrite
from upsertlake.spark.session import collect_settled, each_in_task
from upsertlake.spark.task_errors import reraised_named
from upsertlake.spark.types import spark_schema_of, task_table
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.commit_metadata import WriteStat

S = TypeVar("S")
R = TypeVar("R")
GROUP = "_group"
TASKS_PER_CORE = 2  # tasks a source-reading or group-writing job has per core (at most)
GROUPED = KEY_CHANGES.append(pa.field(GROUP, pa.int32()))
WRITTEN = pa.schema([(GROUP, pa.int32()), ("stats", pa.binary())])
KEYS = pa.schema([(LOOKUP_KEY, pa.string()), (GROUP, pa.int32())])
LOCATED = pa.schema([(STORED_KEY, pa.string()), (FILE_NUMBER, pa.int32())])


class OnSpark:
    """`ByKeyGroup` as Spark jobs: tasks read the sources (a few each), the rows are shuffled by
    file group, and tasks write the file groups: one per group for an initialization (`every`:
    each group's base file holds a share of all the keys), else a few groups per task (a write's
    changes are small; most groups of a large index get none). A file group without rows that
    must be written (an initialization's empty base file) is written by the driver: it holds no
    key. `each`: a task per item."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def __call__(
        self, sources: list[S], read: Callable[[S], pa.Table], groups: Groups, write: GroupWrite, every: bool, /
    ) -> list[WriteStat]:
        spark = self.spark
        slots = max(1, spark.sparkContext.defaultParallelism * TASKS_PER_CORE)
        rows = spark.range(len(sources), numPartitions=max(1, min(len(sources), slots))).mapInArrow(
            partial(_read_task, sources, read), spark_schema_of(KEY_CHANGES)
        )
        counted = callable(groups)
        if counted:
            rows = rows.persist()
        try:
            count = groups(rows.count()) if callable(groups) else groups
            keyed = rows.mapInArrow(partial(_group_task, count, GROUPED), spark_schema_of(GROUPED))
            tasks = count if every else min(count, slots)
            out = keyed.repartitionById(tasks, F.col(GROUP) % tasks).mapInArrow(
                partial(_write_task, write), spark_schema_of(WRITTEN)
            )
            written = {r[0]: pickle.loads(r[1]) for r in collect_settled(spark, out)}
        finally:
            if counted:
                rows.unpersist()
        if every:
            empty = KEY_CHANGES.empty_table()
            written.update({g: write(g, empty) for g in range(count) if g not in written})
        return [s for g in sorted(written) for s in written[g]]

    def each(self, fn: Callable[[S], R], items: list[S], /) -> list[R]:
        return each_in_task(self.spark, fn, items)


def by_key_group_on(spark: SparkSession) -> ByKeyGroup:
    """The `ByKeyGroup` of a Spark write (`OnSpark`)."""
    return OnSpark(spark)


def record_index_located(prepared: DataFrame, timeline: Timeline, file_groups: list[tuple[str, str]]) -> DataFrame:
    """RECORD_INDEX's stored (key, file number) rows of the batch's keys (`tagging.tag`; a data
    file group's number is its place in `file_groups`, log-only groups included): tasks hash the
    keys to the record index's file groups, a shuffle gathers each group's keys in one task (a
    few groups a task), which looks them up in that group's files alone (point lookups in its
    HFile base file and log blocks). The driver lists the index's file groups and numbers the
    data file groups."""
    groups = len(record_index_table(timeline).slices(RECORD_INDEX))
    numbers = {group: n for n, group in enumerate(file_groups)}
    keys = prepared.select(F.col(KEY).alias(LOOKUP_KEY))
    keyed = keys.mapInArrow(partial(_group_task, groups, KEYS), spark_schema_of(KEYS))
    tasks = min(groups, max(1, prepared.sparkSession.sparkContext.defaultParallelism * TASKS_PER_CORE))
    return keyed.repartitionById(tasks, F.col(GROUP) % tasks).mapInArrow(
        partial(_lookup_task, timeline, numbers), spark_schema_of(LOCATED)
    )


# -- executor functions (module level, so Spark pickles references to them) --------------------
@reraised_named
def _read_task(
    sources: list[S], read: Callable[[S], pa.Table], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The KEY_CHANGES rows of this task's sources (numbered by the rows of `spark.range`)."""
    numbers = task_table(batches)
    for n in [] if numbers is None else numbers.column(0).to_pylist():
        yield from read(sources[n]).cast(KEY_CHANGES).to_batches()


@reraised_named
def _group_task(groups: int, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each row's record-index file group (of `groups`) beside it (`schema`: the rows' and GROUP), for the shuffle."""
    for batch in batches:
        of_row = pa.array(file_group_index(batch.column(LOOKUP_KEY), groups).astype("int32"))
        yield pa.RecordBatch.from_arrays([*batch.columns, of_row], schema=schema)


@reraised_named
def _lookup_task(
    timeline: Timeline, numbers: dict[tuple[str, str], int], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The stored file numbers of this task's keys (every key of its record-index file groups)."""
    keys = task_table(batches)
    if keys is None:
        return
    found = record_index_table(timeline).record_locations(pc.unique(keys.column(LOOKUP_KEY)).to_pylist())
    located = [(key, numbers[where]) for key, where in found.items() if where in numbers]
    yield pa.RecordBatch.from_arrays(
        [pa.array([k for k, _ in located], pa.string()), pa.array(np.array([n for _, n in located], np.int32))],
        schema=LOCATED,
    )


@reraised_named
def _write_task(write: GroupWrite, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Write each file group of this task (every row of a group is here) with `write`; their
    stats, pickled, come back a row per group."""
    rows = task_table(batches)
    if rows is None:
        return
    of_row = rows.column(GROUP).to_numpy()
    for group in np.unique(of_row):
        mine = rows.filter(pa.array(of_row == group)).select(KEY_CHANGES.names)
        stats = write(int(group), mine)
        yield pa.RecordBatch.from_pydict({GROUP: [int(group)], "stats": [pickle.dumps(stats)]}, schema=WRITTEN)

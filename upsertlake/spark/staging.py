"""Rows a Python data source write stages on the table's storage, then merges in one process.

The Python data source API hands each task its rows before any shuffle and runs the commit in one
Python worker the JVM starts, which cannot start Spark jobs: tasks stage their rows as parquet
under `.hoodie/.temp/spark-staging-<job>/` (on the table's own store: executors share no disk with
the driver), and the commit merges them with the in-process engine, then deletes them. Above
`upsertlake.save.max.records` staged rows (counted from the staged files' footers) it refuses
before merging (`BatchTooLargeError`). A job whose driver died leaves its staging behind: the next
commit deletes staging nothing was written to for STALE_STAGING_HOURS.

Both writers of the data source use it: `.save()` (`spark.source`) and the streaming sink
(`spark.stream`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import WriterCommitMessage

from upsertlake.engine.write_result import WriteResult
from upsertlake.errors import BatchTooLargeError
from upsertlake.spark.options import SAVE_MAX_RECORDS, WriteOptions
from upsertlake.storage import Storage
from upsertlake.table.table import Table
from upsertlake.timeline.layouts import METAFOLDER

TEMP = f"{METAFOLDER}/.temp"
STAGING_PREFIX = "spark-staging-"  # a job's folder in TEMP: spark-staging-<job>
# A job whose driver died stages rows that neither its commit nor its abort deletes; the next
# data source write deletes staging untouched for this long (a live job's newest file is younger:
# its tasks stage as they end, and its commit runs right after the last).
STALE_STAGING_HOURS = 24


@dataclass
class StagedFile(WriterCommitMessage):
    path: str | None  # None: the task had no rows, and staged no file
    rows: int


@dataclass(frozen=True)
class Staging:
    """One job's staging folder on the table's storage, and the schema its rows are staged in."""

    storage: Storage
    schema: pa.Schema
    folder: str

    @classmethod
    def of(cls, storage: Storage, schema: pa.Schema, job: str) -> Staging:
        return cls(storage, schema, f"{TEMP}/{STAGING_PREFIX}{job}")

    def stage(self, batches: Iterator[pa.RecordBatch]) -> StagedFile:
        """A task's rows as one parquet file (none for a task without rows)."""
        target, rows, out = f"{self.folder}/{uuid.uuid4().hex}.parquet", 0, None
        with ExitStack() as opened:  # the writer closes before its sink
            for batch in batches:
                if not batch.num_rows:
                    continue
                if out is None:
                    out = opened.enter_context(pq.ParquetWriter(opened.enter_context(self.storage.open_output(target)),
                                                                self.schema))
                out.write_batch(batch.cast(self.schema) if batch.schema != self.schema else batch)
                rows += batch.num_rows
        return StagedFile(target if out is not None else None, rows)

    def rows(self, messages: Sequence[WriterCommitMessage | None]) -> tuple[list[str], int]:
        """The staged files of the tasks' messages (`StagedFile`s) and their rows, counted from
        the footers."""
        files = [m.path for m in messages if isinstance(m, StagedFile) and m.path is not None]
        return files, sum(self.storage.parquet_file(f).metadata.num_rows for f in files)

    def merge(
        self, options: WriteOptions, files: list[str], rows: int, table: Table | None, what: str, instead: str,
        extra_metadata: Mapping[str, str] | None = None,
    ) -> WriteResult:
        """The staged rows written with the options' operation (`table`: already opened, else
        opened or created); refused above the one-process limit, `what` naming the write and
        `instead` the distributed path to take."""
        if rows > options.save_max_records:
            raise BatchTooLargeError(
                f"{what} merges in one Python worker and takes at most {options.save_max_records:,} rows "
                f"({SAVE_MAX_RECORDS}); this batch has {rows:,}. {instead}"
            )
        parts = [self.storage.read_parquet(f).cast(self.schema) for f in files]
        data = pa.concat_tables(parts) if parts else self.schema.empty_table()
        table = table or options.open_or_create(self.schema)
        write = getattr(table, options.operation.value)
        return cast(WriteResult, write(data, options.hoodie, extra_metadata=extra_metadata))

    def remove_stale(self) -> None:
        """Delete other jobs' staging folders with nothing written for STALE_STAGING_HOURS."""
        newest: dict[str, int] = {}
        for entry in self.storage.list(TEMP, recursive=True):
            folder = f"{TEMP}/{entry.path[len(TEMP) + 1 :].split('/')[0]}"
            if folder.startswith(f"{TEMP}/{STAGING_PREFIX}") and folder != self.folder:
                newest[folder] = max(newest.get(folder, 0), entry.mtime_ns)
        cutoff = time.time_ns() - STALE_STAGING_HOURS * 3600 * 10**9
        for folder, mtime_ns in newest.items():
            if mtime_ns < cutoff:
                self.storage.delete_dir(folder)

    def remove(self) -> None:
        """Delete this job's staging; a first write that failed leaves no empty table folders."""
        self.storage.delete_dir(self.folder)
        base = self.storage.os_path()
        if base is None:  # an object store has no empty folders to leave behind
            return
        root = Path(base)
        if not (root / ".hoodie" / "hoodie.properties").exists():
            for folder in (root / ".hoodie" / ".temp", root / ".hoodie", root):
                try:
                    folder.rmdir()
                except OSError:
                    break

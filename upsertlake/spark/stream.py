"""Spark Structured Streaming into a table, exactly once.

The sink: `df.writeStream.format("upsertlake")` (PySpark's Python data source API,
`DataSourceStreamArrowWriter`). Each task stages its rows of a micro-batch (`spark.staging`, one
folder per batch); the commit, in one Python worker, skips a batch its stream already committed
(`timeline.stream_checkpoint`: Hudi's `_hudi_streaming_sink_checkpoint`), writes nothing for an
empty one, and otherwise merges the staged rows with the in-process engine as one commit carrying
the batch id, with the table services after it. A failed commit leaves nothing visible and fails
the query; Spark runs the batch again on restart, and it is written then unless it was committed.
The commit cannot start Spark jobs, so a micro-batch above `upsertlake.save.max.records` rows is
refused (`BatchTooLargeError`) with a pointer to the `foreachBatch` hook.

The hook: `write_batch`, behind `upsertlake.spark.upsert(df, path, batch_id=n, ...)` and its
siblings, the distributed write with the same check and key, for `foreachBatch`.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from upsertlake.config import Config
from upsertlake.engine.write_result import WriteResult
from upsertlake.errors import UpsertlakeError
from upsertlake.spark.options import WriteOptions, write_options
from upsertlake.spark.staging import StagedFile, Staging
from upsertlake.spark.write import write_dataframe
from upsertlake.storage import Storage
from upsertlake.table.table import Table
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.stream_checkpoint import StreamBatch

log = logging.getLogger(__name__)

BATCH_ID = "streaming.sql.batchId"  # the local property Spark sets on a micro-batch's jobs
FOREACH_BATCH_HINT = (
    "Write large micro-batches with foreachBatch and the distributed writer, exactly once as well: "
    "query.writeStream.foreachBatch(lambda df, n: upsertlake.spark.upsert(df, path, batch_id=n, ...))"
)


def stream_batch(options: WriteOptions, batch_id: int, table: Table | None) -> StreamBatch:
    """A micro-batch of the stream the options name (the table's settings count too)."""
    cfg = table.options.with_overrides(options.hoodie) if table is not None else Config.resolve(options.hoodie)
    return StreamBatch.of(cfg, batch_id)


def write_batch(
    df: DataFrame, options: WriteOptions, batch_id: int | None, extra_metadata: dict[str, str] | None = None
) -> WriteResult | None:
    """The distributed write of a DataFrame; given a stream's `batch_id`, exactly once: None (and
    nothing written) when its stream already committed that batch, else one commit recording it
    (and `extra_metadata`)."""
    if batch_id is None:
        return write_dataframe(df, options, extra_metadata)
    table = options.existing()
    batch = stream_batch(options, batch_id, table)
    if table is not None and batch.committed(Timeline.load(table.storage)):
        return None
    return write_dataframe(df, options, {**(extra_metadata or {}), **batch.metadata()}, table=table)


class StreamWriter(DataSourceStreamArrowWriter):
    """The sink of one query run: tasks stage each micro-batch's rows in a folder of their own,
    the commit merges them exactly once."""

    def __init__(self, options: dict[str, str], storage: Storage, schema: pa.Schema) -> None:
        # A missing identifier fails the query before its first batch.
        identifier = stream_batch(write_options(options), 0, None).identifier
        self.options, self.storage, self.schema = options, storage, schema
        # Spark builds the writer again for the commit: the tasks' staging folder is named by what
        # both know, the stream and its query's checkpoint. A batch run again after a crash stages
        # into the folder the crashed run left, and its commit deletes what that run staged.
        checkpoint = next((v for k, v in options.items() if k.lower() == "checkpointlocation"), "")
        self.stream = hashlib.sha1(f"{identifier}\0{checkpoint}".encode()).hexdigest()[:16]

    def _staging(self, batch_id: int | str) -> Staging:
        return Staging.of(self.storage, self.schema, f"stream-{self.stream}-{batch_id}")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedFile:
        ctx = TaskContext.get()
        batch = ctx.getLocalProperty(BATCH_ID) if ctx is not None else None
        if batch is None:
            raise UpsertlakeError(f"a streaming sink task without Spark's {BATCH_ID} property")
        return self._staging(batch).stage(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staging = self._staging(batchId)
        try:
            options = write_options(self.options)
            staging.remove_stale()
            table = options.existing()
            batch = stream_batch(options, batchId, table)
            if table is not None and batch.committed(Timeline.load(table.storage)):
                return
            files, rows = staging.rows(messages)
            if rows == 0:  # an empty micro-batch writes nothing
                return
            result = staging.merge(options, files, rows, table, "writeStream.format('upsertlake')",
                                   FOREACH_BATCH_HINT, batch.metadata())
            log.info("batch %d of stream %r: %s %d rows as %s", batchId, batch.identifier, options.operation,
                     rows, result.instant_time)
        finally:
            staging.remove()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._staging(batchId).remove()

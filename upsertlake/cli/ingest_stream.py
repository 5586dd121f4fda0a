"""`upsertlake ingest --continuous` and `--once`: the dedup ingestion job as a Spark Structured
Streaming query. Spark's file source watches the source folder (the files of the format, at most
`--max-files-per-trigger` a micro-batch, every `--interval` seconds; `--once` runs the same query
with `availableNow`: what is there now, then it stops) and remembers the files it read in its own
checkpoint (by path: a file rewritten in place is not read again). The rows of files the table's
ingest checkpoint holds already (`cli.ingest_checkpoint`: the one-shot ingest read them) are left
out, and each commit records the files its batch read, so every mode skips what another ingested.
Each micro-batch is upserted by
the distributed writer exactly once (`upsertlake.spark.upsert(df, table, batch_id=n)`: the stream's
batch id in the commit, Hudi's `_hudi_streaming_sink_checkpoint`, under its own identifier), so a
restart after a crash goes on without writing a batch twice. Ctrl-C stops after the batch in flight.

The query reads with the types the one-shot ingest reads with (`cli.ingest_read`): the table's for
the columns it has, learned from the files there at the start (the table's schema when there are
none yet). Spark's JVM reads the source and writes its checkpoint, so both must be local folders
(or on a store the session has a Hadoop connector for); the checkpoint defaults to the table's
`.hoodie/.aux/upsertlake/ingest/<identifier>/`.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from upsertlake.cli.ingest_checkpoint import SourceFile, checkpoint, recorded
from upsertlake.cli.input_files import FileFormat, InputFile
from upsertlake.cli.inputs import InputTypes
from upsertlake.cli.output import CliError
from upsertlake.config import options as opt
from upsertlake.storage import parse_location
from upsertlake.table.table import Table
from upsertlake.timeline.operation import Operation
from upsertlake.util.humanize import human_duration

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType

IDENTIFIER = "upsertlake_ingest"  # its own stream: a sink with Hudi's default identifier is another
CHECKPOINTS = ".hoodie/.aux/upsertlake/ingest"


def add_arguments(p: argparse.ArgumentParser) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--continuous", action="store_true",
                      help="keep ingesting files as they land (a Spark streaming query); Ctrl-C stops it")
    mode.add_argument("--once", action="store_true",
                      help="the streaming query run once over the files there now (availableNow)")
    p.add_argument("--interval", type=float, default=10.0, help="--continuous: seconds between micro-batches (10)")
    p.add_argument("--max-files-per-trigger", type=int, default=100, help="files a micro-batch reads at most (100)")
    p.add_argument("--checkpoint", help="the streaming query's checkpoint folder "
                                        f"(default: the table's {CHECKPOINTS}/<identifier>)")


class Stopped(Exception):
    """A micro-batch that began after Ctrl-C: not written, Spark runs it again on restart."""


@dataclass
class Progress:
    """What the query wrote so far, and whether a micro-batch is being written (held while so)."""

    batches: int = 0
    skipped: int = 0
    inserts: int = 0
    updates: int = 0
    writing: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)


def ingest_stream(args: argparse.Namespace, options: dict[str, str], files: list[InputFile],
                  say: Callable[[str], None]) -> dict[str, object]:
    """Run the query until it has read what is there (`--once`) or until Ctrl-C; the summary.
    `files`: the source's files of the format now."""
    import upsertlake.spark as uls  # only these modes need pyspark
    from upsertlake.spark.options import write_options
    from upsertlake.spark.stream import write_batch
    from upsertlake.spark.types import arrow_schema_of

    source = parse_location(args.source)
    if source.kind != "local":
        raise CliError(f"--continuous and --once read {args.source} with Spark's file source, whose JVM reads "
                       "local folders here; ingest from an object store without them")
    options = {opt.STREAMING_CHECKPOINT_IDENTIFIER.key: IDENTIFIER, **options}
    checked = write_options(options, args.table, Operation.UPSERT)
    table = checked.existing()
    if not files and table is None:
        raise CliError(f"no {args.format} files at {args.source} and no table at {args.table} to take the schema from")
    began = time.perf_counter()
    spark = uls.build_session(args.spark_master, "upsertlake-ingest")
    say(f"spark session ({args.spark_master}) in {human_duration(time.perf_counter() - began)}")
    schema = _schema(spark, args, files, table)
    if table is None:  # created now, so that the checkpoint folder can live in it
        table = checked.open_or_create(arrow_schema_of(schema))
    checkpoint = args.checkpoint or _default_checkpoint(checked.path, options[opt.STREAMING_CHECKPOINT_IDENTIFIER.key])

    reader = (spark.readStream.schema(schema).option("maxFilesPerTrigger", args.max_files_per_trigger)
              .option("recursiveFileLookup", "true").option("pathGlobFilter", _glob(args.format)))
    if args.format is FileFormat.CSV:
        reader = reader.option("header", "true")
    frames = reader.option("mode", "FAILFAST").format(args.format.value).load(source.uri)
    progress = Progress()

    def write(df: DataFrame, batch_id: int) -> None:
        with progress.writing:
            if progress.stopping.is_set():
                raise Stopped(f"batch {batch_id} began after Ctrl-C")
            started = time.perf_counter()
            df, new = _not_ingested(df, checked.path, checked.storage)
            if not new:
                progress.skipped += 1
                say(f"batch {batch_id}: its files were ingested already, skipped")
                return
            result = write_batch(df, checked, batch_id, recorded(new))
            took = human_duration(time.perf_counter() - started)
            if result is None:
                progress.skipped += 1
                say(f"batch {batch_id}: already in the table, skipped")
                return
            progress.batches += 1
            progress.inserts += result.num_inserts
            progress.updates += result.num_updates
            say(f"batch {batch_id}: {result.num_inserts} inserted, {result.num_updates} updated, "
                f"{result.num_deletes} deleted in {took} ({result.instant_time})")

    writer = frames.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
    every = f"{args.interval} seconds"
    writer = writer.trigger(availableNow=True) if args.once else writer.trigger(processingTime=every)
    # Ours replaces PySpark's SIGINT handler, which would cancel the jobs of the batch in flight.
    previous = signal.signal(signal.SIGINT, lambda *_: progress.stopping.set())
    try:
        query = writer.start()
        say(f"ingesting {args.source} into {args.table}"
            + ("" if args.once else "; Ctrl-C stops after the batch in flight"))
        _run(query, progress, say)
    finally:
        signal.signal(signal.SIGINT, previous)
    return {"batches": progress.batches, "skipped": progress.skipped, "inserts": progress.inserts,
            "updates": progress.updates, "checkpoint": checkpoint}


def _not_ingested(df: DataFrame, table: str, store: Mapping[str, str]) -> tuple[DataFrame, list[SourceFile]]:
    """A micro-batch without the rows of files the table's checkpoint holds as they are now (the
    one-shot ingest, or an earlier stream, read them), and the files left: what its commit records.
    Spark's file source tells a batch's files only through `input_file_name()` (local URIs)."""
    from pyspark.sql.functions import input_file_name

    uris = [row[0] for row in df.select(input_file_name()).distinct().collect()]
    done = checkpoint(table, store)
    files = {uri: _source_file(uri) for uri in uris}
    ingested = [uri for uri, f in files.items() if done.has(f)]
    if ingested:
        df = df.where(~input_file_name().isin(ingested))
    return df, [f for uri, f in sorted(files.items()) if uri not in ingested]


def _source_file(uri: str) -> SourceFile:
    """A local file Spark names by URI (`file:///in/a%20b.parquet`), as ingest records it."""
    path = unquote(urlparse(uri).path)
    stat = os.stat(path)
    return SourceFile(path, stat.st_size, stat.st_mtime_ns)


def _run(query: StreamingQuery, progress: Progress, say: Callable[[str], None]) -> None:
    """Wait for the query; on Ctrl-C let the batch in flight finish, then stop it."""
    from pyspark.errors import StreamingQueryException

    try:
        while query.isActive and not progress.stopping.is_set():
            # PySpark takes seconds as a float here (it multiplies by 1000); its stub says int.
            query.awaitTermination(0.2)  # type: ignore[arg-type]
        if progress.stopping.is_set():
            say("stopping after the batch in flight")
            with progress.writing:  # the batch in flight ends; a later one raises Stopped
                query.stop()
    except StreamingQueryException as exc:
        if not (progress.stopping.is_set() and Stopped.__name__ in str(exc)):
            raise


def _schema(spark: SparkSession, args: argparse.Namespace, files: list[InputFile], table: Table | None) -> StructType:
    """The query's schema: the files there now, read as the one-shot ingest reads them (the
    table's types for its columns), or the table's schema when there are none yet."""
    from upsertlake.cli.ingest_read import read_sources
    from upsertlake.spark.types import spark_schema_of

    if not files:
        assert table is not None, "ingest refuses a run with neither files nor a table"
        return spark_schema_of(table.schema())
    types = InputTypes.of(table) if table is not None else InputTypes.of_fields(args.record_key, args.partition_fields)
    return read_sources(spark, files, args.format, types).schema


def _glob(fmt: FileFormat) -> str:
    """The file names of a format, as Spark's `pathGlobFilter` takes them (`*.{json,ndjson,jsonl}`)."""
    return "*.{" + ",".join(ext[1:] for ext in fmt.extensions) + "}"


def _default_checkpoint(table: str, identifier: str) -> str:
    if parse_location(table).kind != "local":
        raise CliError(f"the table {table} is on an object store, where Spark's JVM keeps no checkpoint here: "
                       "pass --checkpoint DIR")
    return f"{parse_location(table).uri}/{CHECKPOINTS}/{identifier}"

"""`upsertlake ingest`: a dedup ingestion job on Spark. It reads the input files it has not ingested
yet (from a local folder or an object store, `cli.input_files`), dedups and upserts them with the
distributed writer, and records the files it read (path or URI, size and modification time, as
Hudi's DeltaStreamer checkpoints by modification time; on an object store the listing's size and
last-modified time) in the commit's extraMetadata, so the next run picks up only new files and
files changed since (a file rewritten in place is read again; the upsert's dedup by precombine
field keeps its old rows from doubling), and a failed run, whose commit never completed, is simply
retried.

Commits of earlier versions recorded paths only: such a file counts as ingested unless it was
modified after the instant time of the commit that recorded it."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from upsertlake.cli.ingest_stream import add_arguments as add_stream_arguments
from upsertlake.cli.ingest_stream import ingest_stream
from upsertlake.cli.input_files import (
    INGEST_FORMATS,
    InputFile,
    InputFormat,
    add_input_store_option,
    find,
    input_store_options,
)
from upsertlake.cli.inputs import InputTypes
from upsertlake.cli.output import CliError, add_key_fields, parse_options, print_json, store_options
from upsertlake.errors import TableNotFoundError, UpsertlakeError
from upsertlake.storage import parse_location
from upsertlake.table.open import open_table
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant_time import parse_instant_time
from upsertlake.timeline.operation import Operation
from upsertlake.util.humanize import human_duration

INGESTED_KEY = "upsertlake.ingest.files"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("ingest", parents=[common], help="upsert new input files with Spark, each file once")
    p.add_argument("--source", required=True, help="a folder or a glob of input files (a path or URI)")
    add_input_store_option(p)
    p.add_argument("--format", required=True, type=InputFormat, choices=INGEST_FORMATS, help="input format")
    p.add_argument("--table", required=True, help="the table (created on the first run)")
    p.add_argument("--name", help="table name when creating it (default: the folder's name)")
    add_key_fields(p)
    p.add_argument("--spark-master", default="local[2]", help="Spark master (default local[2])")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="a Hudi write option (repeatable)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_stream_arguments(p)
    p.set_defaults(func=ingest)


def source_files(source: str, fmt: InputFormat, options: Mapping[str, str] | None = None) -> list[InputFile]:
    """Input files of the format under a folder (recursively) or matching a glob, sorted."""
    found = find(source, options)
    if not found:
        raise CliError(f"no input files at {source}")
    return [f for f in found if f.has_format(fmt)]


@dataclass(frozen=True)
class SourceFile:
    """An input file as ingested: its path (or URI) and the size and modification time it had then
    (on an object store, the listing's size and last-modified time)."""

    path: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, f: InputFile) -> SourceFile:
        return cls(f.uri, f.size, f.mtime_ns)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "mtime_ns": self.mtime_ns}


@dataclass
class Checkpoint:
    """What completed commits recorded as ingested: files with their size and modification time,
    and (commits of earlier versions) bare paths with the instant time that recorded them."""

    files: set[SourceFile] = field(default_factory=set)
    paths: dict[str, int] = field(default_factory=dict)  # path -> latest instant recording it, epoch ns

    def has(self, f: SourceFile) -> bool:
        """Whether `f`, as it is now, was ingested: same path, size and modification time."""
        return f in self.files or f.mtime_ns <= self.paths.get(f.path, -1)

    def seen_paths(self) -> set[str]:
        return set(self.paths) | {f.path for f in self.files}


def checkpoint(table_path: str, storage_options: Mapping[str, str] | None = None) -> Checkpoint:
    """Every input file a completed commit of the table recorded as ingested."""
    done = Checkpoint()
    try:
        timeline = Timeline.load(open_table(table_path, storage_options=storage_options).storage)
    except TableNotFoundError:
        return done
    for inst in timeline.completed_writes():
        recorded = timeline.commit_metadata(inst).extra_metadata.get(INGESTED_KEY)
        for entry in json.loads(recorded) if recorded else ():
            if isinstance(entry, str):  # a path-only checkpoint: as of the instant that recorded it
                at = int(parse_instant_time(inst.time).timestamp() * 1000) * 1_000_000
                done.paths[entry] = max(done.paths.get(entry, -1), at)
            else:
                done.files.add(SourceFile(entry["path"], int(entry["size"]), int(entry["mtime_ns"])))
    return done


def ingest(args: argparse.Namespace) -> int:
    if args.continuous or args.once:
        return _ingest_stream(args)
    started = time.perf_counter()
    files = source_files(args.source, args.format, input_store_options(args))  # listed before reading any
    done = checkpoint(args.table, store_options(args))
    new = [f for f in files if not done.has(SourceFile.of(f))]
    seen = done.seen_paths()
    changed = sum(1 for f in new if f.uri in seen)
    _say(
        f"{len(files)} input files, {len(new) - changed} new"
        + (f", {changed} changed since ingested" if changed else "")
    )
    summary: dict[str, Any] = {
        "input_files": len(files), "new_files": len(new) - changed, "changed_files": changed, "instant_time": None,
    }
    if new:
        summary.update(
            _spark_job(f"ingest of {len(new)} file(s) failed", lambda: _ingest(args, new, parse_options(args.option)))
        )
    summary["seconds"] = round(time.perf_counter() - started, 3)
    if args.json:
        print_json(summary)
    elif new:
        print(
            f"ingested {len(new)} files in {human_duration(summary['seconds'])}: {summary['inserts']} inserted, "
            f"{summary['updates']} updated ({summary['instant_time']})"
        )
    else:
        print("nothing new to ingest")
    return 0


def _ingest_stream(args: argparse.Namespace) -> int:
    """`--continuous` / `--once`: the streaming query (`cli.ingest_stream`)."""
    started = time.perf_counter()
    options = dict(parse_options(args.option), record_key=args.record_key, storage_options=store_options(args))
    options.update(_table_options(args, _table_exists(args.table, store_options(args))))
    summary = _spark_job("ingest stopped", lambda: ingest_stream(args, options, input_store_options(args), _say))
    summary["seconds"] = round(time.perf_counter() - started, 3)
    if args.json:
        print_json(summary)
    else:
        skipped = f", {summary['skipped']} already in the table" if summary["skipped"] else ""
        print(f"ingested {summary['batches']} micro-batches in {human_duration(summary['seconds'])}: "
              f"{summary['inserts']} inserted, {summary['updates']} updated{skipped}")
    return 0


def _spark_job(failed: str, job: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Runs a Spark job; its failure is told by its reason, not the JVM's stack."""
    try:
        return job()
    except (UpsertlakeError, CliError):
        raise
    except Exception as exc:
        raise CliError(f"{failed}: {spark_reason(exc)}") from exc


def _table_options(args: argparse.Namespace, exists: bool) -> dict[str, str]:
    """The table's name (when creating it) and the key settings the command line gives."""
    opts: dict[str, str] = {}
    if args.name or not exists:
        # The name is the table's once created: a default differing from it would be a config conflict.
        opts["table"] = args.name or parse_location(args.table).uri.rsplit("/", 1)[-1]
    if args.precombine_field:
        opts["precombine_field"] = args.precombine_field
    if args.partition_fields:
        opts["partition_fields"] = args.partition_fields
    if args.table_type:
        opts["table_type"] = args.table_type
    return opts


def _ingest(args: argparse.Namespace, sources: list[InputFile], options: dict[str, str]) -> dict[str, Any]:
    import upsertlake.spark as uls  # only this command needs pyspark
    from upsertlake.cli.ingest_read import read_sources
    from upsertlake.spark.options import write_options
    from upsertlake.spark.write import write_dataframe

    began = time.perf_counter()
    spark = uls.build_session(args.spark_master, "upsertlake-ingest")  # workers run this interpreter
    uls.register(spark)
    _say(f"spark session ({args.spark_master}) in {human_duration(time.perf_counter() - began)}")
    exists = _table_exists(args.table, store_options(args))
    df = read_sources(spark, sources, args.format, _input_types(args, exists))
    opts = dict(options, record_key=args.record_key, storage_options=store_options(args))
    opts.update(_table_options(args, exists))
    ingested = json.dumps([SourceFile.of(f).to_json() for f in sources])
    result = write_dataframe(df, write_options(opts, args.table, Operation.UPSERT), {INGESTED_KEY: ingested})
    for stage, seconds in result.stage_seconds.items():
        _say(f"  {stage:<8} {human_duration(seconds)}")
    return {
        "instant_time": result.instant_time,
        "inserts": result.num_inserts,
        "updates": result.num_updates,
        "stage_seconds": {k: round(v, 3) for k, v in result.stage_seconds.items()},
    }


def _input_types(args: argparse.Namespace, exists: bool) -> InputTypes:
    """The table's types, as the commands that write named files read them (`cli.inputs`)."""
    if exists:
        return InputTypes.of(open_table(args.table, storage_options=store_options(args)))
    return InputTypes.of_fields(args.record_key, args.partition_fields)


PYTHON_TRACEBACK = "Traceback (most recent call last):"


def spark_reason(exc: BaseException) -> str:
    """The innermost Spark error class and message of a failure (e.g. `[MALFORMED_CSV_RECORD]
    Malformed CSV record: 2,1,b,extra`), without the Java stack traces around it; for a Python
    task's failure (reading a file on an object store), its exception's message."""
    raw = str(exc)
    if PYTHON_TRACEBACK in raw:
        last = re.findall(r"^[\w.]*?(\w+): (.+)$", raw.rsplit(PYTHON_TRACEBACK, 1)[1].split("\n\tat ")[0], re.M)
        if last:
            name, message = last[-1]
            return message if name == "CliError" else f"{name}: {message}"
    text = " ".join(raw.split())
    reasons = re.findall(r"(\[[A-Z_.]+\] .*?)(?= at [\w$.]+\(| SQLSTATE|$)", text)
    return reasons[-1] if reasons else text[:300]


def _table_exists(path: str, storage_options: Mapping[str, str]) -> bool:
    try:
        open_table(path, storage_options=storage_options)
    except TableNotFoundError:
        return False
    return True


def _say(line: str) -> None:
    """Progress goes to stderr, so stdout stays the summary (or JSON)."""
    print(line, file=sys.stderr, flush=True)

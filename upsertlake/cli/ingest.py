"""`upsertlake ingest`: a dedup ingestion job on Spark. It reads the input files it has not ingested
yet (from a local folder or an object store, `cli.input_files`), dedups and upserts them with the
distributed writer, and records the files it read in the commit (`cli.ingest_checkpoint`, the one checkpoint of every
mode), so the next run picks up only new files and files changed since (a file rewritten in place
is read again; the upsert's dedup by precombine field keeps its old rows from doubling), and a
failed run, whose commit never completed, is simply retried. Files of the source that are not of
the format are reported (how many, the first names), not skipped silently."""

from __future__ import annotations

import argparse
import re
import time
import warnings
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from upsertlake.cli.ingest_checkpoint import SourceFile, checkpoint, recorded
from upsertlake.cli.ingest_stream import add_arguments as add_stream_arguments
from upsertlake.cli.ingest_stream import ingest_stream
from upsertlake.cli.input_files import (
    INGEST_FORMATS,
    FileFormat,
    InputFile,
    add_input_store_option,
    find,
    input_store_options,
)
from upsertlake.cli.inputs import InputTypes
from upsertlake.cli.output import CliError, add_key_fields, parse_options, print_json, store_options
from upsertlake.cli.progress import say
from upsertlake.errors import TableNotFoundError, UpsertlakeError, UpsertlakeWarning
from upsertlake.storage import parse_location
from upsertlake.table.open import open_table
from upsertlake.timeline.operation import Operation
from upsertlake.util.humanize import human_duration


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("ingest", parents=[common], help="upsert new input files with Spark, each file once")
    p.add_argument("--source", required=True, help="a folder or a glob of input files (a path or URI)")
    add_input_store_option(p)
    p.add_argument("--format", required=True, type=FileFormat, choices=INGEST_FORMATS, help="input format")
    p.add_argument("--table", required=True, help="the table (created on the first run)")
    p.add_argument("--name", help="table name when creating it (default: the folder's name)")
    add_key_fields(p)
    p.add_argument("--spark-master", default="local[2]", help="Spark master (default local[2])")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="a Hudi write option (repeatable)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_stream_arguments(p)
    p.set_defaults(func=ingest)


def source_files(
    source: str, fmt: FileFormat, options: Mapping[str, str] | None = None, required: bool = True
) -> list[InputFile]:
    """Input files of the format under a folder (recursively) or matching a glob, sorted; the
    others are named in a warning (an ingest that reads none of them says why). `required`: no
    file at all is an error (a stream may start before its first file lands)."""
    found = find(source, options)
    if not found and required:
        raise CliError(f"no input files at {source}")
    ours = [f for f in found if f.has_format(fmt)]
    others = [f.rel for f in found if not f.has_format(fmt)]
    if others:
        first = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        warnings.warn(f"{len(others)} file(s) at {source} are not {fmt} ({'/'.join(fmt.extensions)}) and are not "
                      f"ingested: {first}", UpsertlakeWarning, stacklevel=2)
    return ours


def ingest(args: argparse.Namespace) -> int:
    if args.continuous or args.once:
        return _ingest_stream(args)
    started = time.perf_counter()
    files = source_files(args.source, args.format, input_store_options(args))  # listed before reading any
    done = checkpoint(args.table, store_options(args))
    new = [f for f in files if not done.has(SourceFile.of(f))]
    seen = done.seen_paths()
    changed = sum(1 for f in new if f.uri in seen)
    say(
        args,
        f"{len(files)} input files, {len(new) - changed} new"
        + (f", {changed} changed since ingested" if changed else ""),
    )
    summary: dict[str, Any] = {
        "input_files": len(files),
        "new_files": len(new) - changed,
        "changed_files": changed,
        "instant_time": None,
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
    files = source_files(args.source, args.format, input_store_options(args), required=False)
    summary = _spark_job("ingest stopped", lambda: ingest_stream(args, options, files, partial(say, args)))
    summary["seconds"] = round(time.perf_counter() - started, 3)
    if args.json:
        print_json(summary)
    else:
        skipped = f", {summary['skipped']} already in the table" if summary["skipped"] else ""
        print(
            f"ingested {summary['batches']} micro-batches in {human_duration(summary['seconds'])}: "
            f"{summary['inserts']} inserted, {summary['updates']} updated{skipped}"
        )
    return 0


def _spark_job(failed: str, job: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Runs a Spark job; its failure is told by its reason, not the JVM's stack."""
    try:
        return job()
    except (UpsertlakeError, CliError):
        raise
    except Exception as exc:  # any Spark failure
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
    say(args, f"spark session ({args.spark_master}) in {human_duration(time.perf_counter() - began)}")
    exists = _table_exists(args.table, store_options(args))
    df = read_sources(spark, sources, args.format, _input_types(args, exists))
    opts = dict(options, record_key=args.record_key, storage_options=store_options(args))
    opts.update(_table_options(args, exists))
    result = write_dataframe(
        df, write_options(opts, args.table, Operation.UPSERT), recorded([SourceFile.of(f) for f in sources])
    )
    for stage, seconds in result.stage_seconds.items():
        say(args, f"  {stage:<8} {human_duration(seconds)}")
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

"""`upsertlake ingest`: a dedup ingestion job on Spark. It reads the input files it has not ingested
yet, dedups and upserts them with the distributed writer, and records the files it read (path, size
and modification time, as Hudi's DeltaStreamer checkpoints by modification time) in the commit's
extraMetadata, so the next run picks up only new files and files changed since (a file rewritten in
place is read again; the upsert's dedup by precombine field keeps its old rows from doubling), and a
failed run, whose commit never completed, is simply retried.

Commits of earlier versions recorded paths only: such a file counts as ingested unless it was
modified after the instant time of the commit that recorded it."""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from upsertlake.cli.inputs import InputTypes
from upsertlake.cli.output import CliError, add_key_fields, human_duration, parse_options, print_json
from upsertlake.errors import TableNotFoundError, UpsertlakeError
from upsertlake.table.table import open_table
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant_time import parse_instant_time

INGESTED_KEY = "upsertlake.ingest.files"
EXTENSIONS = {"parquet": (".parquet", ".pq"), "json": (".json", ".ndjson", ".jsonl"), "csv": (".csv",)}


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("ingest", parents=[common], help="upsert new input files with Spark, each file once")
    p.add_argument("--source", required=True, help="a folder or a glob of input files")
    p.add_argument("--format", required=True, choices=sorted(EXTENSIONS), help="input format")
    p.add_argument("--table", required=True, help="the table (created on the first run)")
    p.add_argument("--name", help="table name when creating it (default: the folder's name)")
    add_key_fields(p)
    p.add_argument("--spark-master", default="local[2]", help="Spark master (default local[2])")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="a Hudi write option (repeatable)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=ingest)


def source_files(source: str, fmt: str) -> list[str]:
    """Input files of the format under a folder (recursively) or matching a glob, sorted."""
    if os.path.isdir(source):
        found = [str(p) for p in Path(source).rglob("*") if p.is_file()]
    else:
        found = glob.glob(source, recursive=True)
    files = sorted(
        str(Path(f).resolve()) for f in found
        if f.lower().endswith(EXTENSIONS[fmt]) and not Path(f).name.startswith((".", "_"))
    )
    if not found:
        raise CliError(f"no input files at {source}")
    return files


@dataclass(frozen=True)
class SourceFile:
    """An input file as ingested: its path and the size and modification time it had then."""

    path: str
    size: int
    mtime_ns: int

    @classmethod
    def stat(cls, path: str) -> SourceFile:
        try:
            st = os.stat(path)
        except OSError as exc:
            raise CliError(f"cannot read input file {path}: {exc.strerror}") from exc
        return cls(path, st.st_size, st.st_mtime_ns)

    def to_json(self) -> dict[str, object]:
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


def checkpoint(table_path: str) -> Checkpoint:
    """Every input file a completed commit of the table recorded as ingested."""
    done = Checkpoint()
    try:
        timeline = Timeline.load(open_table(table_path).storage)
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
    started = time.perf_counter()
    files = [SourceFile.stat(f) for f in source_files(args.source, args.format)]  # before reading any
    done = checkpoint(args.table)
    new = [f for f in files if not done.has(f)]
    seen = done.seen_paths()
    changed = sum(1 for f in new if f.path in seen)
    _say(f"{len(files)} input files, {len(new) - changed} new" + (f", {changed} changed since ingested" if changed else ""))
    summary: dict[str, object] = {
        "input_files": len(files), "new_files": len(new) - changed, "changed_files": changed, "instant_time": None,
    }
    if new:
        try:
            summary.update(_ingest(args, new, parse_options(args.option)))
        except (UpsertlakeError, CliError):
            raise
        except Exception as exc:  # noqa: BLE001 - a Spark job's failure: its reason, not the JVM's stack
            raise CliError(f"ingest of {len(new)} file(s) failed: {spark_reason(exc)}") from exc
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


def _ingest(args: argparse.Namespace, sources: list[SourceFile], options: dict[str, str]) -> dict[str, object]:
    import upsertlake.spark as uls  # only this command needs pyspark
    from upsertlake.spark.options import write_options
    from upsertlake.spark.write import write_dataframe

    began = time.perf_counter()
    spark = uls.build_session(args.spark_master, "upsertlake-ingest")  # workers run this interpreter
    uls.register(spark)
    _say(f"spark session ({args.spark_master}) in {human_duration(time.perf_counter() - began)}")
    files = [f.path for f in sources]
    exists = _table_exists(args.table)
    df = _read(spark, args.format, files, _input_types(args, exists))
    opts = dict(options, record_key=args.record_key)
    if args.name or not exists:
        # The name is the table's once created: a default differing from it would be a config conflict.
        opts["table"] = args.name or Path(args.table).resolve().name
    if args.precombine_field:
        opts["precombine_field"] = args.precombine_field
    if args.partition_fields:
        opts["partition_fields"] = args.partition_fields
    result = write_dataframe(df, write_options(opts, args.table, "upsert"), {INGESTED_KEY: json.dumps([f.to_json() for f in sources])})
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
        return InputTypes.of(open_table(args.table))
    fields = f"{args.record_key},{args.partition_fields or ''}".split(",")
    return InputTypes(text_fields=tuple(f.strip() for f in fields if f.strip()))


def _read(spark: object, fmt: str, files: list[str], types: InputTypes) -> object:
    """The files as a DataFrame: inferred, then read again with the types `types` imposes on the
    columns found. A malformed record (a CSV row with too few or too many fields, a broken JSON
    line) or a value that does not parse fails the run, naming the file, as the write commands do:
    Spark's default would fill nulls, drop extra fields, or add a `_corrupt_record` column."""
    from upsertlake.spark.types import arrow_schema_of, with_types

    def reader() -> object:  # a DataFrameReader's options stick: one per read
        read = spark.read.option("mode", "FAILFAST")
        return read.option("header", "true") if fmt == "csv" else read

    df = (reader().option("inferSchema", "true") if fmt == "csv" else reader()).format(fmt).load(files)
    if fmt == "parquet":
        return df
    imposed = types.csv_types() if fmt == "csv" else types.json_types(arrow_schema_of(df.schema))
    imposed = {k: v for k, v in imposed.items() if k in df.columns}
    if not imposed:
        return df
    return reader().schema(with_types(df.schema, imposed)).format(fmt).load(files)


def spark_reason(exc: BaseException) -> str:
    """The innermost Spark error class and message of a failure (e.g. `[MALFORMED_CSV_RECORD]
    Malformed CSV record: 2,1,b,extra`), without the Java stack traces around it."""
    text = " ".join(str(exc).split())
    reasons = re.findall(r"(\[[A-Z_.]+\] .*?)(?= at [\w$.]+\(| SQLSTATE|$)", text)
    return reasons[-1] if reasons else text[:300]


def _table_exists(path: str) -> bool:
    try:
        open_table(path)
    except TableNotFoundError:
        return False
    return True


def _say(line: str) -> None:
    """Progress goes to stderr, so stdout stays the summary (or JSON)."""
    print(line, file=sys.stderr, flush=True)

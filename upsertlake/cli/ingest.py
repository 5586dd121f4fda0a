"""`upsertlake ingest`: a dedup ingestion job on Spark. It reads the input files it has not ingested
yet, dedups and upserts them with the distributed writer, and records the files it read in the
commit's extraMetadata, so the next run picks up only new files (and a failed run, whose commit
never completed, is simply retried)."""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from pathlib import Path

from upsertlake.cli.inputs import InputTypes
from upsertlake.cli.output import CliError, add_key_fields, parse_options, print_json
from upsertlake.errors import TableNotFoundError
from upsertlake.table.table import open_table
from upsertlake.timeline.active import Timeline

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


def ingested_files(table_path: str) -> set[str]:
    """Every input file a completed commit of the table recorded as ingested."""
    try:
        timeline = Timeline.load(open_table(table_path).storage)
    except TableNotFoundError:
        return set()
    done: set[str] = set()
    for inst in timeline.completed_writes():
        recorded = timeline.commit_metadata(inst).extra_metadata.get(INGESTED_KEY)
        if recorded:
            done.update(json.loads(recorded))
    return done


def ingest(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    files = source_files(args.source, args.format)
    new = [f for f in files if f not in ingested_files(args.table)]
    _say(f"{len(files)} input files, {len(new)} new")
    summary: dict[str, object] = {"input_files": len(files), "new_files": len(new), "instant_time": None}
    if new:
        summary.update(_ingest(args, new, parse_options(args.option)))
    summary["seconds"] = round(time.perf_counter() - started, 3)
    if args.json:
        print_json(summary)
    elif new:
        print(
            f"ingested {len(new)} files in {summary['seconds']:.2f} s: {summary['inserts']} inserted, "
            f"{summary['updates']} updated ({summary['instant_time']})"
        )
    else:
        print("nothing new to ingest")
    return 0


def _ingest(args: argparse.Namespace, files: list[str], options: dict[str, str]) -> dict[str, object]:
    import upsertlake.spark as uls  # only this command needs pyspark
    from upsertlake.spark.options import write_options
    from upsertlake.spark.write import write_dataframe

    began = time.perf_counter()
    spark = uls.build_session(args.spark_master, "upsertlake-ingest")  # workers run this interpreter
    uls.register(spark)
    _say(f"spark session ({args.spark_master}) in {time.perf_counter() - began:.1f} s")
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
    result = write_dataframe(df, write_options(opts, args.table, "upsert"), {INGESTED_KEY: json.dumps(files)})
    for stage, seconds in result.stage_seconds.items():
        _say(f"  {stage:<8} {seconds:.2f} s")
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
    columns found, failing on a value that does not parse (Spark would silently make it null)."""
    from upsertlake.spark.types import arrow_schema_of, with_types

    def reader() -> object:  # a DataFrameReader's options stick: one per read
        return spark.read.option("header", "true") if fmt == "csv" else spark.read

    df = (reader().option("inferSchema", "true") if fmt == "csv" else reader()).format(fmt).load(files)
    if fmt == "parquet":
        return df
    imposed = types.csv_types() if fmt == "csv" else types.json_types(arrow_schema_of(df.schema))
    imposed = {k: v for k, v in imposed.items() if k in df.columns}
    if not imposed:
        return df
    return reader().schema(with_types(df.schema, imposed)).option("mode", "FAILFAST").format(fmt).load(files)


def _table_exists(path: str) -> bool:
    try:
        open_table(path)
    except TableNotFoundError:
        return False
    return True


def _say(line: str) -> None:
    """Progress goes to stderr, so stdout stays the summary (or JSON)."""
    print(line, file=sys.stderr, flush=True)

"""Writing commands: `create`, `upsert`, `insert`, `bulk-insert`, `delete`, and `explain`, the
dry run of a write (its plan, computed by the write client, with nothing written)."""

from __future__ import annotations

import argparse
import time

import upsertlake
from upsertlake.cli.input_files import FileFormat, add_input_store_option, input_store_options
from upsertlake.cli.inputs import InputTypes, read_inputs
from upsertlake.cli.output import (
    add_key_fields,
    format_records,
    human_bytes,
    parse_options,
    print_json,
    request_counts,
    store_options,
)
from upsertlake.cli.progress import StageBars, drawing
from upsertlake.engine.write_plan import stage
from upsertlake.errors import TableNotFoundError
from upsertlake.util.humanize import human_duration

OPERATIONS = {"upsert": "upsert", "insert": "insert", "bulk-insert": "bulk_insert", "delete": "delete"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("create", parents=[common], help="create an empty table")
    p.add_argument("path")
    p.add_argument("--name", required=True, help="table name (hoodie.table.name)")
    add_key_fields(p, " on upsert")
    p.add_argument("--hive-style", action="store_true", help="partition folders as field=value")
    _add_options(p)
    p.set_defaults(func=create)

    for command, operation in OPERATIONS.items():
        p = sub.add_parser(command, parents=[common], help=f"{operation} the records of input files")
        _add_inputs(p)
        p.add_argument("--no-progress", action="store_true", help="no per-stage progress on stderr (as --quiet)")
        p.set_defaults(func=write, operation=operation)

    p = sub.add_parser("explain", parents=[common], help="dry run: what a write would do, writing nothing")
    p.add_argument("operation", choices=list(OPERATIONS))
    _add_inputs(p)
    p.set_defaults(func=explain)


def _add_inputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="the table")
    p.add_argument(
        "files", nargs="+", metavar="FILE_OR_FOLDER", help="parquet, CSV, JSON or NDJSON input (a path or URI)"
    )
    p.add_argument("--format", type=FileFormat, choices=list(FileFormat), help="input format (default: by extension)")
    add_input_store_option(p)
    _add_options(p)


def _add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="a Hudi write option (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON")


def create(args: argparse.Namespace) -> int:
    table = upsertlake.create_table(
        args.path,
        name=args.name,
        record_key=args.record_key,
        precombine_field=args.precombine_field,
        partition_fields=args.partition_fields,
        hive_style_partitioning=args.hive_style,
        options=parse_options(args.option),
        storage_options=store_options(args),
        table_type=args.table_type,
    )
    if args.json:
        print_json({"path": table.path, "name": table.name})
    else:
        print(f"created table {table.name!r} at {table.path}")
    return 0


def _open(args: argparse.Namespace) -> upsertlake.Table:
    """The table a write command writes; a missing one says how to create it."""
    try:
        return upsertlake.open_table(args.path, parse_options(args.option), store_options(args))
    except TableNotFoundError as exc:
        raise TableNotFoundError(
            f"{exc}; create it first: upsertlake create {args.path} --name NAME --record-key KEY "
            "[--precombine-field FIELD] [--partition-fields FIELDS] (or `upsertlake ingest`, which creates it)"
        ) from exc


def write(args: argparse.Namespace) -> int:
    table = _open(args)
    counted = table.storage.requests  # the command's requests, opening the table and reading inputs included
    started = time.perf_counter()
    with StageBars(drawing(args)) as bars:
        with stage({}, "read", bars):
            data = read_inputs(args.files, args.format, InputTypes.of(table), input_store_options(args), counted)
            bars.counts["read"] = f"{data.num_rows:,} rows, {human_bytes(data.nbytes)}"
        bars.counts["dedup"] = f"{data.num_rows:,} rows"
        result = getattr(table, args.operation)(data, progress=bars)
    seconds = time.perf_counter() - started
    requests = counted.since({}) if result.store_requests else {}
    summary = {
        "instant_time": result.instant_time,
        "operation": result.operation,
        "input_records": data.num_rows,
        "inserts": result.num_inserts,
        "updates": result.num_updates,
        "deletes": result.num_deletes,
        "files_written": len(result.files_written),
        "seconds": round(seconds, 3),
        "stage_seconds": {k: round(v, 3) for k, v in result.stage_seconds.items()},
        **({"store_requests": requests} if requests else {}),
    }
    if args.json:
        print_json(summary)
    else:
        stages = ", ".join(f"{k} {human_duration(v)}" for k, v in result.stage_seconds.items())
        print(
            f"{args.operation} {result.instant_time}: {data.num_rows} input, {result.num_inserts} inserted, "
            f"{result.num_updates} updated, {result.num_deletes} deleted, {len(result.files_written)} files "
            f"written in {human_duration(seconds)} ({stages})"
        )
        if requests:  # object stores bill per request
            print(f"store requests: {request_counts(requests)}")
    return 0


def explain(args: argparse.Namespace) -> int:
    table = _open(args)
    counted = table.storage.requests  # the command's requests, opening the table and reading inputs included
    data = read_inputs(args.files, args.format, InputTypes.of(table), input_store_options(args), counted)
    summary = table.plan(OPERATIONS[args.operation], data).summary()
    if "store_requests" in summary:  # an object store's table
        summary["store_requests"] = counted.since({})
    if args.json:
        print_json(summary)
        return 0
    print(
        f"{args.operation} (dry run, nothing written): {summary['input_records']} input records, "
        f"{summary['duplicates_combined']} duplicates combined, {summary['dropped_unknown_deletes']} deletes of "
        f"unknown keys dropped"
    )
    print(f"  updates {summary['updates']}, deletes {summary['deletes']}, inserts {summary['inserts']}")
    mor = table.table_config.is_merge_on_read
    sections = [
        ("file groups updated", "updated_file_groups", ["partition", "file_id", "updates", "bytes"]),
        ("small files receiving inserts", "small_file_inserts", ["partition", "file_id", "inserts", "bytes"]),
        ("new file groups", "new_file_groups", ["partition", "file_id", "inserts"]),
    ]
    if mor:  # updates and deletes go to log files; only small slices taking inserts are rewritten
        sections[0] = (
            "base files rewritten with their updates (small log-free slices in partitions taking inserts)",
            *sections[0][1:],
        )
        sections.insert(0, (
            "file groups getting a new log file (updates and deletes appended)", "appended_file_groups",
            ["partition", "file_id", "updates", "deletes", "pending_log_files", "pending_log_bytes"],
        ))
    for title, key, columns in sections:
        rows = summary[key]
        print(f"\n{title}: {len(rows)}")
        if rows:
            print(format_records(rows, columns))
    print(f"\nbytes rewritten: {summary['bytes_rewritten']} ({human_bytes(summary['bytes_rewritten'])})")
    if mor:
        backlog = summary["compaction_backlog"]
        print(
            f"compaction backlog of the file groups appended to: {backlog['log_files']} log file(s), "
            f"{backlog['log_bytes']} bytes ({human_bytes(backlog['log_bytes'])}) already pending"
        )
    if "store_requests" in summary:
        print(f"store requests of this dry run (opening the table and reading the inputs included): "
              f"{request_counts(summary['store_requests'])}")
    return 0

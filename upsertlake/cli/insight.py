"""Table insight: `show` (config, schema, counts), `timeline`, `commit` (one commit's write stats)
and `files` (file groups and every base file version on storage)."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

import upsertlake
from upsertlake.cli.output import CliError, format_records, human_bytes, print_json, store_options
from upsertlake.config.properties_file import BACKUP_FILE, PROPERTIES_FILE
from upsertlake.config.table_config import TableConfig
from upsertlake.errors import MergeOnReadError
from upsertlake.layout.file_system_view import BaseFile, FileSystemView
from upsertlake.layout.properties_check import properties_disagreements
from upsertlake.schema.columns import PARTITION_PATH
from upsertlake.services.compaction_plan import compaction_backlog
from upsertlake.storage import table_storage
from upsertlake.table.table import Table
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import WRITE_ACTIONS, Instant
from upsertlake.timeline.instant_time import format_instant_time, parse_instant_time
from upsertlake.util.humanize import human_duration


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    for name, func, help_text in (
        ("show", show, "table config, schema, partitions, row and file counts"),
        ("timeline", timeline, "instants: action, state, start, completion, operation, counts, duration"),
        ("commit", commit, "one commit's write stats per partition and file group"),
        ("files", files, "file groups and their base file versions, with sizes and row counts"),
    ):
        p = sub.add_parser(name, parents=[common], help=help_text)
        p.add_argument("path", help="the table")
        if name == "commit":
            p.add_argument("instant", help="instant time of a completed commit")
        if name == "files":
            p.add_argument("--partition", help="only this partition path")
            p.add_argument(
                "--current", action="store_true",
                help="only the files of the latest snapshot (or --as-of's), one absolute path a line: "
                "what DuckDB, pandas or Polars should read",
            )
            p.add_argument(
                "--as-of",
                metavar="TIME",
                help="with --current: the snapshot as of this time (an instant time or ISO-8601)",
            )
        p.add_argument("--json", action="store_true", help="print JSON")
        p.set_defaults(func=func)


def footer_rows(table: Table, bf: BaseFile) -> int:
    """A base file's row count from its parquet footer (no data read)."""
    with table.storage.open_input(bf.path) as f:
        return int(pq.read_metadata(f).num_rows)


def property_warnings(table: Table, timeline: Timeline) -> list[str]:
    """Why the config `show` prints may be wrong: hoodie.properties damaged, replaced by its
    backup, or disagreeing with the table (each says to run the doctor)."""
    table_config, fix = table.table_config, f"run `upsertlake doctor {table.path} --fix`"
    if table_config.damage:
        return [table_config.damage]
    warnings = [
        f"{table.storage.full_path(table_config.source)} disagrees with the table: {problem}; {fix}"
        for problem in properties_disagreements(table.storage, table_config, timeline)
    ]
    if table_config.source == BACKUP_FILE:
        warnings.insert(
            0, f"{table.storage.full_path(PROPERTIES_FILE)} is not valid: this config is read from {BACKUP_FILE}; {fix}"
        )
    return warnings


def show(args: argparse.Namespace) -> int:
    try:
        table = upsertlake.open_table(args.path, storage_options=store_options(args))
    except MergeOnReadError as exc:
        return _show_unsupported(args, exc)
    timeline_now = Timeline.load(table.storage)
    warnings = property_warnings(table, timeline_now)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    view = FileSystemView(timeline_now)
    mor = table.table_config.is_merge_on_read
    rows = partition_rows(table, view)
    groups = sum(len(ids) for ids in view.file_ids().values()) if mor else len(view.latest_base_files())
    backlog = compaction_backlog(timeline_now) if mor else None
    columns = ["partition", "rows", "file_groups_with_logs", "log_files", "log_bytes"] if mor else ["partition", "rows"]
    info: dict[str, Any] = {
        "path": table.path,
        "config": table.table_config.to_properties(),
        "schema": [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in table.schema()],
        "partitions": [
            {"partition": p, "rows": rows.get(p, 0), **(backlog.partitions.get(p, {}) if backlog else {})}
            for p in view.partitions()
        ],
        "rows": sum(rows.values()),
        "file_groups": groups,
        "base_files_on_storage": len(view.all_base_files()),
        "completed_commits": len(view.visible_instants),
        "warnings": warnings,
    }
    if backlog is not None:
        info["log_files_on_storage"] = len(view.all_log_files())
        info["compaction_backlog"] = backlog.to_dict()
    if args.json:
        print_json(info)
        return 0
    _print_config(f"table {table.name!r} at {table.path}", info["config"])
    print("\nschema:")
    print("\n".join(f"  {f['name']}: {f['type']}" for f in info["schema"]) or "  (none yet)")
    print(f"\npartitions: {len(info['partitions'])}")
    if info["partitions"]:
        print(format_records(info["partitions"], columns))
    print(
        f"\nrows {info['rows']}, file groups {info['file_groups']}, base files on storage "
        f"{info['base_files_on_storage']}, completed commits {info['completed_commits']}"
    )
    if backlog is not None:
        print(backlog_line(info["compaction_backlog"]))
    return 0


def partition_rows(table: Table, view: FileSystemView) -> dict[str, int]:
    """Rows per partition of the latest snapshot: from the base files' footers, or on a
    merge-on-read table by merging its slices (their logs change the count)."""
    rows: dict[str, int] = {}
    if table.table_config.is_merge_on_read:
        keys = table.read(columns=[PARTITION_PATH]).column(0)
        for p, n in zip(*(c.to_pylist() for c in pc.value_counts(keys).flatten())):
            rows[p] = n
        return rows
    for bf in view.latest_base_files():
        rows[bf.partition_path] = rows.get(bf.partition_path, 0) + footer_rows(table, bf)
    return rows


def backlog_line(backlog: dict[str, Any]) -> str:
    """One line for a compaction backlog (`Backlog.to_dict()`), as `show` and `stats` print it."""
    times = backlog["pending_compactions"]
    pending = f"; pending compaction(s) {', '.join(times)}" if times else ""
    return (
        f"compaction backlog: {backlog['slices_with_logs']} file groups with log files, {backlog['log_files']} log "
        f"files ({human_bytes(backlog['log_bytes'])}), {backlog['delta_commits_since_compaction']} deltacommits "
        f"since the last compaction{pending}"
    )


def _print_config(title: str, config: dict[str, str]) -> None:
    print(title)
    print("\nconfig:")
    print("\n".join(f"  {k} = {v}" for k, v in config.items()))


def _show_unsupported(args: argparse.Namespace, exc: MergeOnReadError) -> int:
    """A table upsertlake cannot read: its config and why, and no data read (its base files alone
    would be a wrong answer)."""
    storage = table_storage(args.path, store_options(args))
    info: dict[str, Any] = {
        "path": storage.base,
        "config": TableConfig.load(storage).to_properties(),
        "unsupported": str(exc),
    }
    if args.json:
        print_json(info)
        return 0
    _print_config(f"table at {storage.base}: not readable here", info["config"])
    print(f"\nunsupported: {exc}; no data was read")
    return 0


def timeline(args: argparse.Namespace) -> int:
    table = upsertlake.open_table(args.path, storage_options=store_options(args))
    tl = Timeline.load(table.storage)
    mtimes = {e.name: e.mtime_ns for e in table.storage.list(tl.layout.folder)}
    out = [_instant_row(tl, inst, mtimes) for inst in tl.shown()]  # a completed compaction: its commit
    if args.json:
        print_json(out)
    else:
        shown = [
            {**{k: v for k, v in r.items() if k not in ("seconds", "seconds_at_most")}, "duration": _duration(r)}
            for r in out
        ]
        print(format_records(shown, list(shown[0]) if shown else ["instant", "action", "state"]))
        if out:
            print(TIMELINE_LEGEND)
            if any(r["seconds_at_most"] is not None for r in out):
                print(SECOND_BOUND_LEGEND)
    return 0


TIMELINE_LEGEND = (
    "(batch = records the commit inserted, updated or deleted; rows_written = rows in the files it "
    "wrote, which include the unchanged rows a rewrite copies)"
)
SECOND_BOUND_LEGEND = (
    "(a 14-digit completion names the second it fell in: a version 6 timeline records no completion time, "
    "and an object store keeps the completed file's time to the second only; `<` marks an upper bound)"
)


def _duration(row: dict[str, Any]) -> str:
    if row["seconds"] is not None:
        return human_duration(row["seconds"])
    if row["seconds_at_most"] is not None:
        return f"< {human_duration(row['seconds_at_most'])}"
    return ""


def _instant_row(tl: Timeline, inst: Instant, mtimes: dict[str, int]) -> dict[str, Any]:
    """Start is the instant time. Completion is the one layout 2 records; layout 1 records none
    (Hudi 0.x has no other), so it is the completed file's modification time: exact on a local
    disk, but an object store keeps it to the second, which makes it a bound (the second it fell
    in, 14 digits, and the duration's upper bound `seconds_at_most`). A time before the start is
    no completion time (another clock): neither is shown."""
    row: dict[str, Any] = {
        "instant": inst.time,
        "action": inst.action.value,
        "state": inst.state.value,
        **dict.fromkeys(
            [
                "completion",
                "operation",
                "batch",
                "inserts",
                "updates",
                "deletes",
                "rows_written",
                "bytes",
                "seconds",
                "seconds_at_most",
            ]
        ),
    }
    if not inst.is_completed:
        return row
    zone = tl.layout.zone
    started = parse_instant_time(inst.time, zone)
    if inst.completion is not None:  # layout 2 records it
        completed, to_the_second = parse_instant_time(inst.completion, zone), False
    else:
        completed = datetime.fromtimestamp(mtimes[inst.file_name()] / 1e9, timezone.utc)
        to_the_second = not tl.storage.exact_mtimes
    if to_the_second:
        second = completed.replace(microsecond=0)
        if second + timedelta(seconds=1) > started:
            row["completion"] = format_instant_time(second, zone)[:14]
            row["seconds_at_most"] = round((second + timedelta(seconds=1) - started).total_seconds(), 3)
    elif completed >= started:
        row["completion"] = format_instant_time(completed, zone)
        row["seconds"] = round((completed - started).total_seconds(), 3)
    if inst.action in WRITE_ACTIONS:
        meta = tl.commit_metadata(inst)
        stats = meta.write_stats()
        row.update(
            operation=meta.operation_type,
            inserts=sum(s.numInserts for s in stats),
            updates=sum(s.numUpdateWrites for s in stats),
            deletes=sum(s.numDeletes for s in stats),
            rows_written=meta.total_records_written,
            bytes=meta.total_bytes_written,
        )
        row["batch"] = row["inserts"] + row["updates"] + row["deletes"]
    return row


def commit(args: argparse.Namespace) -> int:
    table = upsertlake.open_table(args.path, storage_options=store_options(args))
    tl = Timeline.load(table.storage)
    inst = next((i for i in tl.completed_writes() if i.time == args.instant), None)
    if inst is None:
        raise CliError(f"no completed commit {args.instant!r} on the timeline of {table.path}")
    meta = tl.commit_metadata(inst)
    stats = [
        {
            "partition": s.partitionPath,
            "file_id": s.fileId,
            "prev_commit": s.prevCommit,
            "writes": s.numWrites,
            "inserts": s.numInserts,
            "updates": s.numUpdateWrites,
            "deletes": s.numDeletes,
            "bytes": s.totalWriteBytes,
            "path": s.path,
        }
        for s in sorted(meta.write_stats(), key=lambda s: (s.partitionPath, s.fileId))
    ]
    info = {"instant": inst.time, "action": inst.action.value, "operation": meta.operation_type, "write_stats": stats}
    if args.json:
        print_json(info)
        return 0
    print(f"{inst.action.value} {inst.time} ({meta.operation_type}): {len(stats)} file groups written")
    if stats:
        print(format_records(stats, [k for k in stats[0] if k != "path"]))
    return 0


def files(args: argparse.Namespace) -> int:
    table = upsertlake.open_table(args.path, storage_options=store_options(args))
    view = FileSystemView(Timeline.load(table.storage))
    if args.partition is not None and args.partition not in view.all_partitions():
        raise CliError(f"no partition {args.partition!r} in {table.path}")
    if args.current:
        return _current_files(table, args.partition, args.as_of, args.json)
    if args.as_of:
        raise CliError("--as-of goes with --current")
    latest = {bf.path for bf in view.latest_base_files()}
    replaced = view.replaced_file_groups
    committed = {i.time for i in view.visible_instants}
    rows = [
        {
            "partition": bf.partition_path,
            "file_id": bf.file_id,
            "instant": bf.instant_time,
            "latest": bf.path in latest,
            "committed": bf.instant_time in committed,
            "replaced": bf.file_group in replaced,
            "bytes": bf.size,
            "rows": footer_rows(table, bf),
            "file": bf.name,
        }
        for bf in sorted(view.all_base_files(), key=lambda b: (b.partition_path, b.file_id, b.instant_time))
        if args.partition is None or bf.partition_path == args.partition
    ]
    if table.table_config.is_merge_on_read:
        rows = _with_log_files(table, view, rows, committed, replaced, args.partition)
    if args.json:
        print_json(rows)
        return 0
    live = {(r["partition"], r["file_id"]) for r in rows if r["latest"]}
    gone = {(r["partition"], r["file_id"]) for r in rows if r["replaced"]}
    pending = {(r["partition"], r["file_id"]) for r in rows} - live - gone
    print(
        f"{len(live)} file groups, as `show` counts them (the latest snapshot); also on storage: "
        f"{len(gone)} replaced, {len(pending)} with no committed file; {_file_counts(rows)}"
    )
    for r in rows:
        r["mark"] = "*" if r["latest"] else "replaced" if r["replaced"] else "" if r["committed"] else "uncommitted"
    if rows:
        kind = ["kind"] if table.table_config.is_merge_on_read else []
        print(format_records(rows, ["partition", "file_id", *kind, "instant", "mark", "bytes", "rows"]))
        print(
            "(* = the latest visible version of its file group; replaced = a group retired by clustering, "
            "an overwrite or delete_partitions, kept for time travel until the cleaner removes it)"
        )
    return 0


def _file_counts(rows: list[dict[str, Any]]) -> str:
    logs = sum(1 for r in rows if r.get("kind") == "log")
    return f"{len(rows) - logs} base files" + (f", {logs} log files" if logs else "")


def _with_log_files(
    table: Table,
    view: FileSystemView,
    rows: list[dict[str, Any]],
    committed: set[str],
    replaced: set[Any],
    partition: str | None,
) -> list[dict[str, Any]]:
    """A merge-on-read table's base file rows and log file rows, by file group and instant; a log
    is `latest` when the latest snapshot merges it (layout 1 names a log by its slice's base
    instant, layout 2 by its deltacommit)."""
    merged = {lf.path for sl in view.latest_file_slices() for lf in sl.logs}
    logs = [
        {
            "partition": lf.partition_path,
            "file_id": lf.name.file_id,
            "kind": "log",
            "instant": lf.name.instant,
            "latest": lf.path in merged,
            "committed": lf.path in merged or lf.name.instant in committed,
            "replaced": lf.file_group in replaced,
            "bytes": lf.size,
            "rows": None,
            "file": lf.path.rpartition("/")[2],
        }
        for lf in view.all_log_files()
        if partition is None or lf.partition_path == partition
    ]
    both = [{**r, "kind": "base"} for r in rows] + logs
    return sorted(both, key=lambda r: (r["partition"], r["file_id"], r["instant"], r["kind"], r["file"]))


def _current_files(table: Table, partition: str | None, as_of: str | None, as_json: bool) -> int:
    """The snapshot's base files (Table.files), one absolute path a line, for outside engines."""
    prefix = f"{table.storage.full_path(partition)}/" if partition is not None else ""
    paths = [p for p in table.files(as_of=as_of) if p.startswith(prefix)]
    if as_json:
        print_json(paths)
    elif paths:
        print("\n".join(paths))
    return 0

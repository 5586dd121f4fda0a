"""`upsertlake doctor PATH`: what is wrong with a table, each finding naming its file; `--fix` does
only what is safe and says what it did. Exit status 1 while a problem remains."""

from __future__ import annotations

import argparse

from upsertlake.cli.output import parse_options, print_json, store_options
from upsertlake.services.doctor import Report, diagnose, doctor_config, treat
from upsertlake.services.rebuild import split_table_values
from upsertlake.storage import table_storage


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "doctor", parents=[common], help="check a table (properties, instants, files, pending writes)",
        description="Check hoodie.properties against the table, parse every instant, find orphaned and missing "
        "files, pending writes, expired heartbeats and partitions without metadata. Exit status 1 when "
        "something is wrong.",
    )
    p.add_argument("path", help="the table")
    p.add_argument("--fix", action="store_true",
                   help="do what is safe: restore hoodie.properties from a valid backup that agrees with the table "
                        "or rebuild it from the table, roll back failed writes, delete orphaned files of failed writes")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="a table or write option over the table's (repeatable): e.g. hoodie.client.heartbeat."
                        "interval_in_ms=... for heartbeats without a declared window; with --fix, values "
                        "hoodie.properties cannot be rebuilt without, e.g. hoodie.table.precombine.field=ts")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=doctor)


def doctor(args: argparse.Namespace) -> int:
    storage = table_storage(args.path, store_options(args))
    properties, options = split_table_values(parse_options(args.option))
    cfg = doctor_config(storage, options)
    report = treat(storage, cfg, properties) if args.fix else diagnose(storage, cfg, properties)
    if args.json:
        print_json(report.to_json())
    else:
        print(format_report(report))
    return 0 if report.ok else 1


def format_report(report: Report) -> str:
    lines = [f"fixed: {what}" for what in report.fixed]
    for f in report.findings:
        fix = f" (--fix: {f.fix})" if f.fix else ""
        lines.append(f"{'PROBLEM' if f.problem else 'note':8} {f.check:10} {f.path}: {f.message}{fix}")
    problems = report.problems
    if problems:
        fixable = sum(1 for f in problems if f.fix)
        lines.append(f"{len(problems)} problem(s) in {report.path}, {fixable} fixable with --fix")
    else:
        lines.append(f"no problems found in {report.path}")
    return "\n".join(lines)

"""Table services from the terminal: `clean`, `compact`, `cluster`, `archive`, `savepoint`, `restore`,
`rollback`, `upgrade`."""

from __future__ import annotations

import argparse
from typing import Any

import upsertlake
from upsertlake.cli.output import parse_options, print_json, store_options
from upsertlake.config.enums import CleanPolicy
from upsertlake.timeline import documents
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import Instant


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("clean", parents=[common], help="delete file versions outside the retained window")
    p.add_argument("path", help="the table")
    p.add_argument("--policy", type=CleanPolicy, choices=list(CleanPolicy))
    p.add_argument("--retained", type=int, help="commits, file versions or hours to keep (by policy)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=clean)

    for name, func, help_text, example in (
        ("compact", compact, "merge-on-read: fold log files into new base files (a compaction commit)",
         "hoodie.compaction.strategy=..."),
        ("cluster", cluster, "merge small file groups (a replacecommit)",
         "hoodie.clustering.plan.strategy.small.file.limit=..."),
        ("archive", archive, "move old instants to .hoodie/archived", "hoodie.keep.min.commits=..."),
    ):
        p = sub.add_parser(name, parents=[common], help=help_text)
        p.add_argument("path", help="the table")
        p.add_argument("--option", action="append", metavar="KEY=VALUE", help=f"e.g. {example} (repeatable)")
        p.add_argument("--json", action="store_true", help="print JSON")
        p.set_defaults(func=func)

    for name, help_text, instant_help in (
        ("savepoint", "pin a commit's snapshot against cleaning (default: the latest commit)", "commit to savepoint"),
        ("restore", "roll back every instant after a savepoint", "the savepoint's instant"),
        ("rollback", "undo the latest commit, or a pending instant", "pending instant (default: latest commit)"),
    ):
        p = sub.add_parser(name, parents=[common], help=help_text)
        p.add_argument("path", help="the table")
        p.add_argument("instant", nargs="?" if name != "restore" else None, help=instant_help)
        if name == "savepoint":
            p.add_argument("--comment", default="", help="why (stored in the savepoint)")
        p.add_argument("--json", action="store_true", help="print JSON")
        p.set_defaults(func=_instant_service, service=name)


    p = sub.add_parser(
        "upgrade", parents=[common], help="upgrade the table to table version 8 (Hudi 1.0) or 9 (Hudi 1.1)"
    )
    p.add_argument("path", help="the table")
    p.add_argument(
        "--to",
        type=int,
        required=True,
        choices=(6, 8, 9),
        help="the table version to upgrade to (a lower one downgrades the table, where that is safe)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=upgrade)


def upgrade(args: argparse.Namespace) -> int:
    result = upsertlake.upgrade_table(args.path, args.to, storage_options=store_options(args))
    if args.json:
        print_json(
            {
                "from_version": result.from_version,
                "to_version": result.to_version,
                "rolled_back": list(result.rolled_back),
                "instants_moved": result.instants_moved,
                "old_files_deleted": result.old_files_deleted,
                "archived_moved": result.archived_moved,
            }
        )
    elif result.from_version == result.to_version:
        print(
            f"the table is at version {result.to_version} already"
            + (
                f"; finished an interrupted upgrade ({result.old_files_deleted} old instant files deleted)"
                if result.old_files_deleted
                else ""
            )
        )
    elif result.from_version > result.to_version:
        print(f"downgraded from table version {result.from_version} to {result.to_version}")
    else:
        rolled = f", {len(result.rolled_back)} failed writes rolled back first" if result.rolled_back else ""
        print(
            f"upgraded from table version {result.from_version} to {result.to_version}: "
            f"{result.instants_moved} instants moved to .hoodie/timeline"
            + (f", {result.archived_moved} archived ones to its history" if result.archived_moved else "")
            + rolled
        )
    return 0


def clean(args: argparse.Namespace) -> int:
    result = upsertlake.open_table(args.path, storage_options=store_options(args)).clean(args.policy, args.retained)
    if args.json:
        print_json(
            {
                "instant_time": result.instant_time,
                "policy": result.policy.value,
                "earliest_commit_to_retain": result.earliest_commit_to_retain,
                "files_deleted": list(result.files_deleted),
            }
        )
    elif result.instant_time is None:
        print(f"nothing to clean ({result.policy})")
    else:
        print(
            f"clean {result.instant_time}: {len(result.files_deleted)} files deleted ({result.policy}); "
            f"snapshots from {result.earliest_commit_to_retain} on stay readable"
        )
    return 0


def compact(args: argparse.Namespace) -> int:
    table = upsertlake.open_table(args.path, storage_options=store_options(args))
    result = table.compact(parse_options(args.option))
    if args.json:
        print_json(result.to_dict())
    elif not result.compacted:
        print(f"nothing to compact: {result.reason}")
    else:
        again = " (a compaction left inflight by a compactor that died, run again)" if result.recovered else ""
        print(
            f"compaction {result.instant_time}: {result.operations} file slices, "
            f"{result.log_files_compacted} log files folded into {len(result.files_written)} base files, "
            f"{result.records_written} records{again}"
        )
    return 0


def cluster(args: argparse.Namespace) -> int:
    result = upsertlake.open_table(args.path, storage_options=store_options(args)).cluster(parse_options(args.option))
    if args.json:
        print_json(result.to_dict())
    elif not result.clustered:
        print(f"nothing to cluster: {result.reason}")
    else:
        replaced = sum(len(ids) for ids in result.replaced.values())
        print(f"replacecommit {result.instant_time}: {replaced} file groups clustered into {len(result.files_written)}")
    return 0


def archive(args: argparse.Namespace) -> int:
    moved = upsertlake.open_table(args.path, storage_options=store_options(args)).archive(parse_options(args.option))
    if args.json:
        print_json([{"instant_time": i.time, "action": i.action.value} for i in moved])
    else:
        print(f"archived {len(moved)} instants" + (f" ({moved[0].time} .. {moved[-1].time})" if moved else ""))
    return 0


def _instant_service(args: argparse.Namespace) -> int:
    table = upsertlake.open_table(args.path, storage_options=store_options(args))
    if args.service == "savepoint":
        done: Instant = table.savepoint(args.instant, args.comment)
    else:
        done = getattr(table, args.service)(args.instant)
    info: dict[str, Any] = {"instant_time": done.time, "action": done.action.value, "state": done.state.value}
    if args.service != "savepoint":
        # What was undone, from the instant's own metadata (HoodieRollback/RestoreMetadata).
        meta = documents.decode(Timeline.load(table.storage).document(done), done.file_name())
        undone = meta["instantsRollback"] if args.service == "rollback" else meta["restoreInstantInfo"]
        info["rolled_back"] = [{"instant_time": i["commitTime"], "action": i["action"]} for i in undone]
    if args.json:
        print_json(info)
    elif args.service == "savepoint":
        print(f"savepoint {done.time} completed: commit {done.time} is pinned against cleaning")
    else:
        what = ", ".join(f"{i['action']} {i['instant_time']}" for i in info["rolled_back"]) or "nothing"
        restored = f"restored to savepoint {args.instant}: " if args.service == "restore" else ""
        print(f"{restored}rolled back {what} ({done.action.value} instant {done.time})")
    return 0

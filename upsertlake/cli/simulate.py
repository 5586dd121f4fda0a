"""`upsertlake simulate`: the conflict simulator (upsertlake.simulation.simulator) as a command;
exit status 1 when an invariant is violated."""

from __future__ import annotations

import argparse

from upsertlake.cli.output import TABLE_TYPES, CliError, store_options
from upsertlake.config.enums import TableType
from upsertlake.simulation.simulator import (
    METADATA_COMPACT_EVERY,
    MOR_COMPACT_EVERY,
    SimulationConfig,
    format_report,
    report_json,
    run,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "simulate", parents=[common],
        help="run concurrent writer processes against a new table and check the concurrency invariants",
    )
    p.add_argument(
        "--table", required=True,
        help="where to create the simulated table (must not exist): a local path or an object store's URI "
        "(with --storage-option settings and --journal)",
    )
    p.add_argument("--journal", default="", help="a local folder for the journal (default: <table>.simulate)")
    p.add_argument("--writers", type=int, default=4, help="writer processes (default 4)")
    p.add_argument("--commits", type=int, default=10, help="commits each writer attempts (default 10)")
    p.add_argument("--overlap", type=float, default=0.2, help="share of each batch on keys all writers share, 0..1")
    p.add_argument("--disjoint-keys", action="store_true",
                   help="writers share file groups (the shared partition) but never a record key: none may conflict")
    p.add_argument("--kill-rate", type=float, default=0.0, help="chance an attempt is SIGKILLed at a random moment")
    p.add_argument("--batch-size", type=int, default=100, help="records per write (default 100)")
    p.add_argument(
        "--lock-provider", default=SimulationConfig.lock_provider,
        help="hoodie.write.lock.provider (default: flock on a local disk, StorageBasedLockProvider on an object store)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument(
        "--table-version", type=int, choices=(6, 8, 9), default=6, help="table version to create (default 6)"
    )
    p.add_argument(
        "--table-type",
        choices=TABLE_TYPES,
        default=TableType.COPY_ON_WRITE.value,
        type=str.upper,
        help="table type to create (default COPY_ON_WRITE); MERGE_ON_READ compacts inline every "
        f"{MOR_COMPACT_EVERY} deltacommits",
    )
    p.add_argument(
        "--metadata", action="store_true",
        help="keep the metadata table with its record index, compacted every "
        f"{METADATA_COMPACT_EVERY} deltacommits (table version 8 or 9), and check it agrees with the table",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=simulate)


def simulate(args: argparse.Namespace) -> int:
    if args.writers < 1 or args.commits < 1 or args.batch_size < 1:
        raise CliError("--writers, --commits and --batch-size must be at least 1")
    for name in ("overlap", "kill_rate"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            raise CliError(f"--{name.replace('_', '-')} must be between 0 and 1")
    if not SimulationConfig(args.table).local and not args.journal:
        raise CliError("--journal: name a local folder for the journal of a table on an object store")
    if args.metadata and args.table_version < 8:
        raise CliError("--metadata needs --table-version 8 or 9 (table version 6 keeps no metadata table)")
    report = run(
        SimulationConfig(
            table=args.table,
            writers=args.writers,
            commits=args.commits,
            overlap=args.overlap,
            disjoint_keys=args.disjoint_keys,
            kill_rate=args.kill_rate,
            batch_size=args.batch_size,
            lock_provider=args.lock_provider,
            seed=args.seed,
            table_version=args.table_version,
            table_type=TableType(args.table_type),
            metadata=args.metadata,
            storage_options=store_options(args),
            journal_dir=args.journal,
        )
    )
    print(report_json(report) if args.json else format_report(report))
    return 0 if report.ok else 1

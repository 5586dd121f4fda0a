"""The `upsertlake` command. `upsertlake demo` shows the whole write path on a temporary table."""

from __future__ import annotations

import argparse
import sys
import tempfile

import pyarrow as pa


def demo(path: str | None) -> int:
    import upsertlake

    base = path or tempfile.mkdtemp(prefix="upsertlake-demo-")
    table = upsertlake.create_table(
        base, name="trips", record_key="uuid", precombine_field="ts", partition_fields=["city"]
    )
    print(f"created table 'trips' at {base}")
    cities = ["amsterdam", "berlin", "chennai"]
    first = pa.table(
        {
            "uuid": [f"trip-{i:03d}" for i in range(9)],
            "ts": list(range(9)),
            "city": [cities[i % 3] for i in range(9)],
            "fare": [10.0 + i for i in range(9)],
        }
    )
    r = table.insert(first)
    print(f"insert  {r.instant_time}: {r.num_inserts} inserted")
    changes = pa.table(
        {
            "uuid": ["trip-000", "trip-001", "trip-001", "trip-100"],
            "ts": [100, 100, 101, 100],
            "city": ["amsterdam", "berlin", "berlin", "chennai"],
            "fare": [99.0, 50.0, 51.0, 7.5],
        }
    )
    r = table.upsert(changes)
    print(f"upsert  {r.instant_time}: {r.num_updates} updated, {r.num_inserts} inserted (in-batch duplicate combined)")
    r = table.delete(pa.table({"uuid": ["trip-002"], "city": ["chennai"]}))
    print(f"delete  {r.instant_time}: {r.num_deletes} deleted")
    print("\ntimeline:")
    for inst in table.timeline():
        print(f"  {inst.time}  {inst.action.value:<13} {inst.state.value}")
    snapshot = table.read()
    print(f"\nrows now: {snapshot.num_rows}")
    by_city = snapshot.group_by("city").aggregate([("uuid", "count")]).sort_by("city")
    for row in by_city.to_pylist():
        print(f"  {row['city']:<10} {row['uuid_count']}")
    print()
    print(format_rows(snapshot.select(["_hoodie_commit_time", "uuid", "city", "ts", "fare"]).sort_by("uuid")))
    return 0


def format_rows(table: pa.Table) -> str:
    """A plain aligned text table (no pandas needed)."""
    cells = [table.column_names] + [[str(v) for v in row.values()] for row in table.to_pylist()]
    widths = [max(len(r[i]) for r in cells) for i in range(len(table.column_names))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="upsertlake", description="Hudi-compatible copy-on-write upserts")
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser("demo", help="create a table in a temporary folder, insert, upsert, delete, show it")
    p_demo.add_argument("--path", help="where to create the demo table (default: a new temporary folder)")
    args = parser.parse_args(argv)
    from upsertlake.errors import UpsertlakeError

    try:
        if args.command == "demo":
            return demo(args.path)
    except UpsertlakeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())

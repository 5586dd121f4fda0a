"""`upsertlake demo`: the whole write path on a temporary table (the README's first command)."""

from __future__ import annotations

import argparse
import tempfile

import pyarrow as pa

from upsertlake.cli.output import format_rows


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
    print(
        f"\nthe table stays in {base} after this command: look at it with `upsertlake show {base}`, "
        "delete the folder when done"
    )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "demo", parents=[common], help="create a table in a temporary folder, insert, upsert, delete, show it"
    )
    p.add_argument("--path", help="where to create the demo table (default: a new temporary folder)")
    p.set_defaults(func=lambda args: demo(args.path))

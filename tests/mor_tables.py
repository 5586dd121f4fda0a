"""Small merge-on-read tables for tests: `id` the key, `ts` the ordering value, `v` a payload
depending on the write's version, `p` the partition; snapshots as dicts by key, ours and Hudi's."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from upsertlake import create_table

from helpers import hudi_read

VERSIONS = [6, 8]
COLUMNS = ["id", "ts", "v", "p"]


def mor_table(path: Path, version: int, partitioned: bool = True, **options: object):
    return create_table(
        path, "t", record_key="id", precombine_field="ts", partition_fields="p" if partitioned else None,
        table_type="MERGE_ON_READ", options={"hoodie.write.table.version": version, **options},
    )


def batch(ids: list[int], ts: list[int], version: int) -> pa.Table:
    return pa.table({
        "id": pa.array([f"k{i:04d}" for i in ids], pa.string()),
        "ts": pa.array(ts, pa.int64()),
        "v": pa.array([float(i * 1000 + version) for i in ids], pa.float64()),
        "p": pa.array([f"p{i % 3}" for i in ids], pa.string()),
    })


def snapshot(table, **read: object) -> dict[str, dict]:
    rows = table.read(columns=COLUMNS, **read).to_pylist()
    out = {r["id"]: r for r in rows}
    assert len(out) == len(rows), "a key is read twice"
    return out


def hudi_snapshot(path: Path, **read: str) -> dict[str, dict]:
    rows = hudi_read(path, **read).select(COLUMNS).to_pylist()
    return {r["id"]: r for r in rows}


def logs_of(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob(".*.log.*") if ".hoodie" not in p.parts)

"""Test helpers: compare snapshots exactly, read with Apache Hudi's reader."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa


def rows(table: pa.Table, columns: list[str], key: str) -> list[dict]:
    """The given columns as dicts, sorted by `key`: an exact, order-free view of a snapshot."""
    return sorted(table.select(columns).to_pylist(), key=lambda r: r[key])


def hudi_read(path: str | Path, **read: str) -> pa.Table:
    """Read a table with Apache Hudi's reader (hudi-rs): snapshot, as_of or incremental."""
    from hudi import HudiQueryType, HudiReadOptions, HudiTableBuilder

    table = HudiTableBuilder.from_base_uri(Path(path).resolve().as_uri()).build()
    opts = HudiReadOptions()
    if "as_of" in read:
        opts = opts.with_as_of_timestamp(read["as_of"])
    if "begin" in read:
        opts = opts.with_query_type(HudiQueryType.Incremental).with_start_timestamp(read["begin"])
        if read.get("end"):
            opts = opts.with_end_timestamp(read["end"])
    batches = table.read(opts)
    if not batches:
        return pa.table({})
    return pa.Table.from_batches(batches)

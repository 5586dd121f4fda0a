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


def timeline_dir(root: str | Path) -> Path:
    """The folder of a table's instant files: `.hoodie/timeline` (version 8) or `.hoodie` (6)."""
    hoodie = Path(root) / ".hoodie"
    layout2 = "hoodie.timeline.layout.version=2" in (hoodie / "hoodie.properties").read_text("latin-1")
    return hoodie / "timeline" if layout2 else hoodie


def instant_file(root: str | Path, time: str, action: str) -> Path:
    """A completed instant's file in either layout (`<t>.<action>` or `<t>_<completion>.<action>`)."""
    folder = timeline_dir(root)
    found = [*folder.glob(f"{time}.{action}"), *folder.glob(f"{time}_*.{action}")]
    assert len(found) == 1, f"completed {action} {time}: {found}"
    return found[0]


def completed_times(root: str | Path, action: str = "commit") -> list[str]:
    """Requested times of the completed instants of `action` in the active timeline, sorted."""
    return sorted(p.name.split(".")[0].split("_")[0] for p in timeline_dir(root).glob(f"*.{action}"))

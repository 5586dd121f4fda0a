"""Reads compared with Apache Hudi's reader (hudi-rs, the PyPI `hudi` package): the snapshot, time
travel to every completed instant and incremental windows, exactly, through both readers."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from helpers import decoded, hudi_read

KEY = "_hoodie_record_key"
META = ["_hoodie_commit_time", "_hoodie_commit_seqno", KEY, "_hoodie_partition_path", "_hoodie_file_name"]
BEFORE_ALL = "19700101000000000"


def assert_same(ours: pa.Table, theirs: pa.Table, what: str) -> None:
    """Same columns (names, order, types) and the same rows, compared sorted by record key."""
    if theirs.num_columns == 0:  # hudi-rs returns no batches (and so no schema) for nothing to read
        assert ours.num_rows == 0, f"{what}: Hudi reads nothing, we read {ours.num_rows} rows"
        return
    assert ours.column_names == theirs.column_names, what
    # as text: child names and nullability count (Arrow's `==` ignores list/map child names); our
    # meta columns of one value per file are dictionary-encoded strings, Hudi's plain strings
    assert [str(f.type) for f in decoded(ours).schema] == [str(f.type) for f in decoded(theirs).schema], what
    key = KEY if KEY in ours.column_names else "id"
    ours_rows = sorted(ours.to_pylist(), key=lambda r: r[key])
    theirs_rows = sorted(theirs.to_pylist(), key=lambda r: r[key])
    assert ours_rows == theirs_rows, what


def assert_same_as_of(ours: pa.Table, theirs: pa.Table, what: str) -> None:
    """Time travel: hudi-rs always returns the newest commit's columns, Apache Hudi's Spark reader
    (and we) the columns of the schema as of the instant. Columns added later must be all null in
    Hudi's result; with them left out, both reads are the same."""
    later = [c for c in theirs.column_names if c not in ours.column_names]
    for c in later:
        assert theirs.column(c).null_count == theirs.num_rows, f"{what}: {c} added later but not null"
    assert_same(ours, theirs.drop_columns(later), what)


def completed_instants(table) -> list[str]:
    return [i.time for i in table.timeline() if i.is_completed]


def window_bounds(table) -> list[str]:
    """Incremental window bounds: every completed instant's time and, in table version 8, its
    completion time (Hudi 1.x selects commits by completion time, so both kinds of bound count)."""
    return sorted({t for i in table.timeline() if i.is_completed for t in (i.time, i.completion) if t})


def check_reads(table, path: Path, windows: bool = True) -> None:
    """Snapshot, time travel to every completed instant, incremental windows: ours == Hudi's."""
    assert_same(table.read(), hudi_read(path), "snapshot")
    instants = completed_instants(table)
    for t in instants:
        ours = table.read(as_of=t)
        meta = META if table.table_config.populate_meta_fields else []
        assert ours.column_names == meta + table.schema(as_of=t).names
        assert_same_as_of(ours, hudi_read(path, as_of=t), f"as of {t}")
    if not windows:
        return
    for begin, end in incremental_windows(window_bounds(table)):
        theirs = hudi_read(path, begin=begin, end=end) if end else hudi_read(path, begin=begin)
        assert_same(table.read_incremental(begin, end), theirs, f"incremental ({begin}, {end}]")


def incremental_windows(instants: list[str]) -> list[tuple[str, str | None]]:
    """Each single commit; everything; all but the first (open end); the last two (open end); all
    but the first and last (a closed end before later rewrites of the same file groups)."""
    if not instants:
        return []
    starts = [BEFORE_ALL, *instants[:-1]]
    windows = [(b, e) for b, e in zip(starts, instants)]
    windows.append((BEFORE_ALL, instants[-1]))
    windows.append((instants[0], None))
    if len(instants) >= 3:
        windows.append((instants[-3], None))
        windows.append((instants[0], instants[-2]))
    return sorted(set(windows), key=lambda w: (w[0], w[1] or "9"))

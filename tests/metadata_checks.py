"""What the metadata table must hold, checked by the package's own checker
(`upsertlake.simulation.invariants.metadata_violations`: storage's files of completed writes and
no file of a pending or failed one, column stats equal to the footers', the record index putting
each key where its row is), plus what the tests ask beyond it: what its column_stats say of log
files is what their records say (shared by the metadata tests and the Spark ones)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from upsertlake.layout.file_system_view import list_partitions_and_files, sort_listing
from upsertlake.logfile import DataBlock
from upsertlake.logfile.names import is_log_path
from upsertlake.logfile.reader import read_logs
from upsertlake.metadata import MetadataTable
from upsertlake.metadata.changes import RecordsStats
from upsertlake.metadata.listing import listed_files
from upsertlake.metadata.stats import bound
from upsertlake.simulation.invariants import committed_files, metadata_violations
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline


def holds(root: Path) -> MetadataTable:
    """The metadata table is kept and trusted, the checker finds nothing it says that the table
    does not, and (beyond the checker, which lets a rolled-back write leave the empty folder of a
    partition it created) it lists exactly the partition folders storage holds."""
    storage = Storage(root)
    timeline = Timeline.load(storage)
    table = MetadataTable.open(timeline)
    assert table is not None, "the metadata table is kept"
    assert metadata_violations(storage) == []
    listed = listed_files(timeline)
    assert listed is not None, "the metadata table is trusted"
    assert sort_listing(listed[1], None, listed[0]).partitions == list_partitions_and_files(storage).partitions
    return table


def initializations(root: Path) -> list[str]:
    """The metadata table's initialization instants (a new one: it was built again)."""
    timeline = Timeline.load(Storage(root / ".hoodie" / "metadata"))
    return sorted(i.time for i in timeline.instants if i.time.startswith("00000000000000"))


def typed(ids, ts: int, nan_part: str | None = None) -> pa.Table:
    """Rows of every type the column statistics index, some null; NaN in `nan_part`'s rows."""
    ids = list(ids)
    parts = ["abc"[i % 3] for i in ids]
    return pa.table({
        "id": [f"id-{i:04d}" for i in ids],
        "part": parts,
        "ts": pa.array([ts] * len(ids), pa.int64()),
        "val": pa.array([float("nan") if p == nan_part else i / 4 for i, p in zip(ids, parts)], pa.float64()),
        "n": pa.array([None if i % 4 == 0 else i * ts for i in ids], pa.int32()),
        "at": pa.array([1_700_000_000_000_000 + i * ts for i in ids], pa.timestamp("us", tz="UTC")),
        "amount": pa.array([Decimal(i * ts) / 100 for i in ids], pa.decimal128(10, 2)),
        "day": pa.array([19_000 + i for i in ids], pa.date32()),
    })


TYPED_COLUMNS = ["_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_record_key",
                 "id", "part", "ts", "val", "n", "at", "amount", "day"]


def log_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The data log files (not the metadata table's) this process reads from now on, every way
    `Storage` reads a file, in order."""
    read: list[str] = []
    for method in ("read_bytes", "read_versioned", "open_input"):
        real = getattr(Storage, method)

        def reading(self: Storage, rel: str, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            if is_log_path(rel) and "/.hoodie/" not in self.full_path(rel):
                read.append(rel)
            return _real(self, rel, *args, **kwargs)

        monkeypatch.setattr(Storage, method, reading)
    return read


def logs_described(root: Path, columns: list[str]) -> dict[tuple[str, str], bool]:
    """Every committed log file's `column_stats` records are exactly the statistics of `columns`
    over the records its data blocks hold, read back here (none when they cannot be exact: NaN;
    none for a log of deletes only). Per (partition, log file name): whether it has records."""
    storage = Storage(root)
    timeline = Timeline.load(storage)
    table = MetadataTable.open(timeline)
    assert table is not None
    on_storage = list_partitions_and_files(storage)
    committed = {p for p, _ in committed_files(timeline, on_storage)}
    logs = [lf for lf in on_storage.log_files if lf.path in committed]
    names = [(lf.partition_path, lf.path.rpartition("/")[2]) for lf in logs]
    recorded = table.column_stats(names, columns)
    out = {}
    for lf, (partition, name) in zip(logs, names):
        blocks = read_logs([(storage.read_bytes(lf.path), lf.path)])
        records = [b.records for b in blocks if isinstance(b, DataBlock)]
        want = RecordsStats.of(pa.concat_tables(records)).select(columns) if records else []
        got = recorded.get((partition, name), {})
        if not want:
            assert got == {}, f"{lf.path}: no statistics hold exactly, yet it has records"
        else:
            assert sorted(got) == sorted(columns), f"{lf.path}: records of {sorted(got)}"
            for s in want:
                r = got[s.column]
                low, high = bound(r, "minValue", s.type), bound(r, "maxValue", s.type)
                recorded_as = (r["valueCount"], r["nullCount"], low, high)
                assert recorded_as == (s.values, s.nulls, s.low, s.high), f"{lf.path}, column {s.column}"
        out[(partition, name)] = bool(got)
    return out

"""What the metadata table must hold, checked by the package's own checker
(`upsertlake.simulation.invariants.metadata_violations`: storage's files of completed writes and
no file of a pending or failed one, column stats equal to the footers', the record index putting
each key where its row is), plus what the tests ask beyond it (shared by the metadata tests and
the Spark ones)."""

from __future__ import annotations

from pathlib import Path

from upsertlake.layout.file_system_view import list_partitions_and_files, sort_listing
from upsertlake.metadata import MetadataTable
from upsertlake.metadata.listing import listed_files
from upsertlake.simulation.invariants import metadata_violations
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

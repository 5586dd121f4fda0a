"""What the metadata table must list: storage's files of completed writes, no file of a pending
or failed one; and where its record index puts each key: where the key's row is (shared by the
metadata tests and the Spark ones)."""

from __future__ import annotations

from pathlib import Path

import upsertlake
from upsertlake.layout.file_system_view import list_partitions_and_files, sort_listing
from upsertlake.metadata import MetadataTable
from upsertlake.metadata.listing import listed_files
from upsertlake.simulation.invariants import committed_files
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline


def holds(root: Path) -> MetadataTable:
    """The metadata table lists exactly what storage holds of committed writes, and (when kept)
    its record index puts every key where its row is, and holds no other key."""
    storage = Storage(root)
    timeline = Timeline.load(storage)
    listed = listed_files(timeline)
    assert listed is not None, "the metadata table is trusted"
    listing, on_storage = sort_listing(listed[1], None, listed[0]), list_partitions_and_files(storage)
    assert listing.partitions == on_storage.partitions
    assert {(f.path, f.size) for f in listing.base_files + listing.log_files} == committed_files(timeline, on_storage)
    table = MetadataTable.open(timeline)
    assert table is not None
    if "record_index" in table.partitions:
        data = upsertlake.open_table(root).read(
            columns=["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name"]
        )
        stored = {k: (p, n.split("_")[0]) for k, p, n in zip(*(data.column(c).to_pylist() for c in data.column_names))}
        assert table.record_locations(stored) == stored
        assert sorted(table.scan("record_index")) == sorted(stored)
    return table


def initializations(root: Path) -> list[str]:
    """The metadata table's initialization instants (a new one: it was built again)."""
    timeline = Timeline.load(Storage(root / ".hoodie" / "metadata"))
    return sorted(i.time for i in timeline.instants if i.time.startswith("00000000000000"))

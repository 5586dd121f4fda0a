"""The record index (Hudi's RECORD_INDEX): each key's file group from the metadata table's
`record_index` partition, by point lookups, instead of reading every file's keys.

Global, as Hudi's: a key is found in whatever partition holds it. A key goes to the record index's
file group Hudi hashes it to (`upsertlake.metadata.keys.file_group_index`), so we read an index
Hudi wrote and Hudi reads ours. The lookup costs a few reads per record-index file group the batch
touches, however large the table; the index is kept by every write (services.metadata_table).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.errors import ConfigError
from upsertlake.index.base import Index, LiveCopies, join_locations, live_only
from upsertlake.layout.file_system_view import FileSystemView
from upsertlake.metadata import MetadataTable
from upsertlake.metadata.partitions import RECORD_INDEX
from upsertlake.schema.columns import LOC_FILE_ID, LOC_INSTANT, LOC_PARTITION, LOOKUP_KEY, LOOKUP_ROW
from upsertlake.timeline.active import Timeline


class RecordIndex(Index):
    def __init__(self, is_global: bool = True) -> None:
        super().__init__(is_global=True)  # global whatever it is asked: the key alone finds its entry
        self._stats: dict[str, int] = {}

    def tag(
        self, keys: pa.Array, partitions: pa.Array, view: FileSystemView, unique: bool = False,
        live: LiveCopies | None = None,
    ) -> pa.Table:
        keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
        partitions = partitions.combine_chunks() if isinstance(partitions, pa.ChunkedArray) else partitions
        table = record_index_table(view.timeline)
        distinct = pc.unique(keys)
        found = table.record_locations(distinct.to_pylist())
        latest = view.latest_by_group(sorted({p for p, _ in found.values()}))
        stored_keys, stored_parts, stored_ids, instants = [], [], [], []
        for key, (partition, file_id) in found.items():
            base = latest.get((partition, file_id))
            stored_keys.append(key)
            stored_parts.append(partition)
            stored_ids.append(file_id)
            instants.append(base.instant_time if base is not None else None)
        located = pa.table(
            {
                LOOKUP_KEY: pa.array(stored_keys, pa.string()),
                LOC_PARTITION: pa.array(stored_parts, pa.string()),
                LOC_FILE_ID: pa.array(stored_ids, pa.string()),
                LOC_INSTANT: pa.array(instants, pa.string()),
            }
        )
        located = live_only(located, live)
        at = pc.index_in(located.column(LOOKUP_KEY), value_set=keys)
        located = located.append_column(LOOKUP_ROW, pc.cast(at, pa.int64()))
        self._stats = {
            "keys_looked_up": len(distinct),
            "keys_matched": located.num_rows,
            "index_file_groups": len(table.slices(RECORD_INDEX)),
        }
        return join_locations(keys, partitions, located, True, unique)

    def stats(self) -> dict[str, int]:
        return dict(self._stats)


def record_index_table(timeline: Timeline) -> MetadataTable:
    """The metadata table whose record index tags a write on the table of `timeline`; a clear
    error when the table has none."""
    table = MetadataTable.open(timeline)
    if table is None or RECORD_INDEX not in table.partitions:
        raise ConfigError(
            "hoodie.index.type=RECORD_INDEX needs the metadata table's record index, which this table does not "
            "have: write with hoodie.metadata.enable=true (table version 8 or 9) to build it"
        )
    return table

"""The metadata table's partitions, record types and file groups, as Hudi names them
(MetadataPartitionType, HoodieTableMetadataUtil): docs/DESIGN.md §11.

Every partition of the metadata table is a folder under `.hoodie/metadata/` holding a fixed number
of file groups, `<prefix><index:04d>-0`; a record goes to a file group by its key
(`keys.file_group_index`). The data table's `hoodie.table.metadata.partitions` lists the
partitions readers may trust, `...partitions.inflight` those being built.
"""

from __future__ import annotations

from enum import IntEnum

from upsertlake.config.option import option_list
from upsertlake.timeline.layouts import METADATA_PARTITIONS_KEY

PARTITIONS_KEY = METADATA_PARTITIONS_KEY  # the partitions readers may trust
FOLDER = ".hoodie/metadata"
INFLIGHT_KEY = "hoodie.table.metadata.partitions.inflight"

FILES = "files"
COLUMN_STATS = "column_stats"
PARTITION_STATS = "partition_stats"
RECORD_INDEX = "record_index"
BLOOM_FILTERS = "bloom_filters"
SECONDARY_INDEX_PREFIX = "secondary_index_"
EXPRESSION_INDEX_PREFIX = "expr_index_"

# The instant times Hudi gives the deltacommits that initialize metadata partitions: SOLO_COMMIT_TIMESTAMP
# followed by a 3-digit counter (HoodieBackedTableMetadataWriter.generateUniqueInstantTime).
SOLO_COMMIT_TIMESTAMP = "00000000000000"


class RecordType(IntEnum):
    """HoodieMetadataRecord.type: what a record of the metadata table describes."""

    ALL_PARTITIONS = 1
    FILES = 2
    COLUMN_STATS = 3
    BLOOM_FILTER = 4
    RECORD_INDEX = 5
    PARTITION_STATS = 6
    SECONDARY_INDEX = 7


_FILE_ID_PREFIX = {
    FILES: "files-",
    COLUMN_STATS: "col-stats-",
    BLOOM_FILTERS: "bloom-filters-",
    RECORD_INDEX: "record-index-",
    PARTITION_STATS: "partition-stats-",
}

def is_index_of_expressions(partition: str) -> bool:
    """A secondary or expression index: partitions upsertlake reads past but never keeps."""
    return partition.startswith((SECONDARY_INDEX_PREFIX, EXPRESSION_INDEX_PREFIX))


def file_group_id(partition: str, index: int) -> str:
    """The file id of a metadata partition's `index`-th file group (getFileIDForFileGroup)."""
    if is_index_of_expressions(partition):
        prefix = partition.replace("_", "-") + "-"
    else:
        prefix = _FILE_ID_PREFIX[partition]
    return f"{prefix}{index:04d}-0"


def listed(value: str | None) -> list[str]:
    """A `hoodie.table.metadata.partitions[.inflight]` value (absent: none) as a list."""
    return option_list(value or "")

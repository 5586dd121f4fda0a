"""Apache Hudi's metadata table (`.hoodie/metadata`): its records, reading it, and keeping it.

The metadata table is a merge-on-read Hudi table of HFiles beside the data table's timeline:
`files` lists each partition's files, `column_stats` and `partition_stats` hold per-file and
per-partition column statistics, `record_index` maps every record key to its file group.
docs/DESIGN.md §11 says how it is read and kept consistent.
"""

from upsertlake.metadata.table import MetadataSlice, MetadataTable, valid_instants

__all__ = ["MetadataSlice", "MetadataTable", "valid_instants"]

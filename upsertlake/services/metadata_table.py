"""The metadata table (`.hoodie/metadata`): upsertlake does not maintain one, so it removes it.

Hudi 1.x's Spark writer creates a metadata table by default and lists it in
`hoodie.table.metadata.partitions`; readers then list files from it instead of from storage. A
writer that does not update it would leave readers a stale file list, so, as Hudi does when a
writer runs with `hoodie.metadata.enable=false`, every upsertlake write, service and upgrade
first deletes it and clears the property (under the table lock, logged). Readers then list
storage, which is what upsertlake writes.
"""

from __future__ import annotations

import logging

from upsertlake.config.properties_file import write_properties
from upsertlake.config.table_config import TableConfig
from upsertlake.storage import Storage

log = logging.getLogger(__name__)

METADATA_FOLDER = ".hoodie/metadata"
PARTITIONS_KEY = "hoodie.table.metadata.partitions"
_KEYS = (PARTITIONS_KEY, "hoodie.table.metadata.partitions.inflight")


def drop_metadata_table(storage: Storage, table_config: TableConfig) -> TableConfig:
    """Clear the metadata table's properties, then delete its folder; returns the config now on
    disk. The property goes first: a crash in between leaves a folder no reader consults. Call
    under the table lock."""
    if not any(table_config.extra.get(k) for k in _KEYS) and not _folder_present(storage):
        return table_config
    if any(k in table_config.extra for k in _KEYS):
        write_properties(storage, dict.fromkeys(_KEYS))
        table_config = TableConfig.load(storage)
    storage.delete_dir(METADATA_FOLDER)
    log.warning(
        "deleted the metadata table of %s (%s): upsertlake does not maintain it, and readers must "
        "not list files from a stale one (as Hudi does for a writer with hoodie.metadata.enable=false)",
        storage.base,
        METADATA_FOLDER,
    )
    return table_config


def _folder_present(storage: Storage) -> bool:
    """Whether the metadata table's folder is there (one request)."""
    return storage.folder_exists(METADATA_FOLDER)

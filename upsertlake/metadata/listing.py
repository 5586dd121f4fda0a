"""Listing a data table's files from its metadata table's `files` partition instead of storage.

On an object store a listing costs a LIST request per 1,000 files, or one per partition; the
metadata table answers with a few GETs however many partitions there are. It is trusted only
when the data table lists it as complete and it holds every instant the data timeline completed
since its initialization (`table.unsynced_instants`); otherwise the caller lists storage, and a
metadata table that is listed but cannot be trusted is reported with a warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection

from upsertlake.errors import CorruptTableError, UpsertlakeWarning
from upsertlake.metadata.table import MetadataTable, unsynced_instants
from upsertlake.storage import FileEntry
from upsertlake.timeline.active import Timeline


class MetadataTableWarning(UpsertlakeWarning):
    """The metadata table is listed in hoodie.properties but cannot be trusted: files are listed
    from storage instead (slower on an object store, never wrong)."""


def open_trusted(timeline: Timeline) -> MetadataTable | None:
    """The data table's metadata table if readers may trust it, else None (warned when one is
    listed but unusable)."""
    storage = timeline.storage
    try:
        table = MetadataTable.open(timeline)
        if table is None:
            return None
        missing = unsynced_instants(timeline, table.timeline)
    except (CorruptTableError, FileNotFoundError, OSError) as e:
        _warn(f"the metadata table of {storage.base} cannot be read ({e}); listing storage instead")
        return None
    if missing:
        _warn(
            f"the metadata table of {storage.base} misses {len(missing)} completed instant(s) of the data "
            f"timeline (first {missing[0]}): a writer that does not keep it wrote them; listing storage instead"
        )
        return None
    return table


def listed_files(timeline: Timeline, scope: Collection[str] | None = None) -> tuple[list[str], list[FileEntry]] | None:
    """The partitions (of `scope` only, if given) and their files as the metadata table lists
    them, or None when storage must be listed instead."""
    table = open_trusted(timeline)
    if table is None:
        return None
    try:
        partitions = table.partition_paths()
        if scope is not None:
            partitions = [p for p in partitions if p in scope]
        files = table.files(partitions)
    except (CorruptTableError, FileNotFoundError, OSError) as e:
        _warn(f"the metadata table of {timeline.storage.base} cannot be read ({e}); listing storage instead")
        return None
    entries = [
        FileEntry(f"{partition}/{name}" if partition else name, size, False, 0)
        for partition, names in files.items() for name, size in names.items()
    ]
    return partitions, entries


def _warn(message: str) -> None:
    warnings.warn(message, MetadataTableWarning, stacklevel=4)

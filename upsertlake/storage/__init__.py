"""Storage: every byte the library reads or writes goes through `Storage`, with table-relative
paths, on a local disk or an object store.

Layers (pyproject.toml, docs/DESIGN.md §3): may import util, errors.
"""

from upsertlake.storage.location import Location, parse_location
from upsertlake.storage.storage import FileEntry, Storage, table_storage

__all__ = ["FileEntry", "Location", "Storage", "parse_location", "table_storage"]

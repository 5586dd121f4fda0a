"""Storage: every byte the library reads or writes goes through `Storage`, with table-relative paths."""

from upsertlake.storage.storage import FileEntry, Storage

__all__ = ["FileEntry", "Storage"]

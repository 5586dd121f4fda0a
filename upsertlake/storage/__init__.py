"""Storage: every byte the library reads or writes goes through `Storage`, with table-relative
paths.

Floor 10 of the layers declared in pyproject.toml [tool.importlinter]; may import util, errors.
"""

from upsertlake.storage.storage import FileEntry, Storage

__all__ = ["FileEntry", "Storage"]

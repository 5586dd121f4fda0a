"""The table's storage as a read-only pyarrow file system, for datasets other engines read
(pyarrow, DuckDB, Polars): every read goes through the storage layer, so it takes the table's
storage options and credentials, gets obstore's retries and is counted with the table's requests.
Paths are table-relative. A file small enough arrives whole in one GET (`open_object`), which is
what parquet readers then read its footer and columns from.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from upsertlake.storage.storage import Storage


class StorageHandler(pafs.FileSystemHandler):
    """A `pyarrow.fs.FileSystemHandler` over a `Storage` (wrap it in `pyarrow.fs.PyFileSystem`)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StorageHandler) and other.storage == self.storage

    def __ne__(self, other: object) -> bool:
        return not self == other

    def get_type_name(self) -> str:
        return f"upsertlake+{self.storage.location.kind}"

    def normalize_path(self, path: str) -> str:
        return path.strip("/")

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        out = []
        for path in paths:
            entry = self.storage.stat(path)
            if entry is None:
                out.append(pafs.FileInfo(path, pafs.FileType.NotFound))
            else:
                out.append(pafs.FileInfo(path, pafs.FileType.File, size=entry.size))
        return out

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        entries = self.storage.list(self.normalize_path(selector.base_dir), recursive=selector.recursive)
        return [pafs.FileInfo(e.path, pafs.FileType.Directory if e.is_dir else pafs.FileType.File, size=e.size)
                for e in entries]

    def open_input_file(self, path: str) -> pa.NativeFile:
        return self.storage.open_input(self.normalize_path(path))

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.storage.open_input(self.normalize_path(path))

    # -- a dataset reads; it never writes ------------------------------------------------------
    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise pa.ArrowNotImplementedError(f"{self.get_type_name()} is read-only: write through the table")

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = _read_only
    delete_file = move = copy_file = open_output_stream = open_append_stream = _read_only


def arrow_file_system(storage: Storage) -> pafs.FileSystem:
    """A pyarrow file system reading the table's files by table-relative paths."""
    local = storage.os_path()
    if local is not None:
        return pafs.SubTreeFileSystem(local, pafs.LocalFileSystem())
    return pafs.PyFileSystem(StorageHandler(storage))

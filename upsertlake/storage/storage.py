"""One small storage layer over `pyarrow.fs`, addressed by paths relative to the table's base.

Data files go through pyarrow's file systems so that object stores can come later; the one
operation that commits need to be atomic, *write-if-absent*, is implemented per file system
(locally: write a temporary file, then hard-link it to its final name, which fails if the name
exists — never an overwriting rename).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

DELETE_DIR_ATTEMPTS = 5


@dataclass(frozen=True)
class FileEntry:
    """A listed file: its table-relative path, size in bytes and modification time (ns)."""

    path: str
    size: int
    is_dir: bool
    mtime_ns: int

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


class Storage:
    """Reads, lists, writes and deletes files below one base path."""

    def __init__(self, base: str | os.PathLike[str]) -> None:
        base = os.fspath(base)
        base = base.removeprefix("file://")
        self.base = str(Path(base).resolve())
        self.fs: pafs.FileSystem = pafs.LocalFileSystem()

    # -- paths -------------------------------------------------------------------------------
    def full_path(self, rel: str) -> str:
        """The absolute path of a table-relative path (as pyarrow readers want it)."""
        return f"{self.base}/{rel}" if rel else self.base

    # -- reads -------------------------------------------------------------------------------
    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self.full_path(rel)).type != pafs.FileType.NotFound

    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open_input_stream(self.full_path(rel)) as f:
            return f.read()

    def open_input(self, rel: str) -> pa.NativeFile:
        return self.fs.open_input_file(self.full_path(rel))

    def list(self, rel: str = "", recursive: bool = False) -> list[FileEntry]:
        """Entries below `rel` (empty list when it does not exist)."""
        selector = pafs.FileSelector(self.full_path(rel), allow_not_found=True, recursive=recursive)
        prefix = len(self.base) + 1
        return [
            FileEntry(
                path=info.path[prefix:],
                size=info.size or 0,
                is_dir=info.type == pafs.FileType.Directory,
                mtime_ns=info.mtime_ns or 0,
            )
            for info in self.fs.get_file_info(selector)
        ]

    # -- writes ------------------------------------------------------------------------------
    def makedirs(self, rel: str) -> None:
        self.fs.create_dir(self.full_path(rel), recursive=True)

    def open_output(self, rel: str) -> pa.NativeFile:
        parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
        self.makedirs(parent)
        return self.fs.open_output_stream(self.full_path(rel))

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a whole file, replacing it atomically if it exists (temp file + rename)."""
        tmp = self._temp_sibling(rel)
        with self.open_output(tmp) as f:
            f.write(data)
        self.fs.move(self.full_path(tmp), self.full_path(rel))

    def write_if_absent(self, rel: str, data: bytes) -> bool:
        """Atomically create `rel` with `data`; False (and nothing written) if it already exists.

        Readers never see a partly written file: the bytes go to a temporary sibling first,
        which is then hard-linked to the final name (`link` fails if the name exists).
        """
        tmp = self._temp_sibling(rel)
        with self.open_output(tmp) as f:
            f.write(data)
        try:
            os.link(self.full_path(tmp), self.full_path(rel))
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(self.full_path(tmp))

    def delete(self, rel: str, missing_ok: bool = True) -> None:
        try:
            self.fs.delete_file(self.full_path(rel))
        except FileNotFoundError:
            if not missing_ok:
                raise

    def delete_dir(self, rel: str) -> None:
        """Delete a folder and what it holds. A file another process adds (or removes) meanwhile
        fails one attempt ("Directory not empty"); the next one takes it along."""
        for attempt in range(DELETE_DIR_ATTEMPTS):
            if not self.exists(rel):
                return
            try:
                self.fs.delete_dir(self.full_path(rel))
                return
            except OSError:
                if attempt == DELETE_DIR_ATTEMPTS - 1:
                    raise

    @staticmethod
    def _temp_sibling(rel: str) -> str:
        head, _, name = rel.rpartition("/")
        tmp = f".{name}.{uuid.uuid4().hex}.tmp"
        return f"{head}/{tmp}" if head else tmp

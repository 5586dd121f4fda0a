"""A table on the local file system: pyarrow's local file system and the OS.

A whole-file write goes to a temporary sibling and is renamed over the old file; a create-if-absent
is a hard link of a finished temporary file (`link` fails if the name exists), never an overwriting
rename, or an exclusive create for an empty file; readers never see a file half written.

Apache Hudi writes local tables through Hadoop's checksummed file system, which keeps a `.<name>.crc`
beside every file it writes and refuses to read a file that no longer matches it ("Could not load
Hoodie properties" once we rewrite `hoodie.properties`). Whatever we write over or delete loses
its checksum file first, so Hudi reads it unchecked, as it reads every file we write.
"""

from __future__ import annotations

import builtins
import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from upsertlake.storage.cache import Caches
from upsertlake.storage.store import FileEntry, Store

_FS = pafs.LocalFileSystem()
DELETE_DIR_ATTEMPTS = 5


class LocalStore(Store):
    read_threads = 2  # a local read is decoding: as many as cores
    expensive_requests = False
    conditional_writes = False
    exact_mtimes = True

    def __init__(self, base: str) -> None:
        self.base = base
        self.caches = Caches()

    def _path(self, rel: str) -> str:
        return f"{self.base}/{rel}" if rel else self.base

    def os_path(self, rel: str) -> str | None:
        return self._path(rel)

    def check(self) -> None:
        pass

    def stat(self, rel: str) -> FileEntry | None:
        info = _FS.get_file_info(self._path(rel))
        if info.type != pafs.FileType.File:
            return None
        return FileEntry(rel, info.size or 0, False, info.mtime_ns or 0)

    def exists(self, rel: str) -> bool:
        return bool(_FS.get_file_info(self._path(rel)).type != pafs.FileType.NotFound)

    def folder_exists(self, rel: str) -> bool:
        return self.exists(rel)

    def read_bytes(self, rel: str) -> bytes:
        with _FS.open_input_stream(self._path(rel)) as f:
            return bytes(f.read())

    def read_versioned(self, rel: str) -> tuple[bytes, str] | None:
        raise NotImplementedError("a local file system has no versions (conditional_writes is False)")

    def open_input(self, rel: str) -> pa.NativeFile:
        return _FS.open_input_file(self._path(rel))

    def read_parquet(self, rel: str, columns: list[str] | None, use_threads: bool) -> pa.Table:
        return pq.ParquetFile(self._path(rel)).read(columns=columns, use_threads=use_threads)

    def list(self, rel: str, recursive: bool) -> list[FileEntry]:
        selector = pafs.FileSelector(self._path(rel), allow_not_found=True, recursive=recursive)
        prefix = len(self.base) + 1
        return [
            FileEntry(
                path=info.path[prefix:],
                size=info.size or 0,
                is_dir=info.type == pafs.FileType.Directory,
                mtime_ns=info.mtime_ns or 0,
            )
            for info in _FS.get_file_info(selector)
        ]

    def list_outside(self, folder: str) -> builtins.list[FileEntry]:
        cut = f"{folder}/"
        return [e for e in self.list("", True) if not e.is_dir and e.path != folder and not e.path.startswith(cut)]

    def missing(self, paths: Iterable[str]) -> builtins.list[str]:
        return [p for p in paths if self.stat(p) is None]

    def makedirs(self, rel: str) -> None:
        _FS.create_dir(self._path(rel), recursive=True)

    def open_output(self, rel: str) -> pa.NativeFile:
        self.makedirs(rel.rsplit("/", 1)[0] if "/" in rel else "")
        return _FS.open_output_stream(self._path(rel))

    @contextmanager
    def uploading(self) -> Iterator[LocalStore]:
        yield self  # a local file is written where it is

    def write_bytes(self, rel: str, data: bytes | memoryview) -> None:
        tmp = _temp_sibling(rel)
        with self.open_output(tmp) as f:
            f.write(data)
        self._drop_checksum(rel)
        _FS.move(self._path(tmp), self._path(rel))

    def write_if_absent(self, rel: str, data: bytes) -> bool:
        if not data:  # nothing to see half-written: an exclusive create is the whole write
            self.makedirs(rel.rpartition("/")[0])
            try:
                os.close(os.open(self._path(rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
                return True
            except FileExistsError:
                return False
        tmp = _temp_sibling(rel)
        with self.open_output(tmp) as f:
            f.write(data)
        self._drop_checksum(rel)  # a file of that name Hudi wrote once and deleted may have left it
        try:
            os.link(self._path(tmp), self._path(rel))
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(self._path(tmp))

    def put_if(self, rel: str, data: bytes, version: str | None) -> str | None:
        raise NotImplementedError("a local file system has no versions (conditional_writes is False)")

    def delete(self, rel: str, missing_ok: bool) -> None:
        self._drop_checksum(rel)
        try:
            _FS.delete_file(self._path(rel))
        except FileNotFoundError:
            if not missing_ok:
                raise

    def _drop_checksum(self, rel: str) -> None:
        """Remove the Hadoop checksum file Hudi may keep beside `rel` (module docstring)."""
        head, _, name = rel.rpartition("/")
        with suppress(FileNotFoundError):
            os.unlink(self._path(f"{head}/.{name}.crc" if head else f".{name}.crc"))

    def delete_dir(self, rel: str) -> None:
        """A file another process adds (or removes) meanwhile fails one attempt ("Directory not
        empty"); the next one takes it along."""
        for attempt in range(DELETE_DIR_ATTEMPTS):
            if not self.exists(rel):
                return
            try:
                _FS.delete_dir(self._path(rel))
                return
            except OSError:
                if attempt == DELETE_DIR_ATTEMPTS - 1:
                    raise


def _temp_sibling(rel: str) -> str:
    head, _, name = rel.rpartition("/")
    tmp = f".{name}.{uuid.uuid4().hex}.tmp"
    return f"{head}/{tmp}" if head else tmp

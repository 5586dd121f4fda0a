"""The small interface every store offers, by table-relative path: the verbs the engine needs.

Two stores stand behind it (`local_store.LocalStore`, `object_store.ObjectStore`), and `Storage`
picks one from the location: nothing above `storage/` asks which one it has (docs/DESIGN.md §4).
The commit point needs only `write_if_absent`; nothing relies on rename.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import pyarrow as pa

from upsertlake.storage.cache import Caches


@dataclass(frozen=True)
class FileEntry:
    """A listed file: its table-relative path, size in bytes, modification time (ns) and, on an
    object store, its version (ETag): a listing then tells whether a file changed since it was
    read, without a request of its own."""

    path: str
    size: int
    is_dir: bool
    mtime_ns: int
    version: str | None = None

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


class Store(ABC):
    """One store's verbs. Paths are relative to the table's base."""

    read_threads: int  # files worth reading at once
    expensive_requests: bool  # each request is a billed round trip: batch and cache what can be
    conditional_writes: bool  # read_versioned / put_if work (versions and conditional writes)
    exact_mtimes: bool  # listed modification times are exact (not to the second)
    caches: Caches  # what the files said lately

    @abstractmethod
    def os_path(self, rel: str) -> str | None:
        """A path the operating system (or a JVM) opens, where the store has one."""

    @abstractmethod
    def check(self) -> None:
        """Fail early with a named error when the store cannot be reached; nothing written."""

    @abstractmethod
    def stat(self, rel: str) -> FileEntry | None:
        """The file at `rel`, or None."""

    @abstractmethod
    def exists(self, rel: str) -> bool:
        """Whether a file or a folder (a prefix with objects below it) is at `rel`."""

    @abstractmethod
    def folder_exists(self, rel: str) -> bool:
        """Whether something lies below `rel`, asked with one request."""

    @abstractmethod
    def read_bytes(self, rel: str) -> bytes: ...

    @abstractmethod
    def read_versioned(self, rel: str) -> tuple[bytes, str] | None:
        """The bytes of `rel` and their version, or None when there is none."""

    @abstractmethod
    def open_input(self, rel: str) -> pa.NativeFile:
        """A random-access file."""

    @abstractmethod
    def read_parquet(self, rel: str, columns: list[str] | None, use_threads: bool) -> pa.Table: ...

    @abstractmethod
    def list(self, rel: str, recursive: bool) -> list[FileEntry]:
        """Entries below `rel` (empty when nothing is there)."""

    @abstractmethod
    def list_outside(self, folder: str) -> builtins.list[FileEntry]:
        """Every file below the base except those under `folder`."""

    @abstractmethod
    def missing(self, paths: Iterable[str]) -> builtins.list[str]:
        """Those of `paths` that are not files now."""

    @abstractmethod
    def makedirs(self, rel: str) -> None: ...

    @abstractmethod
    def open_output(self, rel: str) -> pa.NativeFile:
        """A stream whose file appears (whole) when closed."""

    @abstractmethod
    def uploading(self) -> AbstractContextManager[Store]:
        """This store for writing files whose uploads may run behind their writers; every one
        is stored when the block ends."""

    @abstractmethod
    def write_bytes(self, rel: str, data: bytes | memoryview) -> None:
        """Write a whole file, replacing one that exists (atomically)."""

    @abstractmethod
    def write_if_absent(self, rel: str, data: bytes) -> bool:
        """Atomically create `rel`; False, with nothing written, when it exists."""

    @abstractmethod
    def put_if(self, rel: str, data: bytes, version: str | None) -> str | None:
        """Write `rel` only if its version is still `version` (None: if absent); the new version,
        or None when another writer changed it first."""

    @abstractmethod
    def delete(self, rel: str, missing_ok: bool) -> None: ...

    @abstractmethod
    def delete_dir(self, rel: str) -> None:
        """Delete a folder and everything below it."""

"""One storage layer for every store, addressed by paths relative to the table's base.

`Storage` picks its store from the location: a local folder goes to `LocalStore` (pyarrow's local
file system and the OS), an object store (S3, GCS, Azure) to `ObjectStore` (obstore). Both offer
the verbs of `store.Store`, so nothing above this package asks which one a table is on; where a
caller needs a property of the store it asks for that (an OS path for `flock`, conditional
writes, whether requests are worth batching). See docs/DESIGN.md §4.
"""

from __future__ import annotations

import builtins
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from upsertlake.errors import UpsertlakeWarning
from upsertlake.storage.cache import Lru
from upsertlake.storage.clients import normalized
from upsertlake.storage.local_store import LocalStore
from upsertlake.storage.location import Location, parse_location
from upsertlake.storage.object_store import ObjectStore
from upsertlake.storage.requests import NoRequests, RequestCounts
from upsertlake.storage.store import FileEntry, Store

__all__ = ["FileEntry", "Storage", "table_storage"]


class Storage:
    """Reads, lists, writes and deletes files below one base path or URI.

    Picklable: a Spark task gets the location and options, and builds its own store. The store is
    built once per process, when first used (obstore hangs in a process forked after it was used,
    and reads the environment then); it keeps what the files said lately (objects read whole),
    and `requests` counts what an object store was asked."""

    def __init__(
        self, base: str | os.PathLike[str], options: Mapping[str, object] | None = None,
        requests: RequestCounts | None = None,
    ) -> None:
        """`requests`: the counter its requests go to (another storage's, to count one command's
        requests on several stores together); its own by default."""
        self.location: Location = parse_location(base)
        self.base = self.location.uri
        self.options: dict[str, str] = normalized(options)
        if requests is None:
            requests = NoRequests() if self.location.is_local else RequestCounts()
        self.requests: RequestCounts = requests
        self._pid_store: tuple[int, Store] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pid_store": None}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Storage) and (self.base, self.options) == (other.base, other.options)

    def __hash__(self) -> int:
        return hash((self.base, tuple(sorted(self.options.items()))))

    def __repr__(self) -> str:
        return f"Storage({self.base!r})"

    @property
    def _store(self) -> Store:
        pid = os.getpid()
        if self._pid_store is None or self._pid_store[0] != pid:
            store: Store = (
                LocalStore(self.base) if self.location.is_local
                else ObjectStore(self.location, self.options, self.requests)
            )
            self._pid_store = (pid, store)
        return self._pid_store[1]

    # -- what the store is ---------------------------------------------------------------------
    @property
    def read_threads(self) -> int:
        """Files worth reading at once: a local read is decoding (2); on an object store each
        read first waits on its GET, so more are in flight."""
        return self._store.read_threads

    @property
    def expensive_requests(self) -> bool:
        """Whether each request is a round trip the store bills: worth batching and caching."""
        return self._store.expensive_requests

    @property
    def takes_options(self) -> bool:
        """Whether storage options configure this store (an object store's client)."""
        return not self.location.is_local

    @property
    def exact_mtimes(self) -> bool:
        """Whether listed modification times are exact (an object store keeps them to the second)."""
        return self._store.exact_mtimes

    @property
    def conditional_writes(self) -> bool:
        """Whether `read_versioned`/`put_if` work here (object stores: ETags and conditional PUTs)."""
        return self._store.conditional_writes

    def cache(self, name: str, limit: int, size: Callable[[Any], int] | None = None) -> Lru[Any]:
        """The store's cache `name` (made with `limit`, and `size` per entry, when first asked for):
        what this table's files said lately, kept as long as this storage's store."""
        return self._store.caches.get(name, limit, size)

    def os_path(self, rel: str = "") -> str | None:
        """The path the OS (or a JVM's own file readers) opens for `rel`; None on an object store."""
        return self._store.os_path(rel)

    # -- paths -------------------------------------------------------------------------------
    def full_path(self, rel: str) -> str:
        """The absolute path or URI of a table-relative path (as Hudi's metadata names files)."""
        return self.location.child(rel)

    def child(self, rel: str) -> Storage:
        """The storage of a folder below this one (a table inside the table: Hudi's metadata
        table), with the same options, counting its requests with this one's; one per folder, so
        its caches live as long as this storage's."""
        children = self.cache("child storages", 16)
        child = children.get(rel)
        if child is None:
            child = Storage(self.full_path(rel), self.options, requests=self.requests)
            children.put(rel, child)
        return child

    def check(self) -> None:
        """Fail early, with a named error, when the store cannot be reached or read (a missing
        bucket, wrong credentials, access denied); nothing written."""
        self._store.check()

    # -- reads -------------------------------------------------------------------------------
    def exists(self, rel: str) -> bool:
        """Whether a file or a folder is at `rel`."""
        return self._store.exists(rel)

    def folder_exists(self, rel: str) -> bool:
        """Whether anything lies below `rel` (one request; an object store has no empty folders)."""
        return self._store.folder_exists(rel)

    def stat(self, rel: str) -> FileEntry | None:
        """The file at `rel`, or None when there is none."""
        return self._store.stat(rel)

    def read_bytes(self, rel: str) -> bytes:
        return self._store.read_bytes(rel)

    def read_versioned(self, rel: str) -> tuple[bytes, str] | None:
        """The bytes of `rel` and their version (ETag), or None when there is no such object."""
        return self._store.read_versioned(rel)

    def open_input(self, rel: str) -> pa.NativeFile:
        """A random-access file (on an object store: one GET of the tail, then ranged GETs)."""
        return self._store.open_input(rel)

    def missing(self, paths: Iterable[str]) -> list[str]:
        """Those of `paths` that are not files now (on an object store with as many requests as
        folders, not files)."""
        return self._store.missing(paths)

    def parquet_file(self, rel: str, **kwargs: Any) -> pq.ParquetFile:
        return pq.ParquetFile(self.open_input(rel), **kwargs)

    def read_parquet(self, rel: str, columns: list[str] | None = None) -> pa.Table:
        """One parquet file's columns. Arrow decodes columns in parallel, so a read of one column
        gains nothing from its threads, and callers often read many files at once on a pool."""
        return self._store.read_parquet(rel, columns, use_threads=columns is None or len(columns) > 1)

    def list(self, rel: str = "", recursive: bool = False) -> list[FileEntry]:
        """Entries below `rel` (empty list when it does not exist). On an object store a
        recursive listing names files only (prefixes are not objects)."""
        return self._store.list(rel, recursive)

    def list_outside(self, folder: str) -> builtins.list[FileEntry]:
        """Every file below the base except those under `folder` (the table's files without its
        `.hoodie/`), however many `folder` holds."""
        return self._store.list_outside(folder)

    # -- writes ------------------------------------------------------------------------------
    def makedirs(self, rel: str) -> None:
        """Create a folder locally; object stores have none (a prefix exists once an object does)."""
        self._store.makedirs(rel)

    def open_output(self, rel: str) -> pa.NativeFile:
        """A stream whose file appears when closed (an object store's upload completes then)."""
        return self._store.open_output(rel)

    @contextmanager
    def uploading(self) -> Iterator[Storage]:
        """This storage for writing files whose uploads run while the writers go on encoding the
        next ones, all of them stored when the block ends (a local one writes in place)."""
        with self._store.uploading() as store:
            if store is self._store:
                yield self
                return
            view = _Uploading(self, store)
            yield view

    def write_bytes(self, rel: str, data: bytes | memoryview) -> None:
        """Write a whole file, replacing it atomically if it exists."""
        self._store.write_bytes(rel, data)

    def write_if_absent(self, rel: str, data: bytes) -> bool:
        """Atomically create `rel` with `data`; False (and nothing written) if it already exists.
        Readers never see a partly written file."""
        return self._store.write_if_absent(rel, data)

    def put_if(self, rel: str, data: bytes, version: str | None) -> str | None:
        """Write `rel` only if its version is still `version` (None: only if it is absent);
        returns the new version, or None when another writer changed it first (HTTP 412)."""
        return self._store.put_if(rel, data, version)

    def delete(self, rel: str, missing_ok: bool = True) -> None:
        self._store.delete(rel, missing_ok)

    def delete_dir(self, rel: str) -> None:
        """Delete a folder and everything below it (every object under the prefix)."""
        self._store.delete_dir(rel)


def table_storage(base: str | os.PathLike[str], options: Mapping[str, object] | None = None) -> Storage:
    """The storage of a table a user names with its storage_options. Where the store takes none
    (a local path: they configure object stores), delta-rs and pyiceberg take them and ignore them,
    and so does this, with a warning naming them, since a path meant for a store (`lake/t` for
    `s3://lake/t`) would otherwise go unnoticed."""
    storage = Storage(base, options)
    if storage.options and not storage.takes_options:
        warnings.warn(
            f"storage_options {sorted(storage.options)} are ignored: {storage.base} is a local path (they "
            "configure object stores: s3://, gs://, abfs://)",
            UpsertlakeWarning,
            stacklevel=3,
        )
    return storage


class _Uploading(Storage):
    """A storage whose files upload behind their writers (`Storage.uploading`)."""

    def __init__(self, storage: Storage, store: Store) -> None:
        self.__dict__.update(storage.__dict__)
        self._pid_store = (os.getpid(), store)

"""A table on an object store (S3, GCS, Azure) through obstore (Rust's `object_store`): every
request, parquet's included, gets obstore's retries (503 SlowDown, 500s, dropped connections).

A create-if-absent is a conditional PUT (`If-None-Match: *`), a replace-if-version one with
`If-Match`. Listings name files only (a prefix is not an object). A failure the store reports
(after its retries: a 5xx that persists, access denied, expired credentials) becomes a
StorageError naming the operation and the object, then what happened in plain words and the
store's detail (`failures.describe`); not-found, already-exists and precondition answers pass
through, since callers act on them. Objects read whole lately are kept (its
`caches`): data files never change under their name.
"""

from __future__ import annotations

import builtins
import copy
import functools
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

import obstore
import pyarrow as pa
import pyarrow.parquet as pq

from upsertlake.errors import StorageError
from upsertlake.storage.cache import Caches
from upsertlake.storage.clients import object_store
from upsertlake.storage.failures import describe
from upsertlake.storage.location import Location
from upsertlake.storage.object_files import WHOLE_FILE_BYTES, ObjectUpload, Uploads, open_object
from upsertlake.storage.requests import RequestCounts
from upsertlake.storage.store import FileEntry, Store

T = TypeVar("T")
REQUEST_THREADS = 8  # requests `missing` (and readers of many files) keep in flight at once
LIST_PAGE = 1000  # objects a listing returns per request
# User metadata of every object a conditional create makes (x-amz-meta-..., x-goog-meta-...,
# x-ms-meta-...): a token of that create alone, so that a retried create tells its own object.
# Lower-case letters only: S3 lower-cases metadata names, Azure takes identifiers only.
CREATE_TOKEN = "upsertlakecreate"


def _named_errors(method: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(method)
    def wrapper(self: ObjectStore, rel: str = "", *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, rel, *args, **kwargs)
        except Exception as exc:
            if not _is_store_failure(exc):
                raise
            raise StorageError(
                f"{method.__name__} {self.location.child(rel)} failed: {describe(exc, self.location)}"
            ) from exc

    return wrapper


def _is_store_failure(exc: Exception) -> bool:
    errors = obstore.exceptions
    passing = (errors.NotFoundError, errors.AlreadyExistsError, errors.PreconditionError)
    return isinstance(exc, errors.BaseError) and not isinstance(exc, passing)


class ObjectStore(Store):
    read_threads = REQUEST_THREADS  # each read first waits on its GET: keep more in flight
    expensive_requests = True
    conditional_writes = True
    exact_mtimes = False  # S3, GCS and Azure keep Last-Modified to the second

    def __init__(self, location: Location, options: dict[str, str], requests: RequestCounts) -> None:
        self.location = location
        self.requests = requests
        self._client = object_store(location, options)
        self.caches = Caches()
        self._whole = self.caches.get("whole files", WHOLE_FILE_BYTES, lambda b: b.size)
        self._uploads: Uploads | None = None  # see `uploading`

    def os_path(self, rel: str) -> str | None:
        return None

    def check(self) -> None:
        try:
            self.requests.count("LIST")
            obstore.list_with_delimiter(self._client, None)
        except Exception as exc:  # obstore's errors name the HTTP status and the store's message
            raise StorageError(f"cannot read {self.location.uri}: {describe(exc, self.location)}") from exc

    @_named_errors
    def stat(self, rel: str) -> FileEntry | None:
        try:
            self.requests.count("HEAD")
            meta = obstore.head(self._client, rel)
        except FileNotFoundError:
            return None
        return _entry(rel, meta)

    def exists(self, rel: str) -> bool:
        return self.stat(rel) is not None or bool(self.list(rel, False))

    def folder_exists(self, rel: str) -> bool:
        return bool(self.list(rel, False))

    @_named_errors
    def read_bytes(self, rel: str) -> bytes:
        self.requests.count("GET")
        return bytes(obstore.get(self._client, rel).bytes())

    @_named_errors
    def read_versioned(self, rel: str) -> tuple[bytes, str] | None:
        try:
            self.requests.count("GET")
            got = obstore.get(self._client, rel)
        except FileNotFoundError:
            return None
        return bytes(got.bytes()), got.meta["e_tag"] or ""

    def open_input(self, rel: str) -> pa.NativeFile:
        """One GET of the tail, then ranged GETs (`object_files.open_object`)."""
        cache = self._whole if _immutable(rel) else None
        return open_object(self._client, rel, self.location.child(rel), cache, self.requests)

    def read_parquet(self, rel: str, columns: list[str] | None, use_threads: bool) -> pa.Table:
        with self.open_input(rel) as f:
            return pq.ParquetFile(f).read(columns=columns, use_threads=use_threads)

    @_named_errors
    def list(self, rel: str, recursive: bool) -> list[FileEntry]:
        prefix = f"{rel}/" if rel else None
        self.requests.count("LIST")
        if recursive:
            return [_entry(m["path"], m) for chunk in obstore.list(self._client, prefix) for m in chunk]
        found = obstore.list_with_delimiter(self._client, prefix)
        dirs = [FileEntry(p.rstrip("/"), 0, True, 0) for p in found["common_prefixes"]]
        return dirs + [_entry(m["path"], m) for m in found["objects"]]

    @_named_errors
    def list_outside(self, folder: str) -> builtins.list[FileEntry]:
        """A listing returns 1,000 objects a request, in key order, and `.hoodie/` holds thousands
        on a long timeline: a listing whose page ends inside `folder` stops there and a second one
        starts after its last possible key."""
        cut = f"{folder}/"
        self.requests.count("LIST")
        out: builtins.list[FileEntry] = []
        after = cut + "\U0010ffff"  # the greatest code point: every key under `folder/` sorts before it
        for chunk in obstore.list(self._client, None, chunk_size=LIST_PAGE):
            out += [_entry(m["path"], m) for m in chunk if not cut <= m["path"] < after]
            if len(chunk) == LIST_PAGE and cut <= chunk[-1]["path"] < after:  # more pages, inside `folder/`
                self.requests.count("LIST")
                rest = obstore.list(self._client, None, offset=after, chunk_size=LIST_PAGE)
                out += [_entry(m["path"], m) for chunk in rest for m in chunk]
                break
        return out

    def missing(self, paths: Iterable[str]) -> builtins.list[str]:
        """One listing of each folder holding several of `paths` answers for all (a HEAD for a
        lone one), the folders asked at once: a commit checks every file it wrote with as many
        requests as folders, not files."""
        by_folder: dict[str, list[str]] = {}
        for path in paths:
            by_folder.setdefault(path.rpartition("/")[0], []).append(path)

        def gone_from(folder: str) -> builtins.list[str]:
            wanted = by_folder[folder]
            if len(wanted) == 1:
                return [p for p in wanted if self.stat(p) is None]
            present = {e.path for e in self.list(folder, False) if not e.is_dir}
            return [p for p in wanted if p not in present]

        folders = sorted(by_folder)
        if len(folders) < 2:
            return [p for folder in folders for p in gone_from(folder)]
        with ThreadPoolExecutor(max_workers=min(REQUEST_THREADS, len(folders))) as pool:
            return [p for found in pool.map(gone_from, folders) for p in found]

    def makedirs(self, rel: str) -> None:
        pass  # a prefix exists once an object does

    def open_output(self, rel: str) -> pa.NativeFile:
        """Encoded in memory by pyarrow and uploaded whole when closed (`ObjectUpload`), behind
        its writer when this store is `uploading`."""
        self._whole.forget(self.location.child(rel))
        return ObjectUpload.to(partial(self.write_bytes, rel), self._uploads)

    @contextmanager
    def uploading(self) -> Iterator[ObjectStore]:
        with Uploads(REQUEST_THREADS) as uploads:
            view = copy.copy(self)
            view._uploads = uploads
            yield view

    @_named_errors
    def write_bytes(self, rel: str, data: bytes | memoryview) -> None:
        self.requests.count("PUT")
        obstore.put(self._client, rel, data)

    @_named_errors
    def write_if_absent(self, rel: str, data: bytes) -> bool:
        """A conditional PUT carrying a token of this create in the object's metadata, by which a
        retry whose first answer was lost knows its own object (True) from another writer's."""
        token = uuid.uuid4().hex
        try:
            self.requests.count("PUT")
            obstore.put(self._client, rel, data, mode="create", attributes={CREATE_TOKEN: token})
            return True
        except obstore.exceptions.AlreadyExistsError:
            # obstore retries a PUT whose answer was lost; when the first one landed, the retry
            # finds the object. It is this create's own when it carries this create's token:
            # bytes cannot tell (an empty `.requested` file could be any writer's).
            return self._created_with(rel, token)

    def _created_with(self, rel: str, token: str) -> bool:
        """Does the object at `rel` carry the create token `token`?"""
        try:
            self.requests.count("GET")
            got = obstore.get(self._client, rel)
        except FileNotFoundError:
            return False
        return got.attributes.get(CREATE_TOKEN) == token

    @_named_errors
    def put_if(self, rel: str, data: bytes, version: str | None) -> str | None:
        try:
            self.requests.count("PUT")
            if version is None:
                return obstore.put(self._client, rel, data, mode="create")["e_tag"]
            return obstore.put(self._client, rel, data, mode={"e_tag": version})["e_tag"]
        except (obstore.exceptions.AlreadyExistsError, obstore.exceptions.PreconditionError):
            return None

    @_named_errors
    def delete(self, rel: str, missing_ok: bool) -> None:
        if not missing_ok and self.stat(rel) is None:
            raise FileNotFoundError(self.location.child(rel))
        self.requests.count("DELETE")
        self._whole.forget(self.location.child(rel))
        obstore.delete(self._client, rel)

    @_named_errors
    def delete_dir(self, rel: str) -> None:
        paths = [e.path for e in self.list(rel, True)]
        for path in paths:
            self._whole.forget(self.location.child(path))
        for start in range(0, len(paths), 1000):
            self.requests.count("DELETE")
            obstore.delete(self._client, paths[start:start + 1000])


def _entry(path: str, meta: Mapping[str, Any]) -> FileEntry:
    mtime = meta["last_modified"]
    return FileEntry(path, int(meta["size"]), False, int(mtime.timestamp() * 1_000_000_000), meta.get("e_tag"))


def _immutable(rel: str) -> bool:
    """Data files never change under their name (each version has its own)."""
    return rel.endswith((".parquet", ".lance")) and not rel.startswith(".hoodie/")


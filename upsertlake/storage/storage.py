"""One storage layer for every store, addressed by paths relative to the table's base.

Local folders go through pyarrow's local file system and the OS; object stores (S3, GCS, Azure)
through obstore (Rust's `object_store`), parquet included, so every request gets its retries. The one operation
commits need to be atomic, *write-if-absent*, is a hard link of a finished temporary file locally
(never an overwriting rename) and a conditional PUT (`If-None-Match: *`) on an object store. Nothing
relies on rename: on S3 it is a copy and a delete.
"""

from __future__ import annotations

import copy
import functools
import os
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import obstore
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from upsertlake.errors import StorageError, UpsertlakeWarning
from upsertlake.storage.clients import normalized, object_store
from upsertlake.storage.failures import describe
from upsertlake.storage.location import Location, parse_location
from upsertlake.storage.object_files import WHOLE_FILES, ObjectUpload, Uploads, open_object
from upsertlake.storage.requests import count

_LOCAL_FS = pafs.LocalFileSystem()
T = TypeVar("T")

DELETE_DIR_ATTEMPTS = 5
REQUEST_THREADS = 8  # requests `missing` has in flight at once
LIST_PAGE = 1000  # objects an object store's listing returns per request
# User metadata of every object a conditional create makes (x-amz-meta-..., x-goog-meta-...,
# x-ms-meta-...): a token of that create alone, so that a retried create tells its own object.
# Lower-case letters only: S3 lower-cases metadata names, Azure takes identifiers only.
CREATE_TOKEN = "upsertlakecreate"


def _named_errors(method: Callable[..., T]) -> Callable[..., T]:
    """An object store's failure (after obstore's retries: a 5xx that persists, access denied,
    expired credentials) as a StorageError naming the operation and the object, not a raw
    `obstore` exception; not-found, already-exists and precondition answers pass through, since
    callers act on them."""

    @functools.wraps(method)
    def wrapper(self: Storage, rel: str = "", *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, rel, *args, **kwargs)
        except Exception as exc:
            if self.is_local or not _is_store_failure(exc):
                raise
            what = describe(exc, self.location)
            raise StorageError(f"{method.__name__} {self.full_path(rel)} failed: {what}") from exc

    return wrapper


def _is_store_failure(exc: Exception) -> bool:
    errors = obstore.exceptions
    passing = (errors.NotFoundError, errors.AlreadyExistsError, errors.PreconditionError)
    return isinstance(exc, errors.BaseError) and not isinstance(exc, passing)


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


class Storage:
    """Reads, lists, writes and deletes files below one base path or URI.

    Picklable: a Spark task gets the location and options, and builds its own clients."""

    def __init__(self, base: str | os.PathLike[str], options: Mapping[str, object] | None = None) -> None:
        self.location: Location = parse_location(base)
        self.base = self.location.uri
        self.options: dict[str, str] = normalized(options)
        self._pid_store: tuple[int, Any] | None = None
        self._uploads: Uploads | None = None  # see `uploading`

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_pid_store": None, "_uploads": None}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Storage) and (self.base, self.options) == (other.base, other.options)

    def __hash__(self) -> int:
        return hash((self.base, tuple(sorted(self.options.items()))))

    def __repr__(self) -> str:
        return f"Storage({self.base!r})"

    @property
    def is_local(self) -> bool:
        return self.location.is_local

    @property
    def read_threads(self) -> int:
        """Files worth reading at once: a local read is decoding (2); on an object store each
        read first waits on its GET, so more are in flight."""
        return 2 if self.is_local else REQUEST_THREADS

    @property
    def _store(self) -> Any:
        """The obstore store at the table's base, built once per process (obstore hangs in a
        process forked after it was used, and the environment is read at first use)."""
        pid = os.getpid()
        if self._pid_store is None or self._pid_store[0] != pid:
            self._pid_store = (pid, object_store(self.location, self.options))
        return self._pid_store[1]

    @property
    def fs(self) -> pafs.FileSystem:
        """pyarrow's local file system (local tables only)."""
        return _LOCAL_FS

    # -- paths -------------------------------------------------------------------------------
    def full_path(self, rel: str) -> str:
        """The absolute path or URI of a table-relative path (as Hudi's metadata names files)."""
        return self.location.child(rel)

    def check(self) -> None:
        """Fail early, with a named error, when the store cannot be reached or read: one LIST of
        the table's prefix (a missing bucket, wrong credentials, access denied); nothing written."""
        if self.is_local:
            return
        try:
            count("LIST")
            obstore.list_with_delimiter(self._store, None)
        except Exception as exc:  # obstore's errors name the HTTP status and the store's message
            raise StorageError(f"cannot read {self.base}: {describe(exc, self.location)}") from exc

    # -- reads -------------------------------------------------------------------------------
    def exists(self, rel: str) -> bool:
        if self.is_local:
            return self.fs.get_file_info(self.full_path(rel)).type != pafs.FileType.NotFound
        return self.stat(rel) is not None or bool(self.list(rel))

    @_named_errors
    def stat(self, rel: str) -> FileEntry | None:
        """The file at `rel`, or None when there is none."""
        if self.is_local:
            info = self.fs.get_file_info(self.full_path(rel))
            if info.type != pafs.FileType.File:
                return None
            return FileEntry(rel, info.size or 0, False, info.mtime_ns or 0)
        try:
            count("HEAD")
            meta = obstore.head(self._store, rel)
        except FileNotFoundError:
            return None
        return _entry(rel, meta)

    @_named_errors
    def read_bytes(self, rel: str) -> bytes:
        if self.is_local:
            with self.fs.open_input_stream(self.full_path(rel)) as f:
                return f.read()
        count("GET")
        return bytes(obstore.get(self._store, rel).bytes())

    def open_input(self, rel: str) -> pa.NativeFile:
        """A random-access file (on an object store: one GET of the tail, then ranged GETs)."""
        if self.is_local:
            return self.fs.open_input_file(self.full_path(rel))
        return open_object(self._store, rel, self.full_path(rel), _immutable(rel))

    def missing(self, paths: Iterable[str]) -> list[str]:
        """Those of `paths` that are not files now. On an object store one listing of each folder
        holding several of them answers for all (a HEAD for a lone one), the folders asked at
        once: a commit checks every file it wrote with as many requests as folders, not files."""
        by_folder: dict[str, list[str]] = {}
        for path in paths:
            by_folder.setdefault(path.rpartition("/")[0], []).append(path)

        def gone_from(folder: str) -> list[str]:
            wanted = by_folder[folder]
            if self.is_local or len(wanted) == 1:
                return [p for p in wanted if self.stat(p) is None]
            present = {e.path for e in self.list(folder) if not e.is_dir}
            return [p for p in wanted if p not in present]

        folders = sorted(by_folder)
        if self.is_local or len(folders) < 2:
            return [p for folder in folders for p in gone_from(folder)]
        with ThreadPoolExecutor(max_workers=min(REQUEST_THREADS, len(folders))) as pool:
            return [p for found in pool.map(gone_from, folders) for p in found]

    def parquet_file(self, rel: str, **kwargs: Any) -> pq.ParquetFile:
        return pq.ParquetFile(self.open_input(rel), **kwargs)

    def read_parquet(self, rel: str, columns: list[str] | None = None) -> pa.Table:
        """One parquet file's columns. Arrow decodes columns in parallel, so a read of one column
        gains nothing from its threads, and callers often read many files at once on a pool
        (50 ms instead of 70 for the 20 key columns of 1M rows on 2 cores)."""
        threads = columns is None or len(columns) > 1
        if self.is_local:
            return pq.ParquetFile(self.full_path(rel)).read(columns=columns, use_threads=threads)
        with self.open_input(rel) as f:
            return pq.ParquetFile(f).read(columns=columns, use_threads=threads)

    @_named_errors
    def list(self, rel: str = "", recursive: bool = False) -> list[FileEntry]:
        """Entries below `rel` (empty list when it does not exist). On an object store a
        recursive listing names files only (prefixes are not objects)."""
        if self.is_local:
            return self._list_local(rel, recursive)
        prefix = f"{rel}/" if rel else None
        count("LIST")
        if recursive:
            return [_entry(m["path"], m) for chunk in obstore.list(self._store, prefix) for m in chunk]
        found = obstore.list_with_delimiter(self._store, prefix)
        dirs = [FileEntry(p.rstrip("/"), 0, True, 0) for p in found["common_prefixes"]]
        return dirs + [_entry(m["path"], m) for m in found["objects"]]

    @_named_errors
    def list_outside(self, folder: str) -> list[FileEntry]:
        """Every file below the base except those under `folder` (the table's files without its
        `.hoodie/`). On an object store a listing returns 1,000 objects a request, in key order,
        and `.hoodie/` holds thousands on a long timeline: a listing whose page ends inside
        `folder` stops there and a second one starts after its last possible key."""
        cut = f"{folder}/"
        if self.is_local:
            return [e for e in self._list_local("", True) if not e.is_dir and e.path != folder
                    and not e.path.startswith(cut)]
        count("LIST")
        out: list[FileEntry] = []
        after = cut + "\U0010ffff"  # the greatest code point: every key under `folder/` sorts before it
        for chunk in obstore.list(self._store, None, chunk_size=LIST_PAGE):
            out += [_entry(m["path"], m) for m in chunk if not cut <= m["path"] < after]
            if len(chunk) == LIST_PAGE and cut <= chunk[-1]["path"] < after:  # more pages, inside `folder/`
                count("LIST")
                rest = obstore.list(self._store, None, offset=after, chunk_size=LIST_PAGE)
                out += [_entry(m["path"], m) for chunk in rest for m in chunk]
                break
        return out

    def _list_local(self, rel: str, recursive: bool) -> list[FileEntry]:
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
        """Create a folder locally; object stores have none (a prefix exists once an object does)."""
        if self.is_local:
            self.fs.create_dir(self.full_path(rel), recursive=True)

    def open_output(self, rel: str) -> pa.NativeFile:
        """A stream whose file appears when closed (an object store's upload completes then)."""
        if not self.is_local:
            WHOLE_FILES.forget(self.full_path(rel))
            return ObjectUpload.to(partial(self.write_bytes, rel), self._uploads)
        parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
        self.makedirs(parent)
        return self.fs.open_output_stream(self.full_path(rel))

    @contextmanager
    def uploading(self, limit: int = REQUEST_THREADS) -> Iterator[Storage]:
        """This storage for writing files whose uploads run while the writers go on encoding
        the next ones (`Uploads`), all of them stored when the block ends; a local one as it is."""
        if self.is_local:
            yield self
            return
        with Uploads(limit) as uploads:
            view = copy.copy(self)
            view._uploads = uploads
            yield view

    @_named_errors
    def write_bytes(self, rel: str, data: bytes | memoryview) -> None:
        """Write a whole file, replacing it atomically if it exists (a PUT; locally temp + rename)."""
        if not self.is_local:
            count("PUT")
            obstore.put(self._store, rel, data)
            return
        tmp = _temp_sibling(rel)
        with self.open_output(tmp) as f:
            f.write(data)
        self.fs.move(self.full_path(tmp), self.full_path(rel))

    @_named_errors
    def write_if_absent(self, rel: str, data: bytes) -> bool:
        """Atomically create `rel` with `data`; False (and nothing written) if it already exists.

        Readers never see a partly written file: locally the bytes go to a temporary sibling first,
        which is then hard-linked to the final name (`link` fails if the name exists), and an
        empty file (a marker) is created exclusively; an object store's conditional PUT is atomic
        by itself, and carries a token of this create in the object's metadata, by which a retry
        whose first answer was lost knows its own object (True) from another writer's (False)."""
        if not self.is_local:
            token = uuid.uuid4().hex
            try:
                count("PUT")
                obstore.put(self._store, rel, data, mode="create", attributes={CREATE_TOKEN: token})
                return True
            except obstore.exceptions.AlreadyExistsError:
                # obstore retries a PUT whose answer was lost; when the first one landed, the retry
                # finds the object. It is this create's own when it carries this create's token:
                # bytes cannot tell (an empty `.requested` file could be any writer's).
                return self._created_with(rel, token)
        if not data:  # nothing to see half-written: an exclusive create is the whole write
            self.makedirs(rel.rpartition("/")[0])
            try:
                os.close(os.open(self.full_path(rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
                return True
            except FileExistsError:
                return False
        tmp = _temp_sibling(rel)
        with self.open_output(tmp) as f:
            f.write(data)
        try:
            os.link(self.full_path(tmp), self.full_path(rel))
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(self.full_path(tmp))

    def _created_with(self, rel: str, token: str) -> bool:
        """Does the object at `rel` carry the create token `token` (object stores)?"""
        try:
            count("GET")
            got = obstore.get(self._store, rel)
        except FileNotFoundError:
            return False
        return got.attributes.get(CREATE_TOKEN) == token

    @property
    def conditional_writes(self) -> bool:
        """Whether `read_versioned`/`put_if` work here (object stores: ETags and conditional PUTs)."""
        return not self.is_local

    @_named_errors
    def read_versioned(self, rel: str) -> tuple[bytes, str] | None:
        """The bytes of `rel` and their version (ETag), or None when there is no such object."""
        try:
            count("GET")
            got = obstore.get(self._store, rel)
        except FileNotFoundError:
            return None
        return bytes(got.bytes()), got.meta["e_tag"]

    @_named_errors
    def put_if(self, rel: str, data: bytes, version: str | None) -> str | None:
        """Write `rel` only if its version is still `version` (None: only if it is absent);
        returns the new version, or None when another writer changed it first (HTTP 412)."""
        mode = "create" if version is None else {"e_tag": version}
        try:
            count("PUT")
            return obstore.put(self._store, rel, data, mode=mode)["e_tag"]
        except (obstore.exceptions.AlreadyExistsError, obstore.exceptions.PreconditionError):
            return None

    @_named_errors
    def delete(self, rel: str, missing_ok: bool = True) -> None:
        if not self.is_local:
            if not missing_ok and self.stat(rel) is None:
                raise FileNotFoundError(self.full_path(rel))
            count("DELETE")
            WHOLE_FILES.forget(self.full_path(rel))
            obstore.delete(self._store, rel)
            return
        try:
            self.fs.delete_file(self.full_path(rel))
        except FileNotFoundError:
            if not missing_ok:
                raise

    @_named_errors
    def delete_dir(self, rel: str) -> None:
        """Delete a folder and everything below it (every object under the prefix). Locally, a
        file another process adds (or removes) meanwhile fails one attempt ("Directory not
        empty"); the next one takes it along."""
        if self.is_local:
            for attempt in range(DELETE_DIR_ATTEMPTS):
                if not self.exists(rel):
                    return
                try:
                    self.fs.delete_dir(self.full_path(rel))
                    return
                except OSError:
                    if attempt == DELETE_DIR_ATTEMPTS - 1:
                        raise
            return
        paths = [e.path for e in self.list(rel, recursive=True)]
        for path in paths:
            WHOLE_FILES.forget(self.full_path(path))
        for start in range(0, len(paths), 1000):
            count("DELETE")
            obstore.delete(self._store, paths[start:start + 1000])


def table_storage(base: str | os.PathLike[str], options: Mapping[str, object] | None = None) -> Storage:
    """The storage of a table a user names with its storage_options. On a local path those
    configure nothing (they are an object store's settings): delta-rs and pyiceberg take them
    and ignore them there, and so does this, with a warning naming them, since a path meant for a
    store (`lake/t` for `s3://lake/t`) would otherwise go unnoticed."""
    storage = Storage(base, options)
    if storage.is_local and storage.options:
        warnings.warn(
            f"storage_options {sorted(storage.options)} are ignored: {storage.base} is a local path (they "
            "configure object stores: s3://, gs://, abfs://)",
            UpsertlakeWarning,
            stacklevel=3,
        )
    return storage


def _entry(path: str, meta: Mapping[str, Any]) -> FileEntry:
    mtime = meta["last_modified"]
    return FileEntry(path, int(meta["size"]), False, int(mtime.timestamp() * 1_000_000_000), meta.get("e_tag"))


def _immutable(rel: str) -> bool:
    """Data files never change under their name (each version has its own)."""
    return rel.endswith(".parquet") and not rel.startswith(".hoodie/")


def _temp_sibling(rel: str) -> str:
    head, _, name = rel.rpartition("/")
    tmp = f".{name}.{uuid.uuid4().hex}.tmp"
    return f"{head}/{tmp}" if head else tmp

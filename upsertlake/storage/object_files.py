"""Files of an object store as pyarrow sees files: random-access reads, and writes uploaded whole
when closed, both through obstore, so every request of a parquet read or write gets obstore's
retries (503 SlowDown, 500s, dropped connections) instead of failing on the first broken reply.

A read starts with one GET of the object's tail: a file up to `TAIL_BYTES` arrives whole in that
one request, and a larger one has its footer (and usually its page index) in hand; the column
chunks it then reads are ranged GETs.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import obstore
import pyarrow as pa

from upsertlake.storage.cache import Lru
from upsertlake.storage.requests import RequestCounts

TAIL_BYTES = 8 * 2**20
WHOLE_FILE_BYTES = 256 * 2**20  # objects read whole a store keeps (data files never change under their name)
UPLOAD_BUDGET_BYTES = 256 * 2**20  # encoded files waiting for their upload (`Uploads`)


def open_object(
    store: Any, path: str, uri: str, cache: Lru[pa.Buffer] | None, requests: RequestCounts
) -> pa.NativeFile:
    """A random-access file of one object (`uri` names it in the `cache` of objects read whole,
    if it may be kept). One GET of the tail comes first; an object it holds whole is read from
    memory by pyarrow's native code (no Python call per read), a larger one through
    `ObjectReader`'s ranged GETs."""
    whole = cache.get(uri) if cache is not None else None
    if whole is not None:
        return pa.BufferReader(whole)
    try:
        got = obstore.get(store, path, options={"range": {"suffix": TAIL_BYTES}})
    except obstore.exceptions.NotSupportedError:  # Azure has no suffix ranges: a HEAD for the size
        requests.count("HEAD")
        size = int(obstore.head(store, path)["size"])
        got = obstore.get(store, path, options={"range": {"offset": max(0, size - TAIL_BYTES)}})
    requests.count("GET")
    tail = pa.py_buffer(got.bytes())  # no copy: the buffer obstore received into
    size, tail_start = int(got.meta["size"]), got.range[0]
    if tail_start > 0:
        return pa.PythonFile(ObjectReader(store, path, size, tail_start, tail, requests), mode="r")
    if cache is not None:
        cache.put(uri, tail)
    return pa.BufferReader(tail)


class ObjectReader(io.RawIOBase):
    """A seekable, read-only view of an object larger than its tail in hand (`open_object`):
    reads before the tail are ranged GETs."""

    def __init__(
        self, store: Any, path: str, size: int, tail_start: int, tail: pa.Buffer, requests: RequestCounts
    ) -> None:
        self._store, self._path, self._requests = store, path, requests
        self._pos, self._size, self._tail_start, self._tail = 0, size, tail_start, tail

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def size(self) -> int:
        return self._size

    def read(self, n: int = -1) -> bytes:
        end = self._size if n is None or n < 0 else min(self._size, self._pos + n)
        start = self._pos
        if start >= end:
            return b""
        if start >= self._tail_start:
            data = self._tail[start - self._tail_start:end - self._tail_start].to_pybytes()
        elif end > self._tail_start:  # straddles the tail: fetch only the part before it
            self._requests.count("GET")
            head = bytes(obstore.get_range(self._store, self._path, start=start, end=self._tail_start))
            data = head + self._tail[:end - self._tail_start].to_pybytes()
        else:
            self._requests.count("GET")
            data = bytes(obstore.get_range(self._store, self._path, start=start, end=end))
        self._pos = end
        return bytes(data)

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


class Uploads:
    """Uploads that run while their writers go on encoding the next files: a closed `ObjectUpload`
    is handed over here instead of waiting for its PUT, `limit` at once. Encoded bytes waiting
    for their upload are held in memory up to `budget` (a writer then waits; a file larger than
    the budget goes alone). The end of the `with` block waits for every upload, failed block or
    not (an upload landing after a rollback would leave a file behind), and raises the first
    failure."""

    def __init__(self, limit: int, budget: int = UPLOAD_BUDGET_BYTES) -> None:
        self._pool = ThreadPoolExecutor(max_workers=limit)
        self._budget, self._pending = budget, 0
        self._room = threading.Condition()
        self._futures: list[Future[None]] = []

    def submit(self, put: Callable[[memoryview], None], data: memoryview) -> None:
        with self._room:
            self._room.wait_for(lambda: self._pending == 0 or self._pending + data.nbytes <= self._budget)
            self._pending += data.nbytes
        self._futures.append(self._pool.submit(self._upload, put, data))

    def _upload(self, put: Callable[[memoryview], None], data: memoryview) -> None:
        try:
            put(data)
        finally:
            with self._room:
                self._pending -= data.nbytes
                self._room.notify_all()

    def __enter__(self) -> Uploads:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._pool.shutdown(wait=True)
        failures = [e for f in self._futures if (e := f.exception()) is not None]
        if failures and exc_type is None:
            raise failures[0]


class ObjectUpload(pa.BufferOutputStream):
    """A file written in memory by pyarrow's native code (no Python call, so no GIL, per write)
    and uploaded whole by `put` when closed (one PUT, or a multipart upload above obstore's 5 MB
    chunk), or handed to `uploads` when given. A `with` block that raises uploads nothing, so a
    failed write leaves no object behind."""

    @classmethod
    def to(cls, put: Callable[[memoryview], None], uploads: Uploads | None = None) -> ObjectUpload:
        upload = cls()  # pyarrow's constructor takes only a memory pool
        upload._put, upload._uploads = put, uploads
        return upload

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            super().close()

    def close(self) -> None:
        if not self.closed:
            data = memoryview(self.getvalue()).cast("B")  # obstore takes unsigned bytes
            if self._uploads is not None:
                self._uploads.submit(self._put, data)
            else:
                self._put(data)
        super().close()

"""A bounded read-ahead: the batches of a sequence of units (files, slices), in order, with at most
`ahead` units being read at once and at most `depth` batches of each waiting to be taken; and an
ordered prefetch of the units' bytes (`prefetched`), so that an object store's GETs run ahead of
the decoding, which holds far more memory than the bytes it decodes.

Memory stays bounded by what is in flight, whatever the number of units: a reader that stops
early (closes the stream, or drops it) stops the workers too. Workers are daemon threads, so a
stream nobody finishes never holds the interpreter's exit.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar, cast

import pyarrow as pa

T = TypeVar("T")
_DONE = object()
_POLL_SECONDS = 0.1  # how often a worker waiting for room looks whether the stream was closed


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def read_ahead(
    units: Iterable[T], produce: Callable[[T], Iterable[pa.RecordBatch]], ahead: int, depth: int = 2
) -> Iterator[pa.RecordBatch]:
    """The batches `produce` makes of each unit, unit after unit, reading up to `ahead` units at
    once. An error of a unit is raised when the stream reaches that unit."""
    stop = threading.Event()
    pending: deque[queue.Queue[object]] = deque()
    following = iter(units)

    def start_next() -> bool:
        unit = next(following, _DONE)
        if unit is _DONE:
            return False
        out: queue.Queue[object] = queue.Queue(maxsize=max(1, depth))
        threading.Thread(target=_work, args=(produce, unit, out, stop), daemon=True).start()
        pending.append(out)
        return True

    try:
        while len(pending) < max(1, ahead) and start_next():
            pass
        while pending:
            out = pending[0]
            while (item := out.get()) is not _DONE:
                if isinstance(item, _Failure):
                    raise item.exc
                yield item
            pending.popleft()
            start_next()
    finally:
        stop.set()
        for out in pending:  # a worker blocked on a full queue sees `stop` within a poll
            _drain(out)


def prefetched(units: Iterable[T], fetch: Callable[[T], object], ahead: int) -> Iterator[tuple[T, object]]:
    """Each unit with what `fetch` got of it, in order, with up to `ahead` fetches running at once
    ahead of the consumer. A fetch's error is raised when the consumer reaches its unit."""
    following = iter(units)
    pending: deque[tuple[T, Future[Any]]] = deque()
    pool = ThreadPoolExecutor(max_workers=max(1, ahead), thread_name_prefix="upsertlake-prefetch")
    try:
        for unit in following:
            pending.append((unit, pool.submit(fetch, unit)))
            if len(pending) >= max(1, ahead):
                break
        while pending:
            unit, future = pending.popleft()
            fetched = future.result()
            nxt = next(following, _DONE)
            if nxt is not _DONE:
                unit_next = cast(T, nxt)
                pending.append((unit_next, pool.submit(fetch, unit_next)))
            yield unit, fetched
    finally:
        for _, future in pending:
            future.cancel()
        pool.shutdown(wait=False)


def _work(
    produce: Callable[[T], Iterable[pa.RecordBatch]], unit: T, out: queue.Queue[object], stop: threading.Event
) -> None:
    try:
        for batch in produce(unit):
            if not _put(out, batch, stop):
                return
        _put(out, _DONE, stop)
    except BaseException as exc:  # handed to the reader, who raises it in order
        _put(out, _Failure(exc), stop)


def _put(out: queue.Queue[object], item: object, stop: threading.Event) -> bool:
    while not stop.is_set():
        try:
            out.put(item, timeout=_POLL_SECONDS)
            return True
        except queue.Full:
            continue
    return False


def _drain(out: queue.Queue[object]) -> None:
    try:
        while True:
            out.get_nowait()
    except queue.Empty:
        pass

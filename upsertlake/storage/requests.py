"""Counts of the requests a storage made to its object store, by kind (LIST, GET, HEAD, PUT,
DELETE): object stores bill per request, so `explain`, a write's result and the benchmarks print
them. Counted per call we make (a retried request, or a multipart upload's parts, count once)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

KINDS = ("LIST", "GET", "HEAD", "PUT", "DELETE")


class RequestCounts:
    """The requests of one storage (its copies for uploads included), by kind."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), ())  # a copy in another process (a Spark task) counts its own, from 0

    def count(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self._counts[kind] += n

    def snapshot(self) -> dict[str, int]:
        """The counts so far; subtract an earlier snapshot with `since`."""
        with self._lock:
            return {k: self._counts[k] for k in KINDS}

    def since(self, before: dict[str, int]) -> dict[str, int]:
        """The counts since `before` (a snapshot): those of the operation in between, when the
        storage serves one operation at a time (other threads' requests count too)."""
        now = self.snapshot()
        return {k: now[k] - before.get(k, 0) for k in KINDS}


class NoRequests(RequestCounts):
    """A local file system's: no store bills it, so nothing is counted (a result shows none)."""

    def count(self, kind: str, n: int = 1) -> None:
        pass

    def since(self, before: dict[str, int]) -> dict[str, int]:
        return {}

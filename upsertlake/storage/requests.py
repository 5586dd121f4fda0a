"""Counts of the requests this process made to object stores, by kind (LIST, GET, HEAD, PUT,
DELETE): object stores bill per request, so `explain` and the benchmarks print them. Counted per
call we make (a retried request, or a multipart upload's parts, count once)."""

from __future__ import annotations

import threading
from collections import Counter

KINDS = ("LIST", "GET", "HEAD", "PUT", "DELETE")
_COUNTS: Counter[str] = Counter()
_LOCK = threading.Lock()


def count(kind: str, n: int = 1) -> None:
    with _LOCK:
        _COUNTS[kind] += n


def snapshot() -> dict[str, int]:
    """The counts so far; subtract an earlier snapshot with `since`."""
    with _LOCK:
        return {k: _COUNTS[k] for k in KINDS}


def since(before: dict[str, int]) -> dict[str, int]:
    """The counts since `before` (a snapshot): in a process writing one table at a time, those
    of the operation in between (other threads' requests count too)."""
    now = snapshot()
    return {k: now[k] - before.get(k, 0) for k in KINDS}

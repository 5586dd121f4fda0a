"""What a table's files said lately, kept by the store that read them (docs/DESIGN.md §4).

One least-recently-used map per kind (objects read whole, parsed footers, the table config by
version, ...), bounded by a count or by bytes. A cache lives as long as its storage's store: a
table opened anew, or a Spark task, starts with empty ones; nothing a table's files say is cached
by a module (only pure functions memoize their results there, e.g. a parsed Avro schema, a hash:
those cannot go stale).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

V = TypeVar("V")


class Lru(Generic[V]):
    """A thread-safe map dropping the least recently used entries past `limit` (counted by
    `size`: 1 per entry unless given)."""

    def __init__(self, limit: int, size: Callable[[V], int] | None = None) -> None:
        self.limit, self.used = limit, 0
        self._size = size or (lambda _: 1)
        self._data: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._data

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: Hashable, value: V) -> None:
        with self._lock:
            old = self._data.pop(key, None)
            self.used -= self._size(old) if old is not None else 0
            self._data[key] = value
            self.used += self._size(value)
            while self.used > self.limit and len(self._data) > 1:
                self.used -= self._size(self._data.popitem(last=False)[1])

    def forget(self, key: Hashable) -> None:
        with self._lock:
            value = self._data.pop(key, None)
            self.used -= self._size(value) if value is not None else 0

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.used = 0


class Caches:
    """The named caches of one store."""

    def __init__(self) -> None:
        self._named: dict[str, Lru[Any]] = {}
        self._lock = threading.Lock()

    def get(self, name: str, limit: int, size: Callable[[Any], int] | None = None) -> Lru[Any]:
        """The cache `name`, made with `limit` (and `size`) when first asked for."""
        with self._lock:
            if name not in self._named:
                self._named[name] = Lru(limit, size)
            return self._named[name]

"""Writer heartbeats: how concurrent writers tell a slow write from a dead one.

Under optimistic concurrency a pending instant may belong to a live writer in another process, so
it is rolled back only once its heartbeat has expired (Hudi's lazy failed-writes cleaning). As in
Hudi, the heartbeat is the file `.hoodie/.heartbeat/<instant>`, rewritten every
`hoodie.client.heartbeat.interval_in_ms`; its modification time is the last beat. It is expired
when older than interval × `hoodie.client.heartbeat.tolerable.misses`, or missing.
"""

from __future__ import annotations

import logging
import threading
import time

from upsertlake.storage import Storage
from upsertlake.timeline.active import METAFOLDER

log = logging.getLogger(__name__)

HEARTBEAT_FOLDER = f"{METAFOLDER}/.heartbeat"


def heartbeat_path(instant_time: str) -> str:
    return f"{HEARTBEAT_FOLDER}/{instant_time}"


def last_heartbeat_ms(storage: Storage, instant_time: str) -> int:
    """The last beat in epoch milliseconds, 0 when there is none."""
    entries = [e for e in storage.list(HEARTBEAT_FOLDER) if e.name == instant_time]
    return entries[0].mtime_ns // 1_000_000 if entries else 0


def is_expired(storage: Storage, instant_time: str, interval_ms: int, tolerable_misses: int) -> bool:
    return time.time() * 1000 - last_heartbeat_ms(storage, instant_time) > interval_ms * tolerable_misses


class Heartbeat:
    """Beats for one instant on a daemon thread until stopped; stopping deletes the file."""

    def __init__(self, storage: Storage, instant_time: str, interval_ms: int) -> None:
        self.storage = storage
        self.instant_time = instant_time
        self.interval_ms = interval_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{instant_time}", daemon=True)

    def start(self) -> Heartbeat:
        self.beat()
        self._thread.start()
        return self

    def beat(self) -> None:
        self.storage.write_bytes(heartbeat_path(self.instant_time), b"")

    def _run(self) -> None:
        while not self._stop.wait(self.interval_ms / 1000):
            try:
                self.beat()
            except OSError as exc:  # a missed beat is tolerated; the next one may succeed
                log.warning("heartbeat of %s failed: %s", self.instant_time, exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.storage.delete(heartbeat_path(self.instant_time))

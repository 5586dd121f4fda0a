"""Writer heartbeats: how concurrent writers tell a slow write from a dead one.

A pending instant may belong to a live writer in another process, so it is rolled back only once
its heartbeat has expired (Hudi's lazy failed-writes cleaning); every writer beats one, in either
concurrency mode. As in Hudi, the heartbeat is the file `.hoodie/.heartbeat/<instant>`, rewritten
every `hoodie.client.heartbeat.interval_in_ms`; its modification time is the last beat. It is
expired when older than interval × `hoodie.client.heartbeat.tolerable.misses`, or missing.

Hudi's heartbeat files are empty; ours hold the writer's own interval and misses (JSON), so that
whoever judges it (another writer, `doctor`) uses the window the writer promised, not its own
settings: a writer with a short interval would otherwise take a live writer with a long one for
dead. An empty or unreadable file is judged by the reader's settings.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.errors import StorageError
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import Instant
from upsertlake.timeline.layouts import METAFOLDER

log = logging.getLogger(__name__)

HEARTBEAT_FOLDER = f"{METAFOLDER}/.heartbeat"


def heartbeat_path(instant_time: str) -> str:
    return f"{HEARTBEAT_FOLDER}/{instant_time}"


def last_heartbeat_ms(storage: Storage, instant_time: str) -> int:
    """The last beat in epoch milliseconds, 0 when there is none."""
    entries = [e for e in storage.list(HEARTBEAT_FOLDER) if e.name == instant_time]
    return entries[0].mtime_ns // 1_000_000 if entries else 0


def expiry_ms(storage: Storage, instant_time: str, interval_ms: int, tolerable_misses: int) -> int:
    """How long the heartbeat of `instant_time` may go without a beat: the window its writer
    declared in the file, else interval × tolerable misses as given."""
    try:
        declared = json.loads(storage.read_bytes(heartbeat_path(instant_time)) or b"null")
        return int(declared["intervalMs"]) * int(declared["tolerableMisses"])
    except (OSError, StorageError, ValueError, TypeError, KeyError):
        return interval_ms * tolerable_misses


def is_expired(
    storage: Storage, instant_time: str, interval_ms: int, tolerable_misses: int, last_activity_ms: int = 0
) -> bool:
    """Whether the writer of `instant_time` is gone: neither its heartbeat nor `last_activity_ms`
    (the newest file of the write a caller listed, if any) is within its window."""
    last = max(last_heartbeat_ms(storage, instant_time), last_activity_ms)
    return not last or time.time() * 1000 - last > expiry_ms(storage, instant_time, interval_ms, tolerable_misses)


@dataclass(frozen=True)
class HeartbeatPolicy:
    """How often a writer beats and how many beats may be missed before its write counts as dead
    (hoodie.client.heartbeat.interval_in_ms and .tolerable.misses): the one place both are read,
    and the one definition of a failed (and a live) write."""

    interval_ms: int
    tolerable_misses: int

    @classmethod
    def of(cls, cfg: Config) -> HeartbeatPolicy:
        return cls(cfg.get(opt.HEARTBEAT_INTERVAL_MS), cfg.get(opt.HEARTBEAT_TOLERABLE_MISSES))

    def start(self, storage: Storage, instant_time: str) -> Heartbeat:
        """A heartbeat for `instant_time`, beating from now on."""
        return Heartbeat(storage, instant_time, self.interval_ms, self.tolerable_misses).start()

    def expiry_ms(self, storage: Storage, instant_time: str) -> int:
        return expiry_ms(storage, instant_time, self.interval_ms, self.tolerable_misses)

    def is_expired(self, storage: Storage, instant_time: str, last_activity_ms: int = 0) -> bool:
        return is_expired(storage, instant_time, self.interval_ms, self.tolerable_misses, last_activity_ms)

    def failed(
        self, storage: Storage, timeline: Timeline, activity: Mapping[str, int] | None = None
    ) -> list[Instant]:
        """The pending writes whose writer is gone: a dead writer's, or a pending write of Hudi or
        an older upsertlake, whose single writers beat none. `activity`: instant time -> the
        newest file of that write a caller listed (epoch ms), which also counts as a beat (a slow
        writer without heartbeats is not taken for dead)."""
        activity = activity or {}
        return [i for i in timeline.pending_writes() if self.is_expired(storage, i.time, activity.get(i.time, 0))]

    def live(self, storage: Storage, timeline: Timeline) -> list[Instant]:
        """The pending writes whose heartbeat is alive: their writers are running."""
        failed = {i.time for i in self.failed(storage, timeline)}
        return [i for i in timeline.pending_writes() if i.time not in failed]


# A clock that goes on while the process is stopped or the machine sleeps, as others' clocks do.
_clock = time.monotonic if not hasattr(time, "CLOCK_BOOTTIME") else partial(time.clock_gettime, time.CLOCK_BOOTTIME)
UNBROKEN_SHARE = 0.75  # of the window: the longest a beat may take to follow the one before


class Heartbeat:
    """Beats for one instant on a daemon thread until stopped; stopping deletes the file."""

    def __init__(self, storage: Storage, instant_time: str, interval_ms: int, tolerable_misses: int = 2) -> None:
        self.storage = storage
        self.instant_time = instant_time
        self.interval_ms = interval_ms
        self.window_ms = interval_ms * tolerable_misses
        self._body = json.dumps({"intervalMs": interval_ms, "tolerableMisses": tolerable_misses}).encode()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{instant_time}", daemon=True)
        self._sent: float | None = None  # when the last beat that landed was sent
        self._longest = 0.0  # the longest a landed beat took to follow the one before

    def start(self) -> Heartbeat:
        self.beat()
        self._thread.start()
        return self

    def beat(self) -> None:
        sent = _clock()
        self.storage.write_bytes(heartbeat_path(self.instant_time), self._body)
        if self._sent is not None:
            self._longest = max(self._longest, _clock() - self._sent)
        self._sent = sent

    def unbroken(self) -> bool:
        """Whether nobody can have judged this heartbeat expired so far: it beats still, and each
        beat landed, like the time since the last one sent, within `UNBROKEN_SHARE` of the window
        after the one before was sent (the file's time is at least its send time). The rest of
        the window allows for a judge's clock that runs ahead of the store's."""
        limit = self.window_ms / 1000 * UNBROKEN_SHARE
        sent = self._sent
        return not self._stop.is_set() and sent is not None and self._longest < limit and _clock() - sent < limit

    def _run(self) -> None:
        while not self._stop.wait(self.interval_ms / 1000):
            try:
                self.beat()
            except (OSError, StorageError) as exc:  # a missed beat is tolerated; the next one may succeed
                log.warning("heartbeat of %s failed: %s", self.instant_time, exc)

    def stop(self, delete: bool = True) -> None:
        """Stop beating; `delete=False` leaves the file (it may belong to another writer now)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if delete:
            self.storage.delete(heartbeat_path(self.instant_time))

"""The writes a client started and has not ended, each kept until it commits or rolls back.

`PendingWrites` is their one owner: the instant lifecycle, the commit and the re-merge reach a
write through it (the instant it stands at now, its heartbeat, the commits it need not be checked
against, the callbacks that write its buckets or its whole batch again), never through the client,
and every change to a write is one of its methods: the steps read a `PendingWrite`, never assign it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field

from upsertlake.concurrency.heartbeat import Heartbeat
from upsertlake.engine.bucket_writer import BucketJob, WriteStatus
from upsertlake.engine.write_result import WriteResult
from upsertlake.errors import UpsertlakeError
from upsertlake.layout.file_system_view import FileGroup
from upsertlake.services.key_groups import ByKeyGroup
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import Instant, State

log = logging.getLogger(__name__)

# Writes buckets of a write again, for its commit: (job, bucket numbers or None for all, attempt)
# -> their statuses. The job carries the instant and the base files to merge onto. In process a
# thread pool over the records each bucket kept; on Spark one job over the cached, bucket-assigned
# DataFrame (one task per bucket). A re-merge and a move both go through it.
Rewrite = Callable[[BucketJob, Collection[int] | None, int], list[WriteStatus]]
# Tags, partitions and writes the kept batch again against the table as it is now, for a retry
# after a conflict on a record or a redo after a compaction: (instant, attempt) -> the new result,
# through `WriteClient.begin_write` and `write_result` as the first attempt.
Redo = Callable[[str, int], WriteResult]


@dataclass
class PendingWrite:
    """A started write, and what its commit needs to merge it again if it must. Changed only by
    `PendingWrites`, its owner."""

    instant: Instant
    checked: frozenset[str]  # completed writes it need not be checked against (done at its start)
    heartbeat: Heartbeat | None = None
    job: BucketJob | None = None
    statuses: dict[FileGroup, WriteStatus] = field(default_factory=dict)
    rewrite: Rewrite | None = None  # writes buckets again: a re-merge needs it
    redo: Redo | None = None  # writes the batch again: a retry after a conflict needs it
    held: dict[str, Callable[[], object]] = field(default_factory=dict)  # name -> frees what rewrite/redo read
    planned_on: frozenset[str] = frozenset()  # the completed instants the latest plan of its batch saw
    inflight_doc: bytes = b""  # the inflight file's workload profile, for an instant it moves to
    thread: int = field(default_factory=threading.get_ident)  # the thread that started it
    requested_doc: bytes = b""  # the requested file's content (a replace's plan), for a new instant
    rollbacks: frozenset[str] = frozenset()  # the rollback instants on the timeline at its start
    # The timeline as its start left it (listed under the lock, with its requested instant): the
    # write plans on it rather than list it again, when it follows its start at once (`plan_on_start`).
    # None once used, or when the start changed more than its own instant.
    timeline: Timeline | None = field(default=None, repr=False)
    by_key: ByKeyGroup | None = None  # how its record index changes are written (a Spark write's: by tasks)

    def finish(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()

    def hold(self, name: str, release: Callable[[], object]) -> None:
        """Call `release` when the write ends; an earlier hold of `name` is released now."""
        earlier = self.held.pop(name, None)
        if earlier is not None:
            earlier()
        self.held[name] = release

    def free(self) -> None:
        """Free everything held (the write committed or rolled back). A release that fails (say, a
        stopped Spark session) is logged: the write's outcome stands."""
        held, self.held = self.held, {}
        self.rewrite = self.redo = None
        for name, release in held.items():
            try:
                release()
            except Exception:
                log.warning("write %s: could not release %s", self.instant.time, name, exc_info=True)


class PendingWrites:
    """The started writes of one client, by instant time, and where a write moved to (a re-merge
    or a retry goes on under a new instant)."""

    def __init__(self) -> None:
        self._writes: dict[str, PendingWrite] = {}
        self._moved: dict[str, str] = {}  # instant -> the instant its write moved to

    def __iter__(self) -> Iterator[str]:
        """The instant times of the writes started and not ended."""
        return iter(list(self._writes))

    def add(self, pending: PendingWrite) -> None:
        self._writes[pending.instant.time] = pending

    def get(self, instant_time: str) -> PendingWrite | None:
        return self._writes.get(instant_time)

    def startable(self, instant_time: str) -> PendingWrite:
        """The write started as `instant_time` that has written nothing yet; raises otherwise."""
        pending = self._writes.get(instant_time)
        if pending is None or pending.instant.state is not State.REQUESTED:
            raise UpsertlakeError(f"instant {instant_time} was not started by this client (or was already written)")
        return pending

    def take_start_timeline(self, instant_time: str) -> Timeline | None:
        """The timeline as the write's start left it, once: a retry plans on the timeline as it is then."""
        pending = self.startable(instant_time)
        timeline, pending.timeline = pending.timeline, None
        return timeline

    def went_inflight(self, instant_time: str, inflight: Instant, inflight_doc: bytes) -> None:
        """The write's instant is inflight, with its workload profile (`inflight_doc`)."""
        pending = self._writes[instant_time]
        pending.instant, pending.inflight_doc = inflight, inflight_doc

    def planned(self, instant_time: str, job: BucketJob, planned_on: frozenset[str]) -> None:
        """`job` writes the write's buckets, planned on a view of the completed instants `planned_on`."""
        pending = self._writes[instant_time]
        pending.job, pending.planned_on = job, planned_on

    def wrote(self, instant_time: str, statuses: Collection[WriteStatus]) -> None:
        """The statuses of every bucket the write wrote (a re-merge rewrites some of them)."""
        pending = self._writes.get(instant_time)
        if pending is not None:
            pending.statuses = {(s.stat.partitionPath, s.stat.fileId): s for s in statuses}

    def rewrote(self, instant_time: str, job: BucketJob, statuses: Collection[WriteStatus], every: bool) -> None:
        """Buckets written again by `job`: every bucket (a move to a new instant), or some (a
        re-merge), whose statuses replace those of their file groups."""
        pending = self._writes[instant_time]
        new = {(s.stat.partitionPath, s.stat.fileId): s for s in statuses}
        pending.job = job
        pending.statuses = new if every else {**pending.statuses, **new}

    def check_from(self, instant_time: str, checked: frozenset[str]) -> None:
        """The write need not be checked against the completed writes `checked` any more."""
        self._writes[instant_time].checked = checked

    def keep(self, instant_time: str, *, rewrite: Rewrite | None = None, redo: Redo | None = None) -> None:
        """What a write gives its commit: `rewrite` writes buckets again for a re-merge, `redo`
        the whole batch again for a retry after a conflict on a record."""
        pending = self._writes[instant_time]
        pending.rewrite = rewrite or pending.rewrite
        pending.redo = redo or pending.redo

    def hold(self, instant_time: str, name: str, release: Callable[[], object]) -> None:
        """Call `release` once the write ends, or when `name` is held anew."""
        self._writes[instant_time].hold(name, release)

    def move(self, pending: PendingWrite, new: PendingWrite) -> None:
        """`pending` goes on under `new`'s instant and heartbeat (registered by `add`); its old
        heartbeat stops, and the old time resolves to the new one."""
        old = pending.instant
        self._writes.pop(new.instant.time)
        pending.finish()
        pending.instant, pending.heartbeat = new.instant, new.heartbeat
        self._writes.pop(old.time, None)
        self._writes[new.instant.time] = pending
        self._moved[old.time] = new.instant.time

    def resolve(self, instant_time: str) -> str:
        """The instant a write started as `instant_time` stands at now (forgetting the moves)."""
        while instant_time in self._moved:
            instant_time = self._moved.pop(instant_time)
        return instant_time

    def end(self, instant_time: str) -> None:
        """The write ended (committed or rolled back): stop its heartbeat, free what it held."""
        pending = self._writes.pop(instant_time, None)
        if pending is not None:
            pending.finish()
            pending.free()

    def of_this_thread(self) -> set[str]:
        """The writes started by the calling thread (a thread runs one write at a time)."""
        me = threading.get_ident()
        return {t for t, p in self._writes.items() if p.thread == me}

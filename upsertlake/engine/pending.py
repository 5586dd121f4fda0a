"""A started write, kept by its client until it commits or rolls back.

Its own module because the instant lifecycle, the commit and the re-merge all read and update it:
the instant it stands at now, its heartbeat, the commits it need not be checked against, and the
callbacks that write its buckets or its whole batch again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from upsertlake.concurrency.conflict import FileGroup
from upsertlake.concurrency.heartbeat import Heartbeat
from upsertlake.engine.bucket_writer import BucketJob, WriteStatus
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import Instant

if TYPE_CHECKING:
    from upsertlake.engine.write_result import WriteResult

log = logging.getLogger(__name__)

# Writes buckets of a write again, for its commit: (job, bucket numbers or None for all, attempt)
# -> their statuses. The job carries the instant and the base files to merge onto. In process a
# thread pool over the records each bucket kept; on Spark one job over the cached, bucket-assigned
# DataFrame (one task per bucket). A re-merge and a move both go through it.
Rewrite = Callable[[BucketJob, Collection[int] | None, int], list[WriteStatus]]
# Tags, partitions and writes the kept batch again against the table as it is now, for a retry
# after a conflict on a record: (instant, attempt) -> the new result, through begin_buckets and
# result_of as the first attempt.
Redo = Callable[[str, int], "WriteResult"]


@dataclass
class PendingWrite:
    """A started write, and what its commit needs to merge it again if it must."""

    instant: Instant
    checked: frozenset[str]  # completed writes it need not be checked against (done at its start)
    heartbeat: Heartbeat | None = None
    job: BucketJob | None = None
    statuses: dict[FileGroup, WriteStatus] = field(default_factory=dict)
    rewrite: Rewrite | None = None  # writes buckets again: a re-merge needs it
    redo: Redo | None = None  # writes the batch again: a retry after a conflict needs it
    held: dict[str, Callable[[], None]] = field(default_factory=dict)  # name -> frees what rewrite/redo read
    redoing: bool = False  # a retry is writing the batch again under its new instant
    inflight_doc: bytes = b""  # the inflight file's workload profile, for an instant it moves to
    thread: int = field(default_factory=threading.get_ident)  # the thread that started it
    requested_doc: bytes = b""  # the requested file's content (a replace's plan), for a new instant
    rollbacks: frozenset[str] = frozenset()  # the rollback instants on the timeline at its start
    # The timeline as its start left it (listed under the lock, with its requested instant): the
    # write plans on it rather than list it again, when it follows its start at once (`plan_on_start`).
    # None once used, or when the start changed more than its own instant.
    timeline: Timeline | None = field(default=None, repr=False)

    def finish(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()

    def hold(self, name: str, release: Callable[[], None]) -> None:
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
            except Exception:  # noqa: BLE001 - freeing a cache must not undo a commit's outcome
                log.warning("write %s: could not release %s", self.instant.time, name, exc_info=True)

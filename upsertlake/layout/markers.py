"""Rolling back a pending write: delete what it wrote, then its instant files.

Data files go first, found both through the instant's markers and by their instant time in the
file names (a writer may die between marker and file, or a Hudi writer may keep its markers
elsewhere); the instant files go last, so a crash midway leaves an instant that is still pending
and is rolled back again by the next writer.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from upsertlake.storage import Storage
from upsertlake.layout.file_system_view import list_partitions_and_files
from upsertlake.timeline.active import METAFOLDER, delete_instant_files
from upsertlake.timeline.layouts import table_layout
from upsertlake.timeline.instant import Instant

log = logging.getLogger(__name__)


def marker_folder(instant_time: str) -> str:
    return f"{METAFOLDER}/.temp/{instant_time}"


def key_summary_folder(instant_time: str) -> str:
    """Where an instant's key summaries live (upsertlake.concurrency.key_summary): undone with it."""
    return f"{METAFOLDER}/.keys/{instant_time}"


def rollback_pending(storage: Storage, instant: Instant) -> list[str]:
    """Undo a pending (never completed) instant; returns the data files deleted."""
    if instant.is_completed:
        raise ValueError(f"instant {instant.time} is completed; rollback_pending only undoes pending ones")
    doomed = delete_written(storage, instant.time)
    delete_instant_files(storage, instant)
    log.info("removed instant %s and the %d file(s) it wrote", instant.time, len(doomed))
    return doomed


def delete_written(storage: Storage, instant_time: str, named_logs: bool = True) -> list[str]:
    """Delete the files a pending instant wrote (named by its time, or by its markers), then its
    markers and key summaries; its instant files stay. Returns the data files deleted.

    A log file named by the instant is the write's (layout 2 names a log by its deltacommit;
    layout 1 by its slice's base instant, which a write's own new log-only group carries), unless
    the instant is a compaction (`named_logs=False`): writers name the logs of the slice a pending
    compaction starts by its instant, and those are theirs."""
    listing = list_partitions_and_files(storage)
    doomed = {bf.path for bf in listing.base_files if bf.instant_time == instant_time}
    if named_logs:
        doomed |= {lf.path for lf in listing.log_files if lf.name.instant == instant_time}
    appends_keep = not table_layout(storage).has_completion_times
    for marker in storage.list(marker_folder(instant_time), recursive=True):
        if not marker.is_dir and ".marker." in marker.name:
            path, _, io_type = marker.path[len(marker_folder(instant_time)) + 1 :].rpartition(".marker.")
            if io_type == "APPEND" and appends_keep:
                continue  # layout 1: a log the write appended to holds committed blocks too (readers skip its own)
            doomed.add(path)
    for path in sorted(doomed):
        storage.delete(path)
    storage.delete_dir(marker_folder(instant_time))
    storage.delete_dir(key_summary_folder(instant_time))
    return sorted(doomed)


def reconcile_markers(storage: Storage, instant_time: str, written: Collection[str]) -> list[str]:
    """Hudi's marker-based reconciliation before a commit: every data file a marker names that is
    not among the files the write reports (`written`, as its write stats name them) was left by a
    failed or duplicate task attempt (retry, speculation); delete it. Returns the deleted paths."""
    kept = set(written)
    folder = marker_folder(instant_time)
    stray = []
    for marker in storage.list(folder, recursive=True):
        if marker.is_dir or ".marker." not in marker.name:
            continue
        path = marker.path[len(folder) + 1 :].rsplit(".marker.", 1)[0]
        if path not in kept and storage.exists(path):
            storage.delete(path)
            stray.append(path)
    if stray:
        log.info("write %s: deleted %d file(s) of failed or duplicate task attempts", instant_time, len(stray))
    return sorted(stray)

"""Rolling back a pending write: delete what it wrote, then its instant files.

Data files go first, found both through the instant's markers and by their instant time in the
file names (a writer may die between marker and file, or a Hudi writer may keep its markers
elsewhere); the instant files go last, so a crash midway leaves an instant that is still pending
and is rolled back again by the next writer.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from upsertlake.layout.file_system_view import LogFile, list_partitions_and_files
from upsertlake.logfile import LogFileName, append_blocks, read_blocks, rollback_block
from upsertlake.storage import Storage
from upsertlake.timeline.active import METAFOLDER, delete_instant_files
from upsertlake.timeline.instant import Action, Instant
from upsertlake.timeline.layouts import table_layout

log = logging.getLogger(__name__)

APPEND = "APPEND"  # the IO type of an append's marker (Hudi's IOType.APPEND)
ROLLBACK_WRITE_TOKEN = "0-0-0"  # the write token of a log file holding a rollback block


def marker_folder(instant_time: str) -> str:
    return f"{METAFOLDER}/.temp/{instant_time}"


def staging_folder(instant_time: str) -> str:
    """Where a distributed write of the instant stages records for its own later tasks (a small
    Spark batch's tagged records), on the table's storage: deleted when the write ends, and by the
    rollback of the write should its driver die. Hudi's tools ignore it (not a marker folder)."""
    return f"{marker_folder(instant_time)}.staging"


def key_summary_folder(instant_time: str) -> str:
    """Where an instant's key summaries live (upsertlake.concurrency.key_summary): undone with it."""
    return f"{METAFOLDER}/.keys/{instant_time}"


def rollback_pending(storage: Storage, instant: Instant) -> list[str]:
    """Undo a pending (never completed) instant; returns the data files deleted. The log files a
    deltacommit appended go too: each is wholly its own (we never append to an existing one)."""
    return undo_pending(storage, instant)[0]


def undo_pending(
    storage: Storage, instant: Instant, rollback_time: str | None = None, committed_logs: Collection[str] = ()
) -> tuple[list[str], dict[str, int]]:
    """`rollback_pending`, and with a `rollback_time` on a table version 6 (timeline layout 1)
    the way Hudi 0.14 rolls back a deltacommit: the log files it appended stay, and each slice
    it appended to gets a new log file holding a rollback command block (written by
    `rollback_time`, targeting the instant) that voids its blocks. Returns the deleted files and
    the written log files with their sizes. `committed_logs`: the log files a completed instant
    being rolled back appended (its commit names them; its markers went at commit)."""
    if instant.is_completed:
        raise ValueError(f"instant {instant.time} is completed; rollback_pending only undoes pending ones")
    named = instant.action is Action.DELTA_COMMIT  # version 8 names a log by its deltacommit
    doomed, written = delete_written(storage, instant.time, named, rollback_time, committed_logs)
    delete_instant_files(storage, instant)
    log.info("removed instant %s and the %d file(s) it wrote", instant.time, len(doomed))
    return doomed, written


def delete_written(
    storage: Storage,
    instant_time: str,
    named_logs: bool = True,
    rollback_time: str | None = None,
    committed_logs: Collection[str] = (),
) -> tuple[list[str], dict[str, int]]:
    """Delete the files a pending instant wrote (named by its time, or by its markers), then its
    markers and key summaries; its instant files stay (`undo_pending` says why they go last).

    Log files named by the instant go unless `named_logs` is false: a compaction's instant names
    the logs writers append to the slice it starts, and those are theirs. A log the instant
    appended to (an APPEND marker) on table version 6 may hold other instants' blocks (Hudi's
    writers append to existing files): with a `rollback_time` it stays and gets a rollback block
    (`undo_pending`); without one it goes only if every block in it is the instant's own."""
    listing = list_partitions_and_files(storage)
    doomed = {bf.path for bf in listing.base_files if bf.instant_time == instant_time}
    if named_logs:
        doomed |= {lf.path for lf in listing.log_files if lf.name.instant == instant_time}
    appended: set[str] = set(committed_logs)
    folder = marker_folder(instant_time)
    for marker in storage.list(folder, recursive=True):
        if not marker.is_dir and ".marker." in marker.name:
            path, _, io_type = marker.path[len(folder) + 1 :].rpartition(".marker.")
            (appended if io_type == APPEND else doomed).add(path)
    written: dict[str, int] = {}
    if table_layout(storage).version == 1 and appended:
        if rollback_time is not None:
            written = _write_rollback_blocks(storage, listing.log_files, appended, instant_time, rollback_time)
        else:
            doomed |= {path for path in appended if _only_blocks_of(storage, path, instant_time)}
    else:
        doomed |= appended
    for path in sorted(doomed):
        storage.delete(path)
    storage.delete_dir(folder)
    storage.delete_dir(key_summary_folder(instant_time))
    return sorted(doomed), written


def _only_blocks_of(storage: Storage, path: str, instant_time: str) -> bool:
    """Does the log file at `path` hold blocks of `instant_time` alone (or is it gone)?"""
    try:
        blocks = read_blocks(storage.read_bytes(path), storage.full_path(path))
    except FileNotFoundError:
        return True
    return all(getattr(b, "instant", instant_time) == instant_time for b in blocks)


def appended_logs(storage: Storage, instant_time: str) -> dict[str, int]:
    """The log files an instant appended (its APPEND markers), with their sizes (0 if gone)."""
    folder = marker_folder(instant_time)
    out = {}
    for marker in storage.list(folder, recursive=True):
        path, _, io_type = marker.path[len(folder) + 1 :].rpartition(".marker.")
        if not marker.is_dir and io_type == APPEND:
            entry = storage.stat(path)
            out[path] = entry.size if entry is not None else 0
    return out


def _write_rollback_blocks(
    storage: Storage, logs: list[LogFile], appended: set[str], target: str, rollback_time: str
) -> dict[str, int]:
    """A rollback command block in a new log file (the next version) of each slice in `appended`."""
    latest: dict[tuple[str, str, str], int] = {}
    for lf in logs:
        key = (lf.partition_path, lf.name.file_id, lf.name.instant)
        latest[key] = max(latest.get(key, 0), lf.name.version)
    written = {}
    for path in sorted(appended):
        folder, _, name = path.rpartition("/")
        parsed = LogFileName.parse(name)
        if parsed is None:
            continue
        key = (folder, parsed.file_id, parsed.instant)
        latest[key] = max(latest.get(key, 0), parsed.version) + 1
        new = LogFileName(parsed.file_id, parsed.instant, latest[key], ROLLBACK_WRITE_TOKEN).format()
        new_path = f"{folder}/{new}" if folder else new
        data = append_blocks([rollback_block(rollback_time, target)])
        if storage.write_if_absent(new_path, data):
            written[new_path] = len(data)
    return written


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

"""Markers: what a pending write is creating, so that its rollback (services/rollback.py) and
the reconciliation before its commit know what it left behind.

A write marks each data file before it creates it, so that a rollback knows what a failed write
left behind. Markers are written in batches, in the layout of Hudi's timeline-server-based markers
(`MARKERS.type` saying TIMELINE_SERVER_BASED, then `MARKERS<n>` files of one marker per line): a
write marks all the files of its buckets with one object, where Hudi's direct markers (one empty
file each, also read here) cost a request a file, the most a write made on an object store.
A batch may name a file that is never written (a bucket whose planned log name another writer
took); a rollback deletes only files the write owns (`_owned`).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Collection, Iterable

from upsertlake.logfile import read_blocks
from upsertlake.storage import Storage
from upsertlake.timeline.layouts import METAFOLDER, table_layout

log = logging.getLogger(__name__)

APPEND = "APPEND"  # the IO type of an append's marker (Hudi's IOType.APPEND)
ROLLBACK_WRITE_TOKEN = "0-0-0"  # the write token of a log file holding a rollback block
MARKERS = "MARKERS"  # the name prefix of Hudi's batched marker files (MarkerUtils)
MARKER_TYPE_FILE = "MARKERS.type"
BATCHED = "TIMELINE_SERVER_BASED"  # MARKERS.type's content: no newline (Hudi reads it with valueOf)


def marker_folder(instant_time: str) -> str:
    return f"{METAFOLDER}/.temp/{instant_time}"


def marker_entry(partition_path: str, file_name: str, io_type: str) -> str:
    """A marker as a batch lists it: the data file's path below the marker folder, `.marker.`, the
    IO type (CREATE, MERGE or APPEND)."""
    middle = f"{partition_path}/" if partition_path else ""
    return f"{middle}{file_name}.marker.{io_type}"


def start_markers(storage: Storage, instant_time: str) -> None:
    """Declare the instant's markers batched (`MARKERS.type`), once, as the instant goes inflight
    and before any task marks a file. Hudi reads a marker folder without it as direct markers,
    and falls back to the batches only when that fails."""
    storage.write_if_absent(f"{marker_folder(instant_time)}/{MARKER_TYPE_FILE}", BATCHED.encode())


def write_markers(storage: Storage, instant_time: str, entries: Iterable[str]) -> None:
    """Mark the files a write is about to create, with one new `MARKERS<n>` object (n random: the
    tasks of one write mark at once, and a taken name is simply passed over)."""
    body = "".join(f"{e}\n" for e in entries).encode()
    if not body:
        return
    while not storage.write_if_absent(f"{marker_folder(instant_time)}/{MARKERS}{secrets.randbits(31)}", body):
        pass


def read_markers(storage: Storage, instant_time: str) -> list[tuple[str, str]]:
    """(data file path, IO type) of every marker of a write, sorted: the lines of its batch files
    (ours, or a Hudi writer's timeline server's) and its direct marker files."""
    folder = marker_folder(instant_time)
    lines: list[str] = []
    for entry in storage.list(folder, recursive=True):
        rel = entry.path[len(folder) + 1 :]
        if entry.is_dir or rel == MARKER_TYPE_FILE:
            continue
        if rel.startswith(MARKERS) and "/" not in rel:
            try:
                lines += storage.read_bytes(entry.path).decode().splitlines()
            except FileNotFoundError:  # deleted since the listing: the write it marked is gone
                continue
        else:
            lines.append(rel)
    found = {
        (path.lstrip("/"), io_type) for path, sep, io_type in (line.rpartition(".marker.") for line in lines) if sep
    }
    return sorted(found)


def staging_folder(instant_time: str) -> str:
    """Where a distributed write of the instant stages records for its own later tasks (a small
    Spark batch's tagged records), on the table's storage: deleted when the write ends, and by the
    rollback of the write should its driver die. Hudi's tools ignore it (not a marker folder)."""
    return f"{marker_folder(instant_time)}.staging"


def staged_keys_folder(instant_time: str) -> str:
    """Where a Spark write's tasks stage the key changes of the buckets they write under the
    instant (for the record index), on the table's storage: deleted when the write ends, and
    with the instant when it is rolled back (`services.rollback.discard_files`, as its markers),
    also when the write moved on to a new instant. Beside the staging folder, not in it: a moved
    write still reads its small batch's staged records from the old instant's."""
    return f"{marker_folder(instant_time)}.keys"


def key_summary_folder(instant_time: str) -> str:
    """Where an instant's key summaries live (upsertlake.concurrency.key_summary): undone with it."""
    return f"{METAFOLDER}/.keys/{instant_time}"


def holds_only_blocks_of(storage: Storage, path: str, instant_time: str) -> bool:
    """Does the log file at `path` hold blocks of `instant_time` alone (or is it gone)?"""
    try:
        blocks = read_blocks(storage.read_bytes(path), storage.full_path(path))
    except FileNotFoundError:
        return True
    return all(getattr(b, "instant", instant_time) == instant_time for b in blocks)


def _owned(storage: Storage, path: str, io_type: str, instant_time: str) -> bool:
    """Is the marked file at `path` this write's own? A base file's name holds the write's instant
    and write token; so does a log file's on table version 8. On version 6 a log file is named by
    its slice, and a batch marks the planned name before the append finds it taken by another
    writer (it then takes the next): that file is the write's only if every block in it is."""
    if io_type != APPEND or table_layout(storage).version != 1:
        return True
    return holds_only_blocks_of(storage, path, instant_time)


def appended_logs(storage: Storage, instant_time: str) -> dict[str, int]:
    """The log files an instant appended (its APPEND markers), with their sizes (0 if gone)."""
    out = {}
    for path, io_type in read_markers(storage, instant_time):
        if io_type == APPEND:
            entry = storage.stat(path)
            out[path] = entry.size if entry is not None else 0
    return out


def reconcile_markers(storage: Storage, instant_time: str, written: Collection[str]) -> list[str]:
    """Hudi's marker-based reconciliation before a commit: every data file a marker names that is
    not among the files the write reports (`written`, as its write stats name them) was left by a
    failed or duplicate task attempt (retry, speculation); delete it. Returns the deleted paths."""
    kept = set(written)
    stray = []
    for path, io_type in read_markers(storage, instant_time):
        if path not in kept and storage.exists(path) and _owned(storage, path, io_type, instant_time):
            storage.delete(path)
            stray.append(path)
    if stray:
        log.info("write %s: deleted %d file(s) of failed or duplicate task attempts", instant_time, len(stray))
    return sorted(stray)

"""The archived timeline: completed instants an archiver (Hudi's or ours) moved out of the active
timeline, in Apache Hudi's format for the table's timeline layout (docs/DESIGN.md §5):

- layout 1 (table version 6): Hudi 0.x's archive log files in `.hoodie/archived/` (`archived_log`);
- layout 2 (table versions 8, 9): Hudi 1.x's LSM timeline in `.hoodie/timeline/history/`
  (`archived_lsm`).

Earlier upsertlake releases archived into a format of their own, Avro container files
`.hoodie/archived/upsertlake-<first>-<last>.avro` (each record an instant's time, action,
completion time and completed file's bytes). They are still read, whatever the layout, and the
next archival moves their instants into Hudi's format and deletes them.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Collection
from typing import Any, cast

import fastavro

from upsertlake.errors import CorruptTableError
from upsertlake.storage import FileEntry, Storage
from upsertlake.timeline import archived_log, archived_lsm
from upsertlake.timeline.instant import Action, Instant, State
from upsertlake.timeline.layouts import ARCHIVE_FOLDER_1, TimelineLayout

LEGACY_FOLDER = ARCHIVE_FOLDER_1
LEGACY_PREFIX = "upsertlake-"
LEGACY_SUFFIX = ".avro"
LOAD_ATTEMPTS = 3  # listings of the folder a load makes while an archival replaces its files
FILES_KEPT = 256  # parsed archive files a storage keeps


def legacy_files(listing: list[FileEntry]) -> list[FileEntry]:
    """The archive files of earlier upsertlake releases in a listing of `.hoodie/archived/`."""
    return sorted(
        (e for e in listing if not e.is_dir and e.name.startswith(LEGACY_PREFIX) and e.name.endswith(LEGACY_SUFFIX)),
        key=lambda e: e.name,
    )


def load_archived(storage: Storage, layout: TimelineLayout) -> dict[Instant, bytes]:
    """Every archived instant (completed) with its completed file's bytes. An archive file that
    went between the listing and its read was replaced meanwhile (the next archival moving the
    legacy files, Hudi's LSM compaction): the folder is listed again."""
    for attempt in range(LOAD_ATTEMPTS):
        try:
            return _load(storage, layout)
        except FileNotFoundError:
            if attempt == LOAD_ATTEMPTS - 1:
                raise
    return {}


def _load(storage: Storage, layout: TimelineLayout) -> dict[Instant, bytes]:
    legacy_listing = storage.list(LEGACY_FOLDER)
    out: dict[Instant, bytes] = {}
    for entry in legacy_files(legacy_listing):
        out.update(read_legacy_file(storage, entry))
    if layout.version == 1:
        listing = legacy_listing if layout.archive == LEGACY_FOLDER else storage.list(layout.archive)
        for entry in archived_log.archive_log_files(listing):
            try:
                out.update(_cached(storage, entry, _read_log_file))
            except CorruptTableError:
                if entry.name != _merging(storage, layout.archive, listing):
                    raise
    else:
        out.update(archived_lsm.load(storage, layout.archive))
    return out


def _merging(storage: Storage, folder: str, listing: list[FileEntry]) -> str | None:
    """The file a merge of small archive files is writing (its plan names it), if one runs."""
    if not any(e.name == archived_log.MERGE_PLAN for e in listing):
        return None
    rel = f"{folder}/{archived_log.MERGE_PLAN}"
    try:
        return archived_log.read_merge_plan(storage.read_bytes(rel), storage.full_path(rel))[1]
    except (FileNotFoundError, CorruptTableError):
        return None


def read_legacy_file(storage: Storage, entry: FileEntry) -> dict[Instant, bytes]:
    """The instants of an archive file of an earlier upsertlake release."""
    return _cached(storage, entry, _read_legacy)


def _cached(
    storage: Storage, entry: FileEntry, read: Callable[[Storage, str], dict[Instant, bytes]]
) -> dict[Instant, bytes]:
    """An archive file's instants, parsed once and kept by the storage under its size and mtime
    (archive files are written once; a re-created table is read again)."""
    parsed = storage.cache("archive files", FILES_KEPT)
    key = (entry.path, entry.size, entry.mtime_ns)
    got = parsed.get(key)
    if got is None:
        got = read(storage, entry.path)
        parsed.put(key, got)
    return cast("dict[Instant, bytes]", got)


def _read_log_file(storage: Storage, rel: str) -> dict[Instant, bytes]:
    source = storage.full_path(rel)
    return archived_log.completed_instants(archived_log.read_entries(storage.read_bytes(rel), source), source)


def _read_legacy(storage: Storage, rel: str) -> dict[Instant, bytes]:
    try:
        records = cast("list[dict[str, Any]]", list(fastavro.reader(io.BytesIO(storage.read_bytes(rel)))))
        return {
            Instant(r["instantTime"], Action(r["action"]), State.COMPLETED, r.get("completionTime")): bytes(
                r["metadata"]
            )
            for r in records
        }
    except (ValueError, KeyError, EOFError) as exc:
        raise CorruptTableError(f"cannot parse archived timeline file {storage.full_path(rel)}: {exc}") from exc


def listed_archive(
    storage: Storage, layout: TimelineLayout, active: Collection[tuple[str, str]], present: bool | None
) -> dict[Instant, bytes]:
    """The archived instants of the table at `storage`, as last listed (kept by the storage with
    the completed instants the active timeline held then): the archive is read again only when
    one of those instants has left the active timeline since. `active`: the (time, action) of every
    completed instant the active timeline holds now; `present`: whether the listings that gave
    them show an archive folder (None: not known, those folders were not listed).

    Sound because an archival writes the archive before it deletes the instants' files: an
    archive written after our listing holds only instants still active when we look again (where
    the active file stands for them), until the archival deletes them, which we then notice. A
    rollback or restore removes completed instants too (a read more, nothing wrong). Moving the
    legacy files or compacting the LSM timeline changes none of the instants archived."""
    held = storage.cache("archive listing", 1)
    if present is False:
        held.forget("last")
        return {}
    now = frozenset(active)
    last = held.get("last")
    if last is not None and last[0] and last[0] <= now and last[2] == layout:
        return cast("dict[Instant, bytes]", last[1])
    archived = load_archived(storage, layout)
    held.put("last", (now, archived, layout))
    return archived

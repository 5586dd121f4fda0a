"""The archived timeline: completed instants moved out of `.hoodie/` by the archiver.

Deviation from Hudi 0.x, which appends them to log files `.hoodie/archived/.commits_.archive.N`:
upsertlake writes one Avro container file per archival run, `archived/upsertlake-<first>-<last>.avro`
(ten small ones are merged into one), each record an instant's time, action, completion time
(version 8 tables; absent in older files) and the bytes of its completed file. Hudi's readers skip
files of that folder not named `.commits_.archive*`, and treat base files of instants older than
the active timeline as committed, so the table reads the same with them.
"""

from __future__ import annotations

import io
from collections.abc import Collection
from typing import Any, cast

import fastavro

from upsertlake.errors import CorruptTableError
from upsertlake.storage import FileEntry, Storage
from upsertlake.timeline.instant import Action, Instant, State

ARCHIVE_FOLDER = ".hoodie/archived"
ARCHIVE_PREFIX = "upsertlake-"
ARCHIVE_SUFFIX = ".avro"
LOAD_ATTEMPTS = 3  # listings of the folder a load makes while archivals merge its files


def archive_file_name(first: str, last: str) -> str:
    return f"{ARCHIVE_PREFIX}{first}-{last}{ARCHIVE_SUFFIX}"


def archive_files(storage: Storage) -> list[FileEntry]:
    """upsertlake's archive files, oldest first (Hudi's `.commits_.archive.N` are not ours)."""
    return sorted(
        (e for e in storage.list(ARCHIVE_FOLDER)
         if not e.is_dir and e.name.startswith(ARCHIVE_PREFIX) and e.name.endswith(ARCHIVE_SUFFIX)),
        key=lambda e: e.name,
    )


def load_archived(storage: Storage) -> dict[Instant, bytes]:
    """Every archived instant (completed) with its completed file's bytes. An archive file that
    went between the listing and its read was merged into another meanwhile (written before the
    files it merges go): the folder is listed again."""
    for attempt in range(LOAD_ATTEMPTS):
        try:
            files = archive_files(storage)
            return {i: data for entry in files for i, data in read_archive_file(storage, entry).items()}
        except FileNotFoundError:
            if attempt == LOAD_ATTEMPTS - 1:
                raise
    return {}


def read_archive_file(storage: Storage, entry: FileEntry) -> dict[Instant, bytes]:
    """The instants of one listed archive file."""
    return _read(storage, entry.path, entry.size, entry.mtime_ns)


def listed_archive(storage: Storage, active: Collection[tuple[str, str]], present: bool | None) -> dict[Instant, bytes]:
    """The archived instants of the table at `storage`, as last listed (kept by the storage with
    the completed instants the active timeline held then): `archived/` is listed again only when
    one of those instants has left the active timeline since. `active`: the (time, action) of every
    completed instant the active timeline holds now; `present`: whether the listing of `.hoodie/`
    that gave them shows `archived/` (None: not known, that folder was not listed).

    Sound because an archival writes its archive file before it deletes the instants' files: an
    archive written after our listing holds only instants still active when we look again (where
    the active file stands for them), until the archival deletes them, which we then notice. A
    rollback or restore removes completed instants too (a listing more, nothing wrong). Merging
    archive files changes none of the instants they hold."""
    held = storage.cache("archive listing", 1)
    if present is False:
        held.forget("last")
        return {}
    now = frozenset(active)
    last = held.get("last")
    if last is not None and last[0] and last[0] <= now:
        return cast("dict[Instant, bytes]", last[1])
    archived = load_archived(storage)
    held.put("last", (now, archived))
    return archived


ARCHIVE_FILES_KEPT = 256  # parsed archive files a storage keeps


def _read(storage: Storage, rel: str, size: int, mtime_ns: int) -> dict[Instant, bytes]:
    """One archive file's instants. Archive files are written once; kept by the storage under
    their size and mtime, so a re-created table is read again."""
    parsed = storage.cache("archive files", ARCHIVE_FILES_KEPT)
    got = parsed.get((rel, size, mtime_ns))
    if got is not None:
        return cast("dict[Instant, bytes]", got)
    try:
        records = cast("list[dict[str, Any]]", list(fastavro.reader(io.BytesIO(storage.read_bytes(rel)))))
        got = {
            Instant(r["instantTime"], Action(r["action"]), State.COMPLETED, r.get("completionTime")): bytes(
                r["metadata"]
            )
            for r in records
        }
    except (ValueError, KeyError, EOFError) as exc:
        raise CorruptTableError(f"cannot parse archived timeline file {storage.full_path(rel)}: {exc}") from exc
    parsed.put((rel, size, mtime_ns), got)
    return got

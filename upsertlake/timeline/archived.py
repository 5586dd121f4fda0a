"""The archived timeline: completed instants moved out of `.hoodie/` by the archiver.

Deviation from Hudi 0.x, which appends them to log files `.hoodie/archived/.commits_.archive.N`:
upsertlake writes one Avro container file per archival run, `archived/upsertlake-<first>-<last>.avro`,
each record an instant's time, action, completion time (version 8 tables; absent in older files)
and the bytes of its completed file. Hudi's readers skip
files of that folder not named `.commits_.archive*`, and treat base files of instants older than
the active timeline as committed, so the table reads the same with them.
"""

from __future__ import annotations

import io
from functools import lru_cache

import fastavro

from upsertlake.errors import CorruptTableError
from upsertlake.storage import Storage
from upsertlake.timeline.instant import Action, Instant, State

ARCHIVE_FOLDER = ".hoodie/archived"
ARCHIVE_PREFIX = "upsertlake-"
ARCHIVE_SUFFIX = ".avro"


def archive_file_name(first: str, last: str) -> str:
    return f"{ARCHIVE_PREFIX}{first}-{last}{ARCHIVE_SUFFIX}"


def load_archived(storage: Storage) -> dict[Instant, bytes]:
    """Every archived instant (completed) with its completed file's bytes."""
    out: dict[Instant, bytes] = {}
    for entry in storage.list(ARCHIVE_FOLDER):
        if entry.is_dir or not (entry.name.startswith(ARCHIVE_PREFIX) and entry.name.endswith(ARCHIVE_SUFFIX)):
            continue
        out.update(_read(storage, entry.path, entry.size, entry.mtime_ns))
    return out


@lru_cache(maxsize=256)
def _read(storage: Storage, rel: str, size: int, mtime_ns: int) -> dict[Instant, bytes]:
    # Archive files are written once; keyed by size and mtime so a re-created table is re-read.
    try:
        records = list(fastavro.reader(io.BytesIO(storage.read_bytes(rel))))
        return {
            Instant(r["instantTime"], Action(r["action"]), State.COMPLETED, r.get("completionTime")): bytes(r["metadata"])
            for r in records
        }
    except (ValueError, KeyError, EOFError) as exc:
        raise CorruptTableError(f"cannot parse archived timeline file {storage.full_path(rel)}: {exc}") from exc

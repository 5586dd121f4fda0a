"""Hudi's archived timeline of table versions 8 and 9 (timeline layout 2): the LSM timeline
under `.hoodie/timeline/history/`, as Hudi 1.x's `LSMTimelineWriter` writes it and its
`LSMTimeline` / `HoodieArchivedTimeline` read it (docs/DESIGN.md §5).

- `<min>_<max>_<layer>.parquet`: HoodieLSMTimelineInstant rows (instantTime, completionTime,
  action, metadata = the completed file's bytes, plan = the clean / compaction / replace plan,
  version 1), one per archived instant, the instants from `min` to `max`;
- `manifest_<N>`: JSON `{"files": [{"fileName", "fileLen"}]}`, the files of snapshot N, the only
  files readers look at;
- `_version_`: the number of the latest manifest (readers fall back to the largest manifest
  listed when it is missing or unreadable).

An archival writes a layer-0 file, then the next manifest, then the version file. Once a layer
holds `hoodie.timeline.compaction.batch.size` files (10), its oldest ones are merged into one file
of the next layer (at most 1 GB of them), layer after layer; then every file and manifest
outside the newest 3 (+ one per compacted layer) snapshots is deleted, so a reader that took an
older manifest still finds its files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

import pyarrow as pa
import pyarrow.parquet as pq

from upsertlake.errors import CorruptTableError
from upsertlake.storage import FileEntry, Storage
from upsertlake.timeline.instant import CLUSTERING, Action, Instant, State

VERSION_FILE = "_version_"
MANIFEST_PREFIX = "manifest_"
RECORD_SCHEMA = "HoodieLSMTimelineInstant"
INSTANT_VERSION = 1  # LSMTimeline.LSM_TIMELINE_INSTANT_VERSION_1
SNAPSHOTS_KEPT = 3  # LSMTimelineWriter.clean: newest manifests kept (+1 per compacted layer)
MAX_COMPACTION_BYTES = 1024 * 1024 * 1000  # LSMTimelineWriter.MAX_FILE_SIZE_IN_BYTES
LOAD_ATTEMPTS = 3  # manifests read when a file went meanwhile (a concurrent clean of the LSM)

_FILE = re.compile(r"^(\d+)_(\d+)_(\d)\.parquet$")  # LSMTimeline.ARCHIVE_FILE_PATTERN
_MANIFEST = re.compile(r"^manifest_(\d+)$")

SCHEMA = pa.schema([
    pa.field("instantTime", pa.string()),
    pa.field("completionTime", pa.string()),
    pa.field("action", pa.string()),
    pa.field("metadata", pa.binary()),
    pa.field("plan", pa.binary()),
    pa.field("version", pa.int32(), nullable=False),
])


@cache
def _footer() -> dict[str, str]:
    """The footer keys parquet-avro writes: the Avro schema of the rows, and the writer model."""
    text = (
        resources.files("upsertlake.timeline")
        .joinpath("avro")
        .joinpath(f"{RECORD_SCHEMA}.avsc")
        .read_text("utf-8")
        .strip()
    )
    return {"parquet.avro.schema": text, "writer.model.name": "avro"}


@dataclass(frozen=True)
class LsmInstant:
    """One archived instant: its completed file's bytes (`metadata`) and its plan."""

    instant: Instant
    metadata: bytes | None
    plan: bytes | None = None


def file_name(first: str, last: str, layer: int) -> str:
    return f"{first}_{last}_{layer}.parquet"


def layer_of(name: str) -> int:
    m = _FILE.match(name)
    return int(m.group(3)) if m else 0


# -- manifests ------------------------------------------------------------------------------------


def manifest_versions(listing: Iterable[FileEntry]) -> list[int]:
    return sorted(int(m.group(1)) for e in listing if not e.is_dir and (m := _MANIFEST.match(e.name)))


def latest_version(storage: Storage, folder: str) -> int:
    """The latest snapshot's number (-1: none). The version file names it; a missing or damaged
    one (a writer died between manifest and version file) is the largest manifest listed."""
    try:
        return int(storage.read_bytes(f"{folder}/{VERSION_FILE}").decode("utf-8").strip())
    except (FileNotFoundError, ValueError, UnicodeDecodeError):
        return max(manifest_versions(storage.list(folder)), default=-1)


def read_manifest(storage: Storage, folder: str, version: int) -> list[tuple[str, int]]:
    """(file name, length) of snapshot `version`'s files (none for -1)."""
    if version < 0:
        return []
    rel = f"{folder}/{MANIFEST_PREFIX}{version}"
    try:
        doc = json.loads(storage.read_bytes(rel).decode("utf-8") or "{}")
        return [(str(f["fileName"]), int(f["fileLen"])) for f in doc.get("files") or []]
    except FileNotFoundError:
        raise CorruptTableError(
            f"the archived timeline's version file names {storage.full_path(rel)}, which does not exist"
        ) from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptTableError(
            f"cannot parse the archived timeline's manifest {storage.full_path(rel)}: {exc}"
        ) from exc


def manifest_bytes(files: Sequence[tuple[str, int]]) -> bytes:
    """A manifest as Hudi writes it (Jackson's default pretty printer)."""
    if not files:
        return b'{\n  "files" : [ ]\n}'
    entries = ", ".join(
        f'{{\n    "fileName" : {json.dumps(name)},\n    "fileLen" : {length}\n  }}' for name, length in files
    )
    return ('{\n  "files" : [ ' + entries + " ]\n}").encode()


# -- reading --------------------------------------------------------------------------------------


def load(storage: Storage, folder: str) -> dict[Instant, bytes]:
    """Every instant of the latest snapshot, with its completed file's bytes. A file the
    manifest names that is gone was cleaned after a newer snapshot replaced it: the version is
    read again; a manifest naming a file that does not exist is a damaged archive."""
    for attempt in range(LOAD_ATTEMPTS):
        version = latest_version(storage, folder)
        try:
            return {r.instant: r.metadata or b"" for r in read_snapshot(storage, folder, version)}
        except FileNotFoundError as exc:
            if attempt == LOAD_ATTEMPTS - 1 or latest_version(storage, folder) == version:
                raise CorruptTableError(
                    f"the archived timeline's manifest {storage.full_path(f'{folder}/{MANIFEST_PREFIX}{version}')} "
                    f"names {exc.filename or exc}, which does not exist (restore the file, or the manifest's "
                    "previous version as the latest)"
                ) from None
    return {}


FILES_KEPT = 256  # parsed timeline files a storage keeps


def read_snapshot(storage: Storage, folder: str, version: int) -> list[LsmInstant]:
    """The rows of snapshot `version`'s files, in the manifest's order. A file is parsed once per
    storage: it is never rewritten (a compaction writes a file of another name), so a writer
    reloading the archive after an archival reads only the files that are new."""
    parsed = storage.cache("lsm timeline files", FILES_KEPT)
    rows: list[LsmInstant] = []
    for name, size in read_manifest(storage, folder, version):
        key = (f"{folder}/{name}", size)
        got = parsed.get(key)
        if got is None:
            got = read_file(storage, f"{folder}/{name}")
            parsed.put(key, got)
        rows.extend(got)
    return rows


def read_file(storage: Storage, rel: str) -> list[LsmInstant]:
    try:
        data = storage.read_parquet(rel, ["instantTime", "completionTime", "action", "metadata", "plan"])
    except FileNotFoundError as exc:
        exc.filename = storage.full_path(rel)
        raise
    except (OSError, ValueError, pa.ArrowInvalid) as exc:
        raise CorruptTableError(f"cannot read archived timeline file {storage.full_path(rel)}: {exc}") from exc
    out = []
    for row in data.to_pylist():
        action = _action(row["action"])
        if row["instantTime"] is None or action is None:
            continue  # an action upsertlake has no use for
        inst = Instant(row["instantTime"], action, State.COMPLETED, row["completionTime"])
        out.append(LsmInstant(inst, row["metadata"], row["plan"]))
    return out


def _action(name: str | None) -> Action | None:
    try:
        return Action(name)
    except ValueError:
        return Action.REPLACE_COMMIT if name == CLUSTERING else None


# -- writing --------------------------------------------------------------------------------------


def encode_file(rows: Sequence[LsmInstant]) -> bytes:
    """A parquet file of HoodieLSMTimelineInstant rows, as parquet-avro writes them (gzip, the
    Avro schema in the footer)."""
    data = pa.table(
        {
            "instantTime": [r.instant.time for r in rows],
            "completionTime": [r.instant.completion for r in rows],
            "action": [r.instant.action.value for r in rows],
            "metadata": [r.metadata for r in rows],
            "plan": [r.plan for r in rows],
            "version": [INSTANT_VERSION] * len(rows),
        },
        schema=SCHEMA,
    )
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, SCHEMA, compression="gzip", store_schema=False) as writer:
        writer.write_table(data)
        writer.add_key_value_metadata(_footer())
    return bytes(sink.getvalue().to_pybytes())


def write(storage: Storage, folder: str, rows: Sequence[LsmInstant]) -> str:
    """Add `rows` (sorted by instant time) to the LSM timeline as one layer-0 file and a new
    snapshot; returns the file's name. A file of that name in the latest snapshot was written by
    an archival that died before it deleted the instants: nothing is written again."""
    name = file_name(rows[0].instant.time, rows[-1].instant.time, 0)
    version = latest_version(storage, folder)
    files = read_manifest(storage, folder, version)
    if any(n == name for n, _ in files):
        return name
    data = encode_file(rows)
    storage.write_bytes(f"{folder}/{name}", data)
    _commit(storage, folder, version, [*files, (name, len(data))])
    return name


def _commit(storage: Storage, folder: str, version: int, files: Sequence[tuple[str, int]]) -> None:
    """Snapshot `version + 1` of `files`: its manifest, then the version file naming it."""
    new = max(version, 0) + 1
    storage.write_bytes(f"{folder}/{MANIFEST_PREFIX}{new}", manifest_bytes(files))
    storage.write_bytes(f"{folder}/{VERSION_FILE}", str(new).encode())


def compact_and_clean(storage: Storage, folder: str, batch: int) -> None:
    """Merge the oldest `batch` files of a layer into one of the next, layer by layer while a
    layer is full (LSMTimelineWriter.compactAndClean); then clean old snapshots."""
    layer = 0
    while _compact(storage, folder, layer, batch):
        layer += 1
    clean(storage, folder, layer)


def _compact(storage: Storage, folder: str, layer: int, batch: int) -> bool:
    version = latest_version(storage, folder)
    files = read_manifest(storage, folder, version)
    mine = sorted((f for f in files if layer_of(f[0]) == layer), key=lambda f: f[0])
    if len(mine) < batch:
        return False
    candidates: list[str] = []
    total = 0
    for name, length in mine[:batch]:
        if total > MAX_COMPACTION_BYTES:
            break
        total += length
        candidates.append(name)
    if len(candidates) < 2:
        return False
    first = min(_FILE.match(n).group(1) for n in candidates)  # type: ignore[union-attr]
    last = max(_FILE.match(n).group(2) for n in candidates)  # type: ignore[union-attr]
    name = file_name(first, last, layer + 1)
    data = encode_file([r for n in candidates for r in read_file(storage, f"{folder}/{n}")])
    storage.write_bytes(f"{folder}/{name}", data)
    kept = [f for f in files if f[0] not in candidates]
    _commit(storage, folder, version, [*kept, (name, len(data))])
    return True


def clean(storage: Storage, folder: str, compacted_layers: int) -> None:
    """Delete the manifests outside the newest `SNAPSHOTS_KEPT + compacted_layers`, then the
    parquet files none of the kept ones names (LSMTimelineWriter.clean)."""
    listing = storage.list(folder)
    versions = manifest_versions(listing)
    keep = SNAPSHOTS_KEPT + compacted_layers
    if len(versions) <= keep:
        return
    kept = versions[-keep:]
    needed = {name for v in kept for name, _ in read_manifest(storage, folder, v)}
    for v in versions[:-keep]:
        storage.delete(f"{folder}/{MANIFEST_PREFIX}{v}")
    for entry in listing:
        if not entry.is_dir and entry.name.endswith(".parquet") and entry.name not in needed:
            storage.delete(entry.path)

"""Hudi's archived timeline of table version 6 (timeline layout 1): Hudi log files
`<archive folder>/.commits_.archive.<N>_<writeToken>` whose Avro data blocks hold
`HoodieArchivedMetaEntry` records, one per archived instant file (requested, inflight and
completed each), as Hudi 0.x's `HoodieTimelineArchiver` writes them and its `HoodieArchivedTimeline`
reads them (docs/DESIGN.md §5).

An entry names the instant (`commitTime`, `actionType`, `actionState`) and carries the file's
document as an Avro record in the field of its action: `hoodieCommitMetadata` (commits and
deltacommits, the JSON document as Avro, `ROLLING_STAT` emptied, a compaction's operation
`COMPACT`), `hoodieReplaceCommitMetadata`, `hoodieCleanMetadata` / `hoodieCleanerPlan`,
`hoodieRollbackMetadata`, `hoodieSavePointMetadata`, `hoodieCompactionPlan` (a compaction's
requested file), `hoodieRequestedReplaceMetadata` / `HoodieInflightReplaceMetadata`. Very old
entries hold commit metadata as a JSON string; entries without `actionState` are completed.

Storage that cannot append (local disks, object stores) gets one new file per archival: the next
version after the newest, write token `1-0-1`, records in blocks of ten
(`hoodie.commits.archival.batch`), each block's header the writer schema alone, as Hudi 0.15's
archiver writes it. Its merge of small archive files (`hoodie.archive.merge.enable`): once the
newest files, as far back as each is under 20 MB, are ten, their entries go into the next
version's file, under a plan `mergeArchivePlan` (HoodieMergeArchiveFilePlan: the candidates, the
merged file's name) written first and deleted last; a merge that died is undone or finished by the
next archival (Hudi's verifyLastMergeArchiveFilesIfNecessary), and a reader skips the merged file
the plan names if it does not parse.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, cast

import fastavro

from upsertlake.errors import CorruptTableError
from upsertlake.logfile import avro_datum_block, read_avro_datums
from upsertlake.schema import parsed_avro_schema
from upsertlake.storage import FileEntry
from upsertlake.timeline import documents
from upsertlake.timeline.commit_metadata import AVRO_MAGIC, conform
from upsertlake.timeline.instant import Action, Instant, State
from upsertlake.timeline.operation import COMPACT_TYPE

ENTRY_SCHEMA = "HoodieArchivedMetaEntry"
WRITE_TOKEN = "1-0-1"  # Hudi's rollover write token (HoodieLogFormat.UNKNOWN_WRITE_TOKEN)
BATCH = 10  # entries per data block (hoodie.commits.archival.batch)
ROLLING_STAT = "ROLLING_STAT"  # HoodieRollingStatMetadata.ROLLING_STAT_METADATA_KEY, emptied on archival
MERGE_PLAN = "mergeArchivePlan"  # HoodieArchivedTimeline.MERGE_ARCHIVE_PLAN_NAME
MERGE_PLAN_SCHEMA = "HoodieMergeArchiveFilePlan"

# Hudi: ^\.commits_\.archive\.([0-9]+).* (ArchiveFileVersionComparator)
_FILE = re.compile(r"^\.commits_\.archive\.(\d+)(?:_.*)?$")

# The entry field holding each action's document, by state (HoodieArchivedTimeline.getMetadataKey
# for completed files; MetadataConversionUtils.createMetaWrapper for all).
_COMMIT = "hoodieCommitMetadata"
_REPLACE = "hoodieReplaceCommitMetadata"
_COMPLETED_FIELD = {
    Action.COMMIT: _COMMIT,
    Action.DELTA_COMMIT: _COMMIT,
    Action.REPLACE_COMMIT: _REPLACE,
    Action.CLEAN: "hoodieCleanMetadata",
    Action.ROLLBACK: "hoodieRollbackMetadata",
    Action.SAVEPOINT: "hoodieSavePointMetadata",
}
# Avro documents (not commit metadata) as upsertlake keeps them, by the entry field that holds them.
_DOCUMENT_SCHEMA = {
    "hoodieCleanMetadata": "HoodieCleanMetadata",
    "hoodieCleanerPlan": "HoodieCleanerPlan",
    "hoodieRollbackMetadata": "HoodieRollbackMetadata",
    "hoodieSavePointMetadata": "HoodieSavepointMetadata",
    "hoodieCompactionPlan": "HoodieCompactionPlan",
    "hoodieRequestedReplaceMetadata": "HoodieRequestedReplaceMetadata",
}


@cache
def entry_schema_json() -> str:
    """HoodieArchivedMetaEntry's schema as Hudi 0.15 writes it in every block header."""
    return (
        resources.files("upsertlake.timeline")
        .joinpath("avro")
        .joinpath(f"{ENTRY_SCHEMA}.avsc")
        .read_text("utf-8")
        .strip()
    )


@cache
def _field_schemas() -> dict[str, Any]:
    """The record schema of each document field of the entry (its union's non-null branch),
    named types expanded so each stands alone."""
    expanded = cast("dict[str, Any]", fastavro.parse_schema(json.loads(entry_schema_json()), expand=True))
    out = {}
    for f in expanded["fields"]:
        branches = f["type"] if isinstance(f["type"], list) else [f["type"]]
        record = next((b for b in branches if isinstance(b, dict) and b.get("type") == "record"), None)
        if record is not None:
            out[f["name"]] = record
    return out


# -- names ----------------------------------------------------------------------------------------


def archive_file_version(name: str) -> int | None:
    """The version of an archive log file's name (None: not one)."""
    m = _FILE.match(name)
    return int(m.group(1)) if m else None


def archive_log_files(listing: Iterable[FileEntry]) -> list[FileEntry]:
    """The archive log files of a listing of the archive folder, oldest (lowest version) first."""
    files = [e for e in listing if not e.is_dir and archive_file_version(e.name) is not None]
    return sorted(files, key=lambda e: (archive_file_version(e.name), e.name))


def merge_candidates(listing: Iterable[FileEntry], small_bytes: int) -> list[FileEntry]:
    """The newest archive files, newest first, as far back as each is at most `small_bytes`
    (Hudi's getMergeCandidates: older files stay as they are, so the files keep their order)."""
    out = []
    for entry in reversed(archive_log_files(listing)):
        if entry.size > small_bytes:
            break
        out.append(entry)
    return out


def merge_plan(candidates: Sequence[str], merged: str) -> bytes:
    """The plan of a merge: the candidates' paths and the merged file's name."""
    return documents.encode(
        MERGE_PLAN_SCHEMA, {"version": 1, "candidate": list(candidates), "mergedArchiveFileName": merged}
    )


def read_merge_plan(data: bytes, source: str) -> tuple[list[str], str]:
    """(candidate paths, merged file name) of a merge plan."""
    plan = documents.decode(data, source)
    return list(plan.get("candidate") or []), str(plan.get("mergedArchiveFileName") or "")


def next_archive_file_name(listing: Iterable[FileEntry]) -> str:
    """The file an archival creates: version 1, or the newest version + 1 (Hudi rolls over, as
    storage without append cannot add to the newest)."""
    versions = [v for e in archive_log_files(listing) if (v := archive_file_version(e.name)) is not None]
    version = max(versions, default=0) + 1
    return f".commits_.archive.{version}_{WRITE_TOKEN}"


# -- reading --------------------------------------------------------------------------------------


def read_entries(data: bytes, name: str) -> list[dict[str, Any]]:
    """The HoodieArchivedMetaEntry records of one archive log file (each block under its own
    writer schema). A torn block (a crash mid-write) is skipped, as Hudi skips it."""
    entries = []
    for schema_json, datums in read_avro_datums(data, name):
        try:
            schema = parsed_avro_schema(schema_json)
            entries += [cast("dict[str, Any]", fastavro.schemaless_reader(io.BytesIO(d), schema, None)) for d in datums]
        except (ValueError, KeyError, EOFError, TypeError, IndexError) as exc:
            raise CorruptTableError(f"cannot parse archived timeline file {name}: {exc}") from exc
    return entries


def completed_instants(entries: Iterable[dict[str, Any]], source: str) -> dict[Instant, bytes]:
    """The completed instants the entries archived, each with its document as upsertlake reads
    the completed file: commit metadata as JSON, the other documents as Avro."""
    out: dict[Instant, bytes] = {}
    for entry in entries:
        state = entry.get("actionState")
        if state not in (None, "COMPLETED"):
            continue
        time, action = entry.get("commitTime"), _action(entry.get("actionType"))
        if not time or action is None:
            continue  # an action upsertlake has no use for (Hudi logs and skips these too)
        out[Instant(str(time), action, State.COMPLETED)] = _document(entry, action, f"{source}: archived {time}")
    return out


def lsm_actions(entries: Iterable[dict[str, Any]], source: str) -> list[tuple[Instant, bytes, bytes | None]]:
    """Each completed instant the entries archived as Hudi's LegacyArchivedMetaEntryReader hands it
    to the LSM timeline when a table leaves version 6: completed at its entry's
    `stateTransitionTime` (its requested time where an old entry has none: layout 1 completes
    instants in the order of their times), its document as `completed_instants` reads it, and
    its plan, which that reader finds for a compaction alone (its requested entry's)."""
    entries = list(entries)
    completed = completed_instants(entries, source)
    finished: dict[tuple[str, str], str] = {}
    plans: dict[str, bytes] = {}
    for entry in entries:
        time, action, state = str(entry.get("commitTime")), entry.get("actionType"), entry.get("actionState")
        if state in (None, "COMPLETED") and entry.get("stateTransitionTime"):
            finished[(time, str(action))] = str(entry["stateTransitionTime"])
        elif action == Action.COMPACTION.value and entry.get("hoodieCompactionPlan") is not None:
            plans[time] = documents.encode(_DOCUMENT_SCHEMA["hoodieCompactionPlan"], entry["hoodieCompactionPlan"])
    out = []
    for inst, data in sorted(completed.items()):
        completion = finished.get((inst.time, inst.action.value), inst.time)
        plan = plans.get(inst.time) if inst.action is Action.COMMIT else None
        out.append((inst.with_state(State.COMPLETED, completion=completion), data, plan))
    return out


def _action(name: object) -> Action | None:
    try:
        return Action(str(name))
    except ValueError:
        return None


def _document(entry: dict[str, Any], action: Action, source: str) -> bytes:
    field = _COMPLETED_FIELD.get(action)
    value = entry.get(field) if field else None
    if field is None or value is None:
        return b""  # an empty completed file (Hudi archives those as entries without a document)
    if field in (_COMMIT, _REPLACE):
        if isinstance(value, (str, bytes)):  # very old entries: the JSON document itself
            return value.encode("utf-8") if isinstance(value, str) else value
        return json.dumps(value).encode("utf-8")
    try:
        return documents.encode(_DOCUMENT_SCHEMA[field], value)
    except (ValueError, TypeError, KeyError) as exc:
        raise CorruptTableError(f"cannot convert {source}: {exc}") from exc


# -- writing --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArchivedFile:
    """One instant file to archive: the instant in that file's state, its bytes, and when the
    file was last modified (Hudi's `stateTransitionTime`, an instant time)."""

    instant: Instant
    data: bytes
    modified: str | None = None


def encode_archive(entries: Iterable[dict[str, Any]], block: int = BATCH) -> bytes:
    """An archive log file of the entries (see `entry`), in blocks of `block` entries, under
    HoodieArchivedMetaEntry's schema (entries read from files of an older schema take its defaults)."""
    schema_json = entry_schema_json()
    schema = parsed_avro_schema(schema_json)
    datums = []
    for e in entries:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, e)
        datums.append(out.getvalue())
    return b"".join(avro_datum_block(schema_json, datums[i : i + block]) for i in range(0, len(datums), block))


def entry(f: ArchivedFile) -> dict[str, Any]:
    """The HoodieArchivedMetaEntry Hudi 0.15 writes for one instant file
    (MetadataConversionUtils.createMetaWrapper)."""
    inst, data = f.instant, f.data
    action = inst.action
    out: dict[str, Any] = {
        "commitTime": inst.time,
        "actionType": action.value,
        "actionState": inst.state.name,
        "stateTransitionTime": f.modified,
    }
    if inst.is_completed and not data:
        return out  # an empty completed file: the entry alone (createMetaWrapperForEmptyInstant)
    source = inst.file_name()
    if action in (Action.COMMIT, Action.DELTA_COMMIT):
        out[_COMMIT] = _commit_record(data, _COMMIT, source)
    elif action is Action.REPLACE_COMMIT:
        if inst.is_completed:
            out[_REPLACE] = _commit_record(data, _REPLACE, source)
        elif inst.state is State.INFLIGHT and data:
            out["HoodieInflightReplaceMetadata"] = _commit_record(data, _COMMIT, source)
        elif data:
            out["hoodieRequestedReplaceMetadata"] = documents.decode(data, source)
    elif action is Action.CLEAN:
        field = "hoodieCleanMetadata" if inst.is_completed else "hoodieCleanerPlan"
        out[field] = documents.decode(data, source)
    elif action is Action.ROLLBACK:
        if inst.is_completed:
            out["hoodieRollbackMetadata"] = documents.decode(data, source)
    elif action is Action.SAVEPOINT:
        out["hoodieSavePointMetadata"] = documents.decode(data, source)
    elif action is Action.COMPACTION:
        if inst.state is State.REQUESTED:
            out["hoodieCompactionPlan"] = documents.decode(data, source)
    else:
        raise CorruptTableError(f"Hudi's archived timeline holds no {action.value} instants ({source})")
    return out


def _commit_record(data: bytes, field: str, source: str) -> dict[str, Any]:
    """A commit document (JSON, or Avro as layout 2 keeps it) as the entry's Avro record: what
    Hudi's Jackson conversion makes of it, rolling stats emptied, a compaction's operation COMPACT."""
    try:
        if data.startswith(AVRO_MAGIC):
            doc = documents.decode(data, source)
        else:
            doc = json.loads(data.decode("utf-8")) if data.strip() else {}
    except ValueError as exc:
        raise CorruptTableError(f"cannot parse {source}: {exc}") from exc
    record = cast("dict[str, Any]", conform(doc, _field_schemas()[field]))
    record["partitionToWriteStats"] = record.get("partitionToWriteStats") or {}
    record["extraMetadata"] = {**(record.get("extraMetadata") or {}), ROLLING_STAT: ""}
    record["operationType"] = COMPACT_TYPE if doc.get("compacted") else (record.get("operationType") or "UNKNOWN")
    return record

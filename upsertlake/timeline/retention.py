"""What the timeline retains: the cleaner's boundary and the savepoints that outlive it.

Read-only queries over completed clean and savepoint instants, shared by the services that change
retention (clean, archive, rollback, restore, savepoint) and by readers that must refuse instants
whose files are gone.
"""

from __future__ import annotations

from typing import Any, cast

from upsertlake.errors import CleanedInstantError, CorruptTableError, InstantTimeError
from upsertlake.timeline import documents
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import Action, Instant, State


def savepointed_files(timeline: Timeline) -> set[str]:
    """Table-relative paths of every file some completed savepoint pins."""
    pinned: set[str] = set()
    for inst in timeline.filter([Action.SAVEPOINT], [State.COMPLETED]):
        doc = documents.decode(timeline.document(inst), f"savepoint {inst.time}")
        for partition, meta in doc["partitionMetadata"].items():
            pinned.update(f"{partition}/{name}" if partition else name for name in meta["savepointDataFile"])
    return pinned


def cleaned_files(timeline: Timeline) -> set[str]:
    """Table-relative paths of every file a completed clean of the active timeline deleted."""
    gone: set[str] = set()
    for inst in timeline.filter([Action.CLEAN], [State.COMPLETED]):
        try:
            doc = documents.decode(timeline.document(inst), f"clean {inst.time}")
        except CorruptTableError:
            continue
        for partition, meta in (doc.get("partitionMetadata") or {}).items():
            for name in [*(meta.get("successDeleteFiles") or []), *(meta.get("deletePathPatterns") or [])]:
                name = name.rsplit("/", 1)[-1]
                gone.add(f"{partition}/{name}" if partition else name)
    return gone


def rolled_back_instants(timeline: Timeline) -> set[str]:
    """The instants completed rollbacks and restores of the active timeline undid (their
    `commitsRollback`); an unreadable document undid nothing that can be named."""
    undone: set[str] = set()
    for inst in timeline.filter([Action.ROLLBACK, Action.RESTORE], [State.COMPLETED]):
        try:
            doc = documents.decode(timeline.document(inst), f"{inst.action.value} {inst.time}")
        except CorruptTableError:
            continue
        if inst.action is Action.ROLLBACK:
            undone.update(doc.get("commitsRollback") or [])
        else:
            for rollbacks in (doc.get("hoodieRestoreMetadata") or {}).values():
                for rollback in rollbacks:
                    undone.update(rollback.get("commitsRollback") or [])
    return undone


def savepoint_times(timeline: Timeline) -> set[str]:
    return {i.time for i in timeline.filter([Action.SAVEPOINT], [State.COMPLETED])}


def cleaned_before(timeline: Timeline) -> str | None:
    """The earliest instant whose snapshot is whole after every clean (None: no clean).

    Pending cleans count: one killed midway has deleted some of its planned files already, so its
    plan's boundary holds as if it had completed. A clean that recorded no boundary (Hudi's
    KEEP_LATEST_FILE_VERSIONS) counts as keeping only the newest commit it saw."""
    cleans = timeline.filter([Action.CLEAN])
    timeline.prefetch_documents(cleans)  # on an object store, at once (or from the digest) the first time
    bounds = [_clean_boundary(timeline, inst) for inst in cleans]
    return max(filter(None, bounds), default=None)


def _clean_boundary(timeline: Timeline, inst: Instant) -> str | None:
    if inst.is_completed:
        doc = documents.decode(timeline.document(inst), f"clean {inst.time}")
        return doc.get("earliestCommitToRetain") or doc.get("lastCompletedCommitTimestamp") or None
    plan = pending_clean_plan(timeline, inst) or {}
    retain = (plan.get("earliestInstantToRetain") or {}).get("timestamp")
    if retain:
        return cast("str | None", retain)
    before = [w.time for w in timeline.completed_writes() if w.time < inst.time]
    return before[-1] if before else None


def pending_clean_plan(timeline: Timeline, inst: Instant) -> dict[str, Any] | None:
    """The cleaner plan of a pending clean: in its `.clean.requested` file (also in `.inflight`,
    which Hudi may leave empty); None when neither holds one."""
    for state in (State.REQUESTED, State.INFLIGHT):
        path = timeline.path(inst.with_state(state))
        data = timeline.storage.read_bytes(path) if timeline.storage.exists(path) else b""
        if data:
            return documents.decode(data, f"clean plan {inst.time} ({path})")
    return None


def cleaned_boundary_past(timeline: Timeline, as_of: str | None) -> str | None:
    """The earliest whole snapshot when `as_of`'s lies before it (its files cleaned; savepoints
    excepted), else None."""
    if as_of is None:
        return None
    boundary = cleaned_before(timeline)
    if boundary is not None and as_of < boundary and as_of not in savepoint_times(timeline):
        return boundary
    return None


def check_readable(timeline: Timeline, as_of: str | None, what: str) -> None:
    """Raise InstantTimeError when `as_of` lies before the table's first write (nothing was there
    to read: an empty answer would look like an empty table), CleanedInstantError when it lies
    before the retained window (savepoints excepted)."""
    writes = timeline.completed_writes()
    if as_of is not None and writes and as_of < writes[0].time:
        raise InstantTimeError(
            f"{what} {as_of} is before the table's first instant, {writes[0].time} (instant times are "
            "wall-clock times in the table's hoodie.table.timeline.timezone): the table did not exist yet"
        )
    boundary = cleaned_boundary_past(timeline, as_of)
    if boundary is not None:
        raise CleanedInstantError(
            f"{what} {as_of} is before the cleaner's retained window (earliest whole snapshot: {boundary}); "
            "its files were deleted. Read from a later instant, or savepoint instants you need to keep"
        )

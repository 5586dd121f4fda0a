"""What the timeline retains: the cleaner's boundary and the savepoints that outlive it.

Read-only queries over completed clean and savepoint instants, shared by the services that change
retention (clean, archive, rollback, restore, savepoint) and by readers that must refuse instants
whose files are gone.
"""

from __future__ import annotations

from upsertlake.errors import CleanedInstantError, CorruptTableError
from upsertlake.timeline import documents
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import Action, State


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


def savepoint_times(timeline: Timeline) -> set[str]:
    return {i.time for i in timeline.filter([Action.SAVEPOINT], [State.COMPLETED])}


def cleaned_before(timeline: Timeline) -> str | None:
    """The earliest instant whose snapshot is whole after the latest completed clean (None: no clean)."""
    cleans = timeline.filter([Action.CLEAN], [State.COMPLETED])
    if not cleans:
        return None
    doc = documents.decode(timeline.document(cleans[-1]), f"clean {cleans[-1].time}")
    return doc["earliestCommitToRetain"] or None


def check_readable(timeline: Timeline, as_of: str | None, what: str) -> None:
    """Raise CleanedInstantError when `as_of` lies before the retained window (savepoints excepted)."""
    if as_of is None:
        return
    boundary = cleaned_before(timeline)
    if boundary is not None and as_of < boundary and as_of not in savepoint_times(timeline):
        raise CleanedInstantError(
            f"{what} {as_of} is before the cleaner's retained window (earliest whole snapshot: {boundary}); "
            "its files were deleted. Read from a later instant, or savepoint instants you need to keep"
        )

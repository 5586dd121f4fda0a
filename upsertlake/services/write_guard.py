"""The write guard: every write first checks that the table is fit to be written (`refuse_damaged_table`).

A write refuses damaged properties, an unreadable commit of the active timeline, and properties
that disagree with the table itself (the checksum cannot see lost lines: partition depth and
field names, key generator, fields absent from the schema), since it would otherwise spread the
damage or fail halfway. Its own room, apart from the diagnosis (`upsertlake.services.doctor`,
which reports the same disagreements), so that a write imports the guard alone.
"""

from __future__ import annotations

from upsertlake.config.table_config import TableConfig
from upsertlake.errors import CorruptTableError
from upsertlake.layout.properties_check import properties_disagreements
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import WRITE_ACTIONS, Action, Instant


def refuse_damaged_table(storage: Storage, table_config: TableConfig) -> None:
    """Raise CorruptTableError, naming the file, when a write would read a damaged file or use
    properties that are damaged or disagree with the table: it would otherwise spread the damage
    (files in the wrong folders, lost keys written away for good) or fail halfway."""
    if table_config.damage:
        raise CorruptTableError(table_config.damage)
    timeline = Timeline.load(storage)
    timeline.prefetch_documents(timeline.completed_writes())
    for inst in timeline.completed_writes():
        if inst not in timeline.archived:
            try:
                timeline.commit_metadata(inst)
            except CorruptTableError as exc:
                raise CorruptTableError(
                    f"{exc}. {what_it_breaks(inst)}; run `upsertlake doctor {storage.base}`"
                ) from exc
    problems = properties_disagreements(storage, table_config, timeline)
    if problems:
        raise CorruptTableError(
            f"{storage.full_path(table_config.source)} disagrees with the table: {'; '.join(problems)}. "
            "Every write is refused so that the damage cannot spread (reads proceed); "
            f"run `upsertlake doctor {storage.base}`"
        )


def what_it_breaks(inst: Instant) -> str:
    """What an unreadable instant file stops, and the way out."""
    if inst.action in WRITE_ACTIONS and inst.is_completed:
        return (
            "Every write and table service is refused, since they read the commits of the active timeline "
            "(record sizes, conflicts, clustering); snapshot reads still work, reads that need this commit's "
            "metadata (time travel to it, incremental reads over it) fail. upsertlake cannot rebuild the file: "
            "put back a good copy of it (completed commit files never change)"
        )
    if inst.action in WRITE_ACTIONS:
        return "a pending write whose plan cannot be read; rolling it back deletes its files and instant files"
    if inst.action is Action.COMPACTION:
        return (
            "`compact` can neither run this compaction plan nor plan another while it is pending: put back a good copy"
        )
    return f"the {inst.action.value} it records cannot be read"

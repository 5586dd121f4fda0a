"""Upgrade a table from version 6 (timeline layout 1) to 8 (layout 2, Apache Hudi 1.x), with the
steps of Hudi's `SixToSevenUpgradeHandler` / `SevenToEightUpgradeHandler`, ordered so that a crash
at any point leaves a table that opens, at version 6 or 8, with nothing lost:

1. under the table lock, roll back failed writes (pending writes whose heartbeat expired, as
   writers do); a write whose heartbeat is live makes the upgrade refuse;
2. drop the metadata table (upsertlake does not maintain one);
3. copy every active instant into `.hoodie/timeline/`, converted: a completed one named
   `<requested>_<completion>` (the completion time is the modification time of its file, as
   Hudi takes it), commit documents rewritten from JSON to Avro, a pending clustering named
   `clustering`. Version 6 readers do not look there, so a crash here changes nothing for them;
4. switch `hoodie.properties` to version 8 through `hoodie.properties.backup`
   (`write_properties`), adding the properties Hudi 1.0 adds (merge mode from the payload
   class, initial version 6, the key generator type beside its class, the timeline paths);
5. delete the old instant files from `.hoodie/` (version 8 readers do not look there).

A rerun finishes a half-done upgrade: at version 6 it redoes step 3 from scratch, at version 8 it
does step 5. Archived instants stay in `.hoodie/archived/` (upsertlake's own format, which Hudi
1.x readers skip; see the README).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone

from upsertlake.concurrency.heartbeat import HeartbeatPolicy, heartbeat_path
from upsertlake.concurrency.lock import TableLock
from upsertlake.config import Config
from upsertlake.config.properties_file import recover_properties, write_properties
from upsertlake.config.table_config import TableConfig
from upsertlake.errors import ConfigError, MergeOnReadError, ServiceError, UnsupportedTableError
from upsertlake.services.metadata_table import drop_metadata_table
from upsertlake.services.rollback import discard_pending
from upsertlake.storage import Storage
from upsertlake.timeline import documents
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.commit_metadata import AVRO_MAGIC, json_to_avro
from upsertlake.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from upsertlake.timeline.instant_time import format_instant_time
from upsertlake.timeline.layouts import LAYOUT_1, TimelineLayout, layout_of

log = logging.getLogger(__name__)

SUPPORTED_TARGETS = (8,)


@dataclass(frozen=True)
class UpgradeResult:
    """What an upgrade did: the versions, the failed writes it rolled back, the instants it moved."""

    from_version: int
    to_version: int
    rolled_back: tuple[str, ...] = ()
    instants_moved: int = 0
    old_files_deleted: int = 0


def upgrade(storage: Storage, lock: TableLock, cfg: Config, to: int = 8) -> UpgradeResult:
    """Upgrade the table to version `to` (8); a table already there is left as it is, except for
    the old instant files an interrupted upgrade left behind, which go."""
    if to not in SUPPORTED_TARGETS:
        raise ConfigError(f"cannot upgrade to table version {to}: upsertlake upgrades to version 8 only")
    with lock.hold():
        table = TableConfig.load(storage)
        start = table.table_version
        if start == to:
            recover_properties(storage)
            return UpgradeResult(start, to, old_files_deleted=_delete_layout_1_instants(storage))
        if start > to:
            raise ConfigError(f"the table is at version {start}; downgrading to {to} is not supported")
        if start != 6:
            raise UnsupportedTableError(f"upgrading table version {start} is not supported (6 -> 8 only)")
        table.check_writable()
        if table.is_merge_on_read:  # its log files are named by base instant, version 8's by deltacommit
            raise MergeOnReadError(
                f"upgrading merge-on-read table {table.name!r} to version 8 is not supported: its log files "
                "keep version 6 names; compact it, or keep it at version 6"
            )
        merge_mode = table.merge_mode_for_upgrade()  # refuse custom payloads before changing anything
        rolled_back = _discard_failed_writes(storage, cfg)
        table = drop_metadata_table(storage, table)
        target = table.as_version_8(merge_mode, initial_version=6)
        moved = _copy_converted_instants(storage, layout_of(target))
        changes: dict[str, str | None] = dict(target.to_properties())
        write_properties(storage, changes)
        deleted = _delete_layout_1_instants(storage)
    log.info("upgraded %s from table version %d to %d (%d instants)", storage.base, start, to, moved)
    return UpgradeResult(start, to, tuple(rolled_back), moved, deleted)


def _discard_failed_writes(storage: Storage, cfg: Config) -> list[str]:
    """Discard the pending writes whose heartbeat expired (a single writer beats none); refuse
    while one is alive: its files would land in the old layout after the switch."""
    timeline = Timeline.load(storage, LAYOUT_1)
    live = HeartbeatPolicy.of(cfg).live(storage, timeline)
    if live:
        raise ServiceError(
            f"write {live[0].time} is in progress (its heartbeat is live); the table was not "
            "upgraded: run the upgrade again once no write is running"
        )
    rolled: list[str] = []
    for inst in timeline.pending_writes():
        discard_pending(storage, inst)
        storage.delete(heartbeat_path(inst.time))
        rolled.append(inst.time)
    return rolled


def _copy_converted_instants(storage: Storage, layout: TimelineLayout) -> int:
    """Copy every instant file of `.hoodie/` into the layout 2 folder, converted (step 3).

    The folder is emptied first: what an earlier, interrupted upgrade copied may since have been
    rolled back by a version 6 writer, and nobody reads the folder before the switch.
    """
    for entry in storage.list(layout.folder):
        if not entry.is_dir:
            storage.delete(entry.path)
    storage.makedirs(f"{layout.folder}/history")
    mtimes = {e.name: e.mtime_ns for e in storage.list(LAYOUT_1.folder) if not e.is_dir}
    files = [(name, LAYOUT_1.parse(name)) for name in mtimes]
    instants = sorted((inst, name) for name, inst in files if inst is not None)
    pending_clustering = {inst.time for inst, name in instants if _is_pending_clustering(storage, inst, name)}
    for inst, name in instants:
        data = storage.read_bytes(f"{LAYOUT_1.folder}/{name}")
        converted = inst
        if inst.is_completed:
            completion = format_instant_time(datetime.fromtimestamp(mtimes[name] / 1e9, timezone.utc), layout.zone)
            converted = inst.with_state(State.COMPLETED, completion=max(completion, inst.time))
        elif inst.time in pending_clustering:
            converted = Instant(inst.time, inst.action, inst.state, clustering=True)
        if inst.action in WRITE_ACTIONS and data.strip() and not data.startswith(AVRO_MAGIC):
            data = json_to_avro(data, inst.action is Action.REPLACE_COMMIT, f"{LAYOUT_1.folder}/{name}")
        storage.write_bytes(layout.path(converted), data)
    return len({(i.time, i.action) for i, _ in instants})


def _is_pending_clustering(storage: Storage, inst: Instant, name: str) -> bool:
    """A pending replacecommit whose plan is a clustering (its requested file says CLUSTER)."""
    if inst.action is not Action.REPLACE_COMMIT or inst.state is not State.REQUESTED:
        return False
    data = storage.read_bytes(f"{LAYOUT_1.folder}/{name}")
    return bool(data) and documents.decode(data, name).get("operationType") == "CLUSTER"


def _delete_layout_1_instants(storage: Storage) -> int:
    """Remove the instant files left in `.hoodie/` (step 5), most advanced state first."""
    doomed = sorted(
        (
            (inst, e.path)
            for e in storage.list(LAYOUT_1.folder)
            if not e.is_dir
            for inst in [LAYOUT_1.parse(e.name)]
            if inst
        ),
        key=lambda pair: -pair[0].state.rank,
    )
    for _, path in doomed:
        storage.delete(path)
    return len(doomed)

"""Upgrading a table to version 8 (Hudi 1.0) or 9 (Hudi 1.1), and the one safe way back (9 to 8).

6 -> 8 and 6 -> 9 follow Hudi's `SixToSevenUpgradeHandler` / `SevenToEightUpgradeHandler` (and
`EightToNineUpgradeHandler` for 9), ordered so that a crash at any point leaves a table that
opens, at version 6 or the target, with nothing lost:

1. under the table lock, roll back failed writes (pending writes whose heartbeat expired, as
   writers do); a write whose heartbeat is live makes the upgrade refuse;
2. drop the metadata table (upsertlake does not maintain one);
3. copy every active instant into `.hoodie/timeline/`, converted: a completed one named
   `<requested>_<completion>` (the completion time is the modification time of its file, as
   Hudi takes it), commit documents rewritten from JSON to Avro, a pending clustering named
   `clustering`; then write every instant of version 6's archive log files into the LSM timeline
   (`.hoodie/timeline/history/`), as Hudi's upgradeToLSMTimeline does
   (`upsertlake.services.archive.archive_to_lsm`: completed at their entries'
   stateTransitionTime). Version 6 readers look at neither, so a crash here changes nothing for
   them; the archive log files stay, as Hudi leaves them;
4. switch `hoodie.properties` to the target through `hoodie.properties.backup`
   (`write_properties`), adding the properties Hudi 1.0 adds (merge mode from the payload
   class, initial version 6, the key generator type beside its class, the timeline paths) and,
   for 9, Hudi 1.1's (`TableConfig.as_version_9`: the ordering fields, the legacy payload class);
5. delete the old instant files from `.hoodie/` (version 8 and 9 readers do not look there).

A rerun finishes a half-done upgrade: at version 6 it redoes step 3 from scratch, at the target it
does step 5.

8 -> 9 keeps the timeline as it is (versions 8 and 9 write the same instants, commit documents and
log files): failed writes rolled back, the metadata table dropped, the index definitions given
their version (`.hoodie/.index_defs/index.json`, as Hudi's handler does), then the properties
switched. Hudi also compacts a merge-on-read table first; nothing in 9 needs it, so we do not.

9 -> 8 (Hudi's `NineToEightDowngradeHandler`) is the properties switched back, which is safe when
version 8 can say what 9 says: one ordering field (Hudi 1.0 compares one), a built-in merge mode,
no partial-update mode. 8 (or 9) -> 6 follows Hudi's `EightToSevenDowngradeHandler`, the upgrade's
steps backwards (`_down_to_6`), the archived timeline too (the LSM timeline's instants written into
version 6's archive log files); a merge-on-read table is refused (its log files are named by
deltacommit, which version 6 reads as other slices), as are the tables 9 -> 8 refuses. Anything
else is refused by name, the table untouched.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timezone

from upsertlake.concurrency.heartbeat import HeartbeatPolicy, heartbeat_path
from upsertlake.concurrency.lock import TableLock
from upsertlake.config import Config
from upsertlake.config.enums import MergeMode
from upsertlake.config.properties_file import recover_properties, write_properties
from upsertlake.config.table_config import (
    PARTIAL_UPDATE_KEY,
    WRITABLE_VERSIONS,
    TableConfig,
)
from upsertlake.errors import ConfigError, MergeOnReadError, ServiceError, UnsupportedTableError
from upsertlake.services.archive import archive_to_lsm, lsm_to_archive
from upsertlake.services.metadata_table import drop_metadata_table
from upsertlake.services.rollback import discard_pending
from upsertlake.storage import Storage
from upsertlake.timeline import documents
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.commit_metadata import AVRO_MAGIC, CommitMetadata, json_to_avro
from upsertlake.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from upsertlake.timeline.instant_time import format_instant_time
from upsertlake.timeline.layouts import LAYOUT_1, TimelineLayout, layout_of
from upsertlake.timeline.operation import CLUSTER_TYPE

log = logging.getLogger(__name__)

SUPPORTED_TARGETS = (8, 9)
INDEX_DEFINITIONS_KEY = "hoodie.table.index.defs.path"


@dataclass(frozen=True)
class UpgradeResult:
    """What an upgrade did: the versions, the failed writes it rolled back, the instants it moved."""

    from_version: int
    to_version: int
    rolled_back: tuple[str, ...] = ()
    instants_moved: int = 0
    old_files_deleted: int = 0
    archived_moved: int = 0  # archived instants written into the LSM timeline (from version 6)


def upgrade(storage: Storage, lock: TableLock, cfg: Config, to: int = 8) -> UpgradeResult:
    """Upgrade the table to version `to` (8 or 9), or downgrade it (9 -> 8, 8 or 9 -> 6) where that
    is safe; a table already there is left as it is, except for the old instant files an
    interrupted upgrade or downgrade left behind, which go."""
    if to not in SUPPORTED_TARGETS and to not in WRITABLE_VERSIONS:
        raise ConfigError(f"cannot upgrade to table version {to}: upsertlake upgrades to version 8 or 9")
    with lock.hold():
        table_config = TableConfig.load(storage)
        start = table_config.table_version
        if start > to:
            return _downgrade(storage, table_config, to, cfg)
        if start == to:
            recover_properties(storage)
            if to == 6:  # what a downgrade to 6 that died after the switch left in .hoodie/timeline/
                return UpgradeResult(start, to, old_files_deleted=_delete_layout_2_instants(storage))
            return UpgradeResult(start, to, old_files_deleted=_delete_layout_1_instants(storage))
        if to not in SUPPORTED_TARGETS:
            raise ConfigError(f"cannot upgrade to table version {to}: upsertlake upgrades to version 8 or 9")
        if start not in (6, 8):
            raise UnsupportedTableError(f"upgrading table version {start} is not supported (6 and 8 only)")
        table_config.check_writable()
        # its log files are named by base instant, 8's by deltacommit
        if start == 6 and table_config.is_merge_on_read:
            raise MergeOnReadError(
                f"upgrading merge-on-read table {table_config.name!r} to version {to} is not supported: its log files "
                "keep version 6 names; compact it, or keep it at version 6"
            )
        # refuse custom payloads before changing anything
        merge_mode = table_config.merge_mode_for_upgrade() if start == 6 else table_config.merge_mode
        rolled_back = _discard_failed_writes(storage, cfg)
        table_config = drop_metadata_table(storage, table_config)
        initial = int(table_config.extra.get("hoodie.table.initial.version", start))
        if to == 9:
            target = table_config.as_version_9(merge_mode, initial)
        else:
            target = table_config.as_version_8(merge_mode, initial)
        moved = _copy_converted_instants(storage, layout_of(target)) if start == 6 else 0
        archived = archive_to_lsm(storage, layout_of(table_config), layout_of(target), cfg) if start == 6 else 0
        if to == 9:
            _version_index_definitions(storage, table_config)
        write_properties(storage, _changes(table_config, target))
        deleted = _delete_layout_1_instants(storage)
    log.info("upgraded %s from table version %d to %d (%d instants)", storage.base, start, to, moved)
    return UpgradeResult(start, to, tuple(rolled_back), moved, deleted, archived)


def _changes(old: TableConfig, new: TableConfig) -> dict[str, str | None]:
    """hoodie.properties' changes from `old` to `new`: every key of `new`, None for those it drops."""
    props: dict[str, str | None] = dict(new.to_properties())
    props.update({key: None for key in old.to_properties() if key not in props})
    return props


def _downgrade(storage: Storage, table_config: TableConfig, to: int, cfg: Config) -> UpgradeResult:
    """9 -> 8 where version 8 says the same (`downgrade_blockers`); 8 or 9 -> 6 as Hudi's
    EightToSevenDowngradeHandler does (`_down_to_6`); else refused untouched."""
    blockers = downgrade_blockers(table_config, to)
    if blockers:
        raise ConfigError(
            f"the table is at version {table_config.table_version}; downgrading it to {to} is not safe: "
            + "; ".join(blockers) + " (the table was left as it is)"
        )
    table_config.check_writable()
    if to == 6:
        return _down_to_6(storage, table_config, cfg)
    table_config = drop_metadata_table(storage, table_config)
    write_properties(storage, _changes(table_config, table_config.down_to_version_8()))
    log.info("downgraded %s from table version %d to %d", storage.base, table_config.table_version, to)
    return UpgradeResult(table_config.table_version, to)


def _down_to_6(storage: Storage, table_config: TableConfig, cfg: Config) -> UpgradeResult:
    """8 (or 9, through 8) -> 6, the upgrade's steps backwards, so that a crash at any point leaves
    a table that opens at its version or at 6: failed writes rolled back and the metadata table
    dropped; every instant copied into `.hoodie/` (`_copy_to_layout_1`) and the LSM timeline's
    instants written into version 6's archive log files (`archive.lsm_to_archive`), neither of
    which a version 8 reader looks at; the properties switched (`TableConfig.down_to_version_6`);
    the layout 2 instant files deleted (a rerun at 6 finishes that). The LSM timeline's files
    stay, as Hudi leaves them."""
    start = table_config.table_version
    rolled_back = _discard_failed_writes(storage, cfg)
    table_config = drop_metadata_table(storage, table_config)
    layout = layout_of(table_config)
    _delete_layout_1_instants(storage)  # a downgrade that died copied them: version 8 writers may have gone on
    moved = _copy_to_layout_1(storage, layout)
    archived = lsm_to_archive(storage, layout, LAYOUT_1, cfg)
    at_8 = table_config.down_to_version_8() if start == 9 else table_config
    write_properties(storage, _changes(table_config, at_8.down_to_version_6()))
    deleted = _delete_layout_2_instants(storage, layout)
    log.info("downgraded %s from table version %d to 6 (%d instants)", storage.base, start, moved)
    return UpgradeResult(start, 6, tuple(rolled_back), moved, deleted, archived)


def downgrade_blockers(table_config: TableConfig, to: int) -> list[str]:
    """Why `table_config` cannot go down to version `to` (empty: it can)."""
    start = table_config.table_version
    if start not in (8, 9) or to not in (6, 8) or to >= start:
        return [f"no downgrade from {start} to {to} (upsertlake downgrades 9 -> 8, and 8 or 9 -> 6)"]
    out = []
    fields = table_config.ordering_fields
    if len(fields) > 1:
        hudi = "1.0" if to == 8 else "0.x"
        out.append(f"it orders records by {len(fields)} fields ({', '.join(fields)}), Hudi {hudi} compares one")
    stated = table_config.extra.get("hoodie.record.merge.mode", MergeMode.EVENT_TIME.value)
    if stated not in {m.value for m in MergeMode}:
        out.append(f"its merge mode {stated} is not a built-in one")
    if table_config.extra.get(PARTIAL_UPDATE_KEY, "NONE") != "NONE":
        out.append(f"{PARTIAL_UPDATE_KEY}={table_config.extra[PARTIAL_UPDATE_KEY]} has no version 8 form")
    if to == 6 and table_config.is_merge_on_read:
        # as the upgrade refuses one at 6: version 6 names log files by their base instant
        out.append("it is merge-on-read, and its log files are named by their deltacommits, which version 6 reads "
                   "as other slices (keep it at 8 or 9)")
    return out


def _version_index_definitions(storage: Storage, table_config: TableConfig) -> None:
    """Give each index definition without one the version "V1", as Hudi's EightToNineUpgradeHandler
    does (populateIndexVersionIfMissing); a table without index definitions has nothing to do."""
    rel = table_config.extra.get(INDEX_DEFINITIONS_KEY)
    if not rel or not storage.exists(rel):
        return
    doc = json.loads(storage.read_bytes(rel))
    definitions = doc.get("indexDefinitions") or {}
    if all(d.get("version") for d in definitions.values()):
        return
    for d in definitions.values():
        d.setdefault("version", "V1")
    storage.write_bytes(rel, json.dumps(doc, indent=2).encode())


def _discard_failed_writes(storage: Storage, cfg: Config) -> list[str]:
    """Discard the pending writes whose heartbeat expired (a single writer beats none); refuse
    while one is alive: its files would land in the old layout after the switch."""
    timeline = Timeline.load(storage)
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


def _copy_to_layout_1(storage: Storage, layout: TimelineLayout) -> int:
    """Copy every instant file of the layout 2 folder into `.hoodie/`, as version 6 names them
    (Hudi's EightToSevenDowngradeHandler): a completed one by its requested time alone, its commit
    document as JSON; a pending clustering as the replacecommit it is at 6. Completed instants
    are written in the order they completed, so their files' modification times, which version 6
    readers take for completion times, keep that order."""
    instants = [inst for e in storage.list(layout.folder) if not e.is_dir and (inst := layout.parse(e.name))]
    instants.sort(key=lambda i: (i.is_completed, i.completion or "", i))
    for inst in instants:
        data = storage.read_bytes(layout.path(inst))
        if inst.is_completed and inst.action in WRITE_ACTIONS and data.strip():
            data = CommitMetadata.from_bytes(data, layout.path(inst)).to_json_bytes()
        plain = Instant(inst.time, inst.action, inst.state)
        storage.write_bytes(LAYOUT_1.path(plain), data)
    return len({(i.time, i.action) for i in instants})


def _delete_layout_2_instants(storage: Storage, layout: TimelineLayout | None = None) -> int:
    """Remove the instant files of `.hoodie/timeline/` after a downgrade to 6 (version 6 readers
    do not look there); its history folder stays."""
    folder = layout.folder if layout is not None else f"{LAYOUT_1.folder}/timeline"
    doomed = [e.path for e in storage.list(folder) if not e.is_dir and Instant.from_file_name(e.name, 2)]
    for path in doomed:
        storage.delete(path)
    return len(doomed)


def _is_pending_clustering(storage: Storage, inst: Instant, name: str) -> bool:
    """A pending replacecommit whose plan is a clustering (its requested file says CLUSTER)."""
    if inst.action is not Action.REPLACE_COMMIT or inst.state is not State.REQUESTED:
        return False
    data = storage.read_bytes(f"{LAYOUT_1.folder}/{name}")
    return bool(data) and documents.decode(data, name).get("operationType") == CLUSTER_TYPE


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

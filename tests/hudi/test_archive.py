"""The archived timeline crosses over between Apache Hudi and upsertlake, with Hudi as the judge:
Hudi archives a table we share and we read its archive (version 6: Hudi 0.15's archive log
files, version 8: Hudi 1.1's LSM timeline); we archive on top of it and Hudi lists, reads and
archives on top of ours. Archived are commits, deltacommits, cleans, rollbacks, compactions and
replacecommits. After each archival both readers return the same rows for a snapshot, a time
travel to an archived instant and an incremental read from one (docs/DESIGN.md §5).
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import open_table, upgrade_table
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant import WRITE_ACTIONS, Action

from hudi_reference.tables import COMPACT_NOW, Layout, Row, assert_model, assert_rows, create_ours, make_row, write
from table_model import TableModel

pytestmark = pytest.mark.hudi

KEEP = {"hoodie.keep.min.commits": 2, "hoodie.keep.max.commits": 3}
EVERY_TIME = {"start_ts": "0" * 17, "end_ts": "9" * 17}  # show_archived_commits' default is 10 days ago to yesterday
HUDI_ARCHIVE = {"min_commits": 2, "max_commits": 3, "retain_commits": 1}
FALLBACK = "hoodie.datasource.read.incr.fallback.fulltablescan.enable"
NO_CLEAN = {"hoodie.clean.automatic": "false"}


class Shared:
    """A table Hudi and we write, with the model of its rows after each write."""

    def __init__(self, path: Path, layout: Layout, hudi) -> None:
        self.path, self.layout, self.hudi = path, layout, hudi
        self.rng = random.Random(f"{layout}")
        self.model = TableModel(event_time=layout.event_time)
        self.step = 0

    def upsert(self, actor: str, keys: range, extra: dict[str, str] | None = None) -> str:
        self.step += 1
        rows: list[Row] = [make_row(self.rng, k, self.step, self.step) for k in keys]
        data = pa.Table.from_pylist(rows, schema=self.layout.schema)
        # no automatic clean: the last clean's earliest commit to retain bounds both archivers, so
        # the test cleans where it means to
        write(actor, self.layout, self.path, "upsert", data, self.hudi, extra={**NO_CLEAN, **(extra or {})})
        self.model.upsert(rows)
        own = Action.DELTA_COMMIT if self.layout.merge_on_read else Action.COMMIT  # not an inline compaction's commit
        [done] = [i for i in open_table(self.path).timeline() if i.action is own and i.is_completed][-1:]
        self.model.committed(done.time, done.completed_at)
        return done.time

    def check(self, what: str) -> None:
        ours = open_table(self.path).read()
        assert_model(ours, self.model.rows, self.layout, f"{what}: ours")
        assert_rows(ours, self.hudi.snapshot(self.path), f"{what}: snapshot")

    def archived(self, actions: set[Action] | None = None) -> list[str]:
        """What our timeline holds archived, of `actions`."""
        if actions is None:
            actions = set(WRITE_ACTIONS)
        return sorted(i.time for i in Timeline.load(Storage(self.path)).archived if i.action in actions)

    def hudi_archived(self) -> list[str]:
        """The archived commits Hudi lists (its commits timeline: commits, deltacommits, replacecommits)."""
        return sorted(
            row[0]
            for row in self.hudi.call(
                self.path, "show_archived_commits", conf=self.layout.procedure_conf(), limit=1000, **EVERY_TIME
            )
        )

    def across_archived(self, what: str) -> None:
        """Time travel to the newest archived write and an incremental read from the oldest: both
        readers agree (and the model)."""
        timeline = Timeline.load(Storage(self.path))
        archived = sorted(i for i in timeline.archived if i.action in WRITE_ACTIONS)
        newest = archived[-1].completed_at  # version 8 travels by completion time
        as_of = open_table(self.path).read(as_of=newest)
        assert_model(as_of, self.model.as_of(newest), self.layout, f"{what}: ours as of {newest}")
        assert_rows(as_of, self.hudi.as_of(self.path, newest), f"{what}: as of archived {newest}")
        begin = archived[0].completed_at  # and reads increments by it
        ours = open_table(self.path).read_incremental(begin)
        then = self.model.as_of(begin)
        changed = {k for k, row in self.model.rows.items() if then.get(k) != row}
        assert {r["id"] for r in ours.select(["id"]).to_pylist()} == changed, f"{what}: incremental from {begin}"
        if self.layout.version >= 8:
            assert_rows(ours, self.hudi.incremental(self.path, begin), f"{what}: incremental from archived {begin}")
        elif not self.layout.merge_on_read:
            # Hudi 0.15 leaves archived commits out unless it falls back to a full table scan (README)
            options = {
                "hoodie.datasource.query.type": "incremental",
                "hoodie.datasource.read.begin.instanttime": begin,
                FALLBACK: "true",
            }
            assert_rows(
                ours, self.hudi.read(self.path, options), f"{what}: incremental (full scan) from archived {begin}"
            )


# each archived timeline format once (version 6's archive log files, 8's LSM timeline), each table type once
@pytest.mark.parametrize(
    ("version", "table_type"), [(6, "COPY_ON_WRITE"), (8, "MERGE_ON_READ")], ids=["6-cow", "8-mor"]
)
def test_each_reads_the_others_archived_timeline(
    tmp_path: Path, version: int, table_type: str, hudi_references
) -> None:
    hudi = hudi_references.for_table_version(version)
    t = Shared(tmp_path / "t", Layout(table_type, version, "SIMPLE", "one", all_types=False), hudi)
    create_ours(t.layout, t.path)

    # Hudi archives a history both wrote: commits, a rollback of ours, on merge-on-read a compaction of Hudi's
    for step in range(5):
        t.upsert("ours" if step % 2 else "hudi", range(step, step + 4))
    before = dict(t.model.rows), list(t.model.history)
    doomed = t.upsert("ours", range(20, 22))
    open_table(t.path).rollback(doomed)
    t.model.rows, t.model.history = before[0], before[1]
    if t.layout.merge_on_read:
        hudi.call(
            t.path, "run_compaction", conf=t.layout.procedure_conf(), op="scheduleAndExecute", options=COMPACT_NOW
        )
        [compaction] = [i.time for i in open_table(t.path).timeline() if i.action is Action.COMMIT]
    t.upsert("hudi", range(2, 5))
    t.upsert("ours", range(3, 6))
    commits = t.archived() + [i.time for i in open_table(t.path).timeline() if i.action in WRITE_ACTIONS]
    hudi.call(t.path, "archive_commits", conf=t.layout.procedure_conf(), **HUDI_ARCHIVE)
    hudis = t.hudi_archived()
    assert hudis and t.archived() == hudis and set(hudis) < set(commits)
    if t.layout.merge_on_read and compaction in hudis:
        assert Timeline.load(Storage(t.path)).get(compaction, Action.COMMIT) in Timeline.load(Storage(t.path)).archived
    t.check("after Hudi's archival")
    t.across_archived("Hudi's archive")

    # we archive on top of Hudi's archive; Hudi lists and reads ours
    for step in range(4):
        t.upsert("hudi" if step % 2 else "ours", range(10 + step, 13 + step))
    ours = open_table(t.path).archive(KEEP)
    assert ours and t.hudi_archived() == t.archived() == sorted(
        {*hudis, *(i.time for i in ours if i.action in WRITE_ACTIONS)}
    )
    t.check("after our archival")
    t.across_archived("our archive")

    # a replacecommit and a clean, archived by us once the clean is past the replacecommit
    t.upsert("ours", range(30, 36), {"hoodie.parquet.small.file.limit": "0"})  # new file groups beside the old
    assert open_table(t.path).cluster({"hoodie.clustering.plan.strategy.small.file.limit": 1 << 30}).clustered
    [replace] = [i.time for i in open_table(t.path).timeline() if i.action is Action.REPLACE_COMMIT]
    for step in range(2):
        t.upsert("hudi" if step % 2 else "ours", range(30 + step, 32 + step))
    hudi.call(t.path, "run_clean", conf=t.layout.procedure_conf(), retain_commits=1)
    clean = [i.time for i in open_table(t.path).timeline() if i.action is Action.CLEAN][-1]
    for step in range(2):
        t.upsert("ours" if step % 2 else "hudi", range(40 + step, 42 + step))
    open_table(t.path).archive(KEEP)
    # cleans go as Hudi 1.x's archiver lets them: the last clean's earliest commit to retain keeps it active
    assert replace in t.archived({Action.REPLACE_COMMIT}) and clean not in t.archived({Action.CLEAN})
    assert t.hudi_archived() == t.archived()
    t.check("after our archival of a replacecommit and a clean")

    # Hudi archives on top of ours, we read it, and both go on writing
    for step in range(3):
        t.upsert("ours" if step % 2 else "hudi", range(50 + step, 52 + step))
    archived = t.archived()
    hudi.call(t.path, "archive_commits", conf=t.layout.procedure_conf(), **HUDI_ARCHIVE)
    assert set(archived) < set(t.archived()) and t.hudi_archived() == t.archived()
    t.check("after Hudi's archival on top of ours")
    t.upsert("ours", range(3))
    t.upsert("hudi", range(1, 4))
    t.check("writes after every archival")


@pytest.mark.parametrize("to", [9])
def test_hudi_reads_the_archived_timeline_after_our_upgrade_and_downgrade(
    tmp_path: Path, to: int, hudi_references
) -> None:
    """A version 6 table we archived (Hudi 0.15's archive log files), upgraded: Hudi 1.1 lists
    the archived commits our LSM timeline holds, reads as of and incrementally from them as we do,
    and archives on top of them; downgraded to 6 again, Hudi 0.15 lists and reads them all."""
    layout = Layout("COPY_ON_WRITE", 6, "SIMPLE", "one", all_types=False)
    t = Shared(tmp_path / "t", layout, None)
    create_ours(layout, t.path)
    for step in range(6):
        t.upsert("ours", range(step, step + 3))
    archived = [i.time for i in open_table(t.path).archive(KEEP) if i.action in WRITE_ACTIONS]
    assert len(archived) == 4 and t.archived() == sorted(archived)
    assert upgrade_table(t.path, to).archived_moved == 4
    t.layout = Layout("COPY_ON_WRITE", to, "SIMPLE", "one", all_types=False)
    t.hudi = hudi_references.for_table_version(to)
    assert t.hudi_archived() == t.archived() == sorted(archived)
    t.check("after the upgrade")
    t.across_archived("the upgraded archive")
    for step in range(3):
        t.upsert("hudi", range(10 + step, 12 + step))
    t.hudi.call(t.path, "archive_commits", conf=t.layout.procedure_conf(), **HUDI_ARCHIVE)
    assert set(archived) < set(t.archived()) and t.hudi_archived() == t.archived()
    t.check("after Hudi's archival on top")
    # and back to 6: Hudi 0.15 lists the archive log file the LSM timeline went into, and reads
    everything = t.archived()
    assert upgrade_table(t.path, 6).archived_moved == len(everything) - len(archived)
    t.layout, t.hudi = layout, hudi_references.for_table_version(6)
    # version 6 has no completion times: a write is seen as of its requested time
    t.model.history = [(instant, instant, rows) for instant, _, rows in t.model.history]
    assert t.hudi_archived() == t.archived() == everything
    t.check("after the downgrade")
    t.across_archived("the downgraded archive")

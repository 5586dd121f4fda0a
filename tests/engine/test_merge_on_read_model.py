"""Merge-on-read tables against a model: seeded random sequences of upserts,
`_hoodie_is_deleted` rows, delete(), inserts of new and of deleted keys, keys written again after
a delete with a smaller ts than they had (late rows, plain and `_hoodie_is_deleted`), under a
global index keys moving between partitions, compactions (on demand and inline, at random
points), rollbacks of the latest deltacommit and cleans, all through the real write path, by
either merge mode (event time: larger `ts` wins, equal `ts` the later write, smaller loses;
commit time: the later write wins). After every step our snapshot is the model's state, and so is
the snapshot of a copy-on-write table fed the same writes; at the end time travel to every
completed write instant is the model's state then, the base files alone (read_optimized) hold the
snapshot after a final compaction, and Apache Hudi's reader (hudi-rs) reads the same as we do,
now and at every instant.

The model is copy-on-write's semantics (README, Semantics): a key not stored takes any record, a
stored one merges with it by the merge mode, a winning `_hoodie_is_deleted` row or delete()
removes it; under a global index a winning record for another partition moves the key.

Not compared with hudi-rs: incremental windows (it skips the base files of event-time tables,
see tests/engine/test_merge_on_read_writes.py), and v6 slices started by a pending compaction plan (it leaves them
out until the plan completes); the sequences leave no plan pending. `UPSERTLAKE_MOR_SEEDS=N`
runs N seeds of every index, merge mode and version (by hand: a few by default)."""

from __future__ import annotations

import os
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import create_table, open_table
from upsertlake.errors import CleanedInstantError
from upsertlake.layout.bucket_id import bucket_of
from upsertlake.logfile import LogFileName
from upsertlake.timeline.active import Timeline

from helpers import FAST_HEARTBEAT, hudi_read, kill_mid_compaction

COLUMNS = ["id", "ts", "v", "p"]
WRITES = ("deltacommit", "commit")
# steps every sequence takes: a compaction, an upsert appending to its new slices, its rollback
FORCED = {4: "delete", 5: "reinsert", 8: "upsert", 9: "compact", 10: "upsert", 11: "rollback"}
RETAINED = 3  # KEEP_LATEST_COMMITS: time travel reaches the 3 latest write instants at each clean


def mor_table(path: Path, version: int, **options: object):
    return create_table(
        path, "t", record_key="id", precombine_field="ts", partition_fields="p",
        table_type="MERGE_ON_READ", options={"hoodie.write.table.version": version, **options},
    )


def rows_of(
    keys: list[int], ts: list[int], tag: int, deleted: list[bool] | None = None, parts: list[str] | None = None
) -> pa.Table:
    """A batch: key kNNNN in partition p{N % 3} (or `parts`), `v` telling which step wrote it."""
    return pa.table({
        "id": pa.array([f"k{k:04d}" for k in keys], pa.string()),
        "ts": pa.array(ts, pa.int64()),
        "v": pa.array([float(k * 1000 + tag) for k in keys], pa.float64()),
        "p": pa.array(parts or [f"p{k % 3}" for k in keys], pa.string()),
        "_hoodie_is_deleted": pa.array(deleted or [False] * len(keys), pa.bool_()),
    })


def state(table: pa.Table, what: str = "") -> dict[str, tuple]:
    rows = table.select(COLUMNS).to_pylist()
    out = {r["id"]: (r["ts"], r["v"], r["p"]) for r in rows}
    assert len(out) == len(rows), (
        f"{what}: a key is read twice: {sorted(Counter(r['id'] for r in rows).most_common(2))}"
    )
    return out


@dataclass
class Model:
    """key -> (ts, v, p), as copy-on-write stores it; `high` is the largest ts ever written for a
    key, deletes included; `event_time`: the merge mode (else commit time)."""

    rows: dict[str, tuple] = field(default_factory=dict)
    high: dict[int, int] = field(default_factory=dict)
    deleted: set[int] = field(default_factory=set)
    event_time: bool = True

    def upsert(self, data: pa.Table) -> None:
        """Each record merges with the stored one: under event time a smaller ts loses (a
        delete's too; under a global index the key then stays in its partition); a winner
        replaces it (a global index moves the key to the record's partition) or, a
        `_hoodie_is_deleted` one, removes it. A key not stored takes any record."""
        for r in data.to_pylist():
            k = int(r["id"][1:])
            self.high[k] = max(self.high.get(k, r["ts"]), r["ts"])
            old = self.rows.get(r["id"])
            if old is not None and self.event_time and r["ts"] < old[0]:
                continue
            if r["_hoodie_is_deleted"]:
                if old is not None:
                    del self.rows[r["id"]]
                    self.deleted.add(k)
            else:
                self.rows[r["id"]] = (r["ts"], r["v"], r["p"])
                self.deleted.discard(k)

    def delete(self, data: pa.Table) -> None:
        for key in data["id"].to_pylist():
            if self.rows.pop(key, None) is not None:
                self.deleted.add(int(key[1:]))


def step_batch(
    rng: random.Random, model: Model, next_key: int, tag: int, op: str, moves: bool = False
) -> tuple[str, str, pa.Table, int]:
    """The next write (`op`: upsert, is_deleted, delete, insert or reinsert): what it is called,
    the table method, its batch (no key twice in a batch) and the next unused key. `moves`: a
    global index, so records may name another partition than their key's."""
    live = sorted(int(k[1:]) for k in model.rows)

    def parts(keys: list[int]) -> list[str] | None:
        if not moves:
            return None
        stored = [model.rows.get(f"k{k:04d}", (0, 0, f"p{k % 3}"))[2] for k in keys]
        return [rng.choice(["p0", "p1", "p2"]) if rng.random() < 0.3 else p for p in stored]

    if op == "insert" or not live or (op == "reinsert" and not model.deleted):
        keys = list(range(next_key, next_key + rng.randint(3, 8)))
        return "insert", "insert", rows_of(keys, [rng.randint(0, 5) for _ in keys], tag), next_key + len(keys)
    if op == "reinsert":
        keys = rng.sample(sorted(model.deleted), min(len(model.deleted), rng.randint(1, 3)))
        # late rows among them (the first one always, not a delete): below the ts the key had (a
        # delete's ordering value may stay in its slice's logs until compaction), which
        # copy-on-write inserts all the same
        ts = [model.high[k] - rng.randint(1, 3) if i == 0 else model.high[k] + rng.randint(-3, 1)
              for i, k in enumerate(keys)]
        deleted = [rng.random() < 0.25 and i > 0 for i in range(len(keys))]
        late = "late" if any(t < model.high[k] and not d for k, t, d in zip(keys, ts, deleted)) else "later"
        # `insert` skips the index (a key stored elsewhere would be stored twice): deleted keys only
        method = "insert" if not any(deleted) and rng.random() < 0.5 else "upsert"
        return f"reinsert:{method}:{late}", method, rows_of(keys, ts, tag, deleted, parts(keys)), next_key
    if op == "delete":
        keys = rng.sample(live, min(len(live), rng.randint(1, 3)))
        return "delete", "delete", rows_of(keys, [0] * len(keys), tag, None, parts(keys)), next_key
    if op == "is_deleted":
        keys = rng.sample(live, min(len(live), rng.randint(1, 3)))
        ts = [model.rows[f"k{k:04d}"][0] + rng.choice([-1, 0, 1]) for k in keys]  # -1 loses (event time)
        return "is_deleted", "upsert", rows_of(keys, ts, tag, [True] * len(keys), parts(keys)), next_key
    keys = rng.sample(live, min(len(live), rng.randint(2, 8)))
    # equal ts: the later write wins; smaller: the table's row stays (event time)
    ts = [model.rows[f"k{k:04d}"][0] + rng.choice([-1, 0, 0, 1, 2]) for k in keys]
    new = list(range(next_key, next_key + rng.randint(0, 2)))
    where = parts(keys)
    moved = where is not None and any(p != model.rows[f"k{k:04d}"][2] for k, p in zip(keys, where))
    label = "upsert:move" if moved else "upsert"
    new_parts = None if where is None else where + [f"p{k % 3}" for k in new]
    batch = rows_of(keys + new, ts + [1] * len(new), tag, None, new_parts)
    return label, "upsert", batch, next_key + len(new)


def hudi_state(path: Path, **read: str) -> dict[str, tuple]:
    theirs = hudi_read(path, **read)
    if theirs.num_columns == 0:  # hudi-rs returns no batches (and no schema) for nothing to read
        return {}
    return state(theirs)


@dataclass
class Run:
    """What a sequence did, for the end checks and for the test that asserts it was exercised."""

    at: dict[str, dict[str, tuple]]  # completed write instant -> the model's state then
    floor: str  # time travel before this instant is not kept by the cleans that ran
    ops: list[str]
    most_logs: int  # the most log files one slice had
    logs_by_compaction: bool  # some log was named by a compaction's instant (v6: its new slice)
    compactions: int

    def check_exercised(self, version: int) -> None:
        """The sequence did what it is for: several logs in a slice, appends after a compaction,
        a rollback of a deltacommit that followed a compaction, a deleted key written again."""
        assert self.most_logs >= 3, self.ops
        assert any(o == "compact" and any(a in ("upsert", "is_deleted", "delete") for a in self.ops[i + 1:])
                   for i, o in enumerate(self.ops)), self.ops
        assert "rollback:commit" in self.ops, self.ops
        assert any(o.startswith("reinsert") for o in self.ops), self.ops
        assert any(o.startswith("reinsert") and o.endswith(":late") for o in self.ops), self.ops
        assert self.logs_by_compaction == (version == 6)


class InProcess:
    """Writes through one Table (its write client and index kept between writes)."""

    def __init__(self, table) -> None:
        self.table = table

    def write(self, method: str, data: pa.Table) -> None:
        getattr(self.table, method)(data)

    def compact(self) -> bool:
        return self.table.compact().compacted


class OnSpark:
    """Writes and compactions through `upsertlake.spark` (appends and slices merged in tasks),
    with the writer's options (inline compaction, clean and archive settings) on every call."""

    def __init__(self, spark, path: Path, options: dict[str, object], writes: dict[str, object]) -> None:
        self.spark, self.path, self.options = spark, str(path), {k: str(v) for k, v in options.items()}
        self.writes = {**self.options, **writes}  # `writes`: options of the Spark writes only

    def write(self, method: str, data: pa.Table) -> None:
        import upsertlake.spark as uls

        getattr(uls, method)(self.spark.createDataFrame(data.to_pandas()), self.path, **self.writes)

    def compact(self) -> bool:
        import upsertlake.spark as uls

        return uls.compact(self.spark, self.path, **self.options).compacted


def run_sequence(
    path: Path, version: int, seed: int, steps: int, inline: bool, spark=None, spark_writes: dict | None = None,
    mode: str = "EVENT_TIME_ORDERING", **extra: object,
) -> Run:
    """`steps` random steps after a first upsert of 24 keys; rollbacks and cleans in process,
    writes and compactions through `spark` when given (`spark_writes`: more options for its writes).
    A copy-on-write table beside it (`<path>-cow`, no automatic clean) takes the same writes and
    rollbacks; `mode`: the merge mode; `extra`: more options of both (the index)."""
    options: dict[str, object] = {  # automatic cleans and archival too
        "hoodie.cleaner.commits.retained": RETAINED, "hoodie.keep.min.commits": 4, "hoodie.keep.max.commits": 5,
        "hoodie.record.merge.mode": mode, **extra}
    if inline:
        options.update({"hoodie.compact.inline": "true", "hoodie.compact.inline.max.delta.commits": 2})
    table = mor_table(path, version, **options)
    writer = InProcess(table) if spark is None else OnSpark(spark, path, options, spark_writes or {})
    twin_options = {"hoodie.write.table.version": version, "hoodie.record.merge.mode": mode,
                    "hoodie.clean.automatic": False, **extra}
    twin = create_table(path.with_name(f"{path.name}-cow"), "t", record_key="id", precombine_field="ts",
                        partition_fields="p", options=twin_options)
    moves = str(extra.get("hoodie.index.type", "")).startswith("GLOBAL_")
    rng = random.Random(seed * 100 + version)
    model = Model(event_time=mode == "EVENT_TIME_ORDERING")
    at: dict[str, dict[str, tuple]] = {}
    floor, ops, next_key = "0", [], 0
    most_logs, logs_by_compaction = 0, False

    cleans: set[str] = set()
    commits: set[str] = set()  # compactions (inline ones included)

    def record() -> None:
        """Every completed write instant not yet seen holds the model's current state; a new
        clean keeps time travel to the RETAINED latest writes (Hudi's earliest commit to retain)."""
        nonlocal floor
        timeline = open_table(path).timeline()
        for i in timeline:
            if i.is_completed and i.action.value in WRITES and i.time not in at:
                at[i.time] = dict(model.rows)
                if i.action.value == "commit":
                    commits.add(i.time)
        for c in (i for i in timeline if i.action.value == "clean" and i.time not in cleans):
            cleans.add(c.time)
            writes = [i.time for i in timeline if i.is_completed and i.action.value in WRITES and i.time < c.time]
            floor = max(floor, writes[-RETAINED])

    first = rows_of(list(range(24)), [rng.randint(0, 5) for _ in range(24)], 0)
    writer.write("upsert", first)
    twin.upsert(first)
    model.upsert(first)
    next_key = 24
    record()
    for step in range(1, steps + 1):
        writes = [i for i in table.timeline() if i.is_completed and i.action.value in WRITES]
        forced = FORCED.get(step)
        roll = rng.random() if forced is None else {"rollback": 0.0, "compact": 0.15}.get(forced, 0.9)
        # a rollback exposes the write before: refused (CleanedInstantError) once cleaned away
        if roll < 0.12 and writes[-1].action.value == "deltacommit" and len(writes) > 1 and writes[-2].time >= floor:
            gone = writes[-1].time
            table.rollback()
            twin.rollback()
            del at[gone]
            model.rows = dict(at[writes[-2].time])
            # the key sets follow the rows; `high` keeps what was written (deletes stay above it)
            model.deleted = {k for k in model.high if f"k{k:04d}" not in model.rows}
            ops.append(f"rollback:{writes[-2].action.value}")
        elif roll < 0.20:
            ops.append("compact" if writer.compact() else "compact:nothing")
        elif roll < 0.26:
            result = table.clean("KEEP_LATEST_COMMITS", RETAINED)
            ops.append("clean" if result.instant_time else "clean:nothing")
        else:
            op = forced or rng.choice(["upsert"] * 5 + ["is_deleted", "delete", "insert", "reinsert"])
            label, method, data, next_key = step_batch(rng, model, next_key, step, op, moves)
            if method == "delete":
                data = data.drop_columns(["_hoodie_is_deleted"])
                model.delete(data)
            else:
                model.upsert(data)
            writer.write(method, data)
            getattr(twin, method)(data)
            ops.append(label)
        record()
        logs = [LogFileName.parse(f.name) for f in path.rglob(".*.log.*") if ".hoodie" not in f.parts]
        bases: dict[str, str] = {}  # file id -> its newest base file's instant
        for f in path.rglob("*.parquet"):
            file_id, _, rest = f.name.partition("_")
            bases[file_id] = max(bases.get(file_id, ""), rest.rpartition("_")[2].removesuffix(".parquet"))
        # a slice's logs: v6 names them by its base instant, v8 by deltacommits after it
        per_slice = Counter(n.file_id for n in logs if n.instant >= bases.get(n.file_id, ""))
        most_logs = max([most_logs, *per_slice.values()])
        compactions = {i.time for i in table.timeline() if i.action.value == "commit"}
        logs_by_compaction |= any(n.instant in compactions for n in logs)
        what = f"seed {seed} step {step}: {ops}"
        assert state(open_table(path).read(), what) == model.rows, what
        assert state(twin.read(), f"copy-on-write, {what}") == model.rows, f"copy-on-write, {what}"
    return Run(at, floor, ops, most_logs, logs_by_compaction, len(commits))


def check_end(path: Path, run: Run) -> None:
    table = open_table(path)
    final = state(table.read())
    for t, expected in run.at.items():
        if t < run.floor:  # its older slices are cleaned: refused by name, not read wrong
            with pytest.raises(CleanedInstantError):
                table.read(as_of=t)
            continue
        assert state(table.read(as_of=t)) == expected, f"as of {t}"
        assert hudi_state(path, as_of=t) == expected, f"hudi as of {t}"
    assert hudi_state(path) == final, "hudi snapshot"
    table.compact()
    table = open_table(path)
    assert state(table.read()) == final
    assert state(table.read(query_type="read_optimized")) == final, "read_optimized after a final compaction"
    assert hudi_state(path) == final, "hudi snapshot after the final compaction"


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("version", [6, 8])
def test_random_mor_sequences_read_as_the_model(tmp_path: Path, version: int, seed: int) -> None:
    run = run_sequence(tmp_path / "t", version, seed, steps=30, inline=False)
    run.check_exercised(version)
    check_end(tmp_path / "t", run)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_merge_on_read_sequences_at_version_9_read_as_the_model(tmp_path: Path, seed: int) -> None:
    """The random sequence above (upserts, deletes, rollbacks, compactions, cleans, time travel) on
    a merge-on-read table at version 9: ours and hudi-rs's reads equal the model."""
    run = run_sequence(tmp_path / "t", 9, seed, steps=30, inline=False)
    run.check_exercised(9)
    check_end(tmp_path / "t", run)
    assert "hoodie.table.version=9" in (tmp_path / "t" / ".hoodie" / "hoodie.properties").read_text("latin-1")


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("version", [6, 8])
def test_random_mor_sequences_with_inline_compaction_read_as_the_model(tmp_path: Path, version: int, seed: int) -> None:
    run = run_sequence(tmp_path / "t", version, seed, steps=20, inline=True)
    assert run.compactions >= run.ops.count("compact") + 2, run.ops  # inline ones among them
    check_end(tmp_path / "t", run)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("version", [6, 8])
def test_random_mor_sequences_under_the_bucket_index_read_as_the_model(tmp_path: Path, version: int, seed: int) -> None:
    """The same random sequences with Hudi's bucket index (3 buckets a partition): new keys go to
    their bucket's log, rollbacks, compactions, cleans and time travel read as the model, in ours
    and in Hudi's reader, and every file group is a bucket's."""
    run = run_sequence(tmp_path / "t", version, seed, steps=30, inline=False,
                       **{"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": 3})
    assert {"compact", "upsert", "rollback", "delete", "reinsert"} <= {op.split(":")[0] for op in run.ops}, run.ops
    check_end(tmp_path / "t", run)
    groups = {
        f.name.lstrip(".").split("_")[0]
        for f in (tmp_path / "t").rglob("*")
        if f.is_file() and ".hoodie" not in f.parts and (f.name.endswith(".parquet") or ".log." in f.name)
    }
    assert groups and all(bucket_of(g) is not None and bucket_of(g) < 3 for g in groups), groups


MOR_SEEDS = int(os.environ.get("UPSERTLAKE_MOR_SEEDS", "0"))
INDEXES = ["GLOBAL_SIMPLE", "GLOBAL_BLOOM", "GLOBAL_INMEMORY", "SIMPLE", "BUCKET"]
MODES = ["EVENT_TIME_ORDERING", "COMMIT_TIME_ORDERING"]
# by default each global index under both merge modes, across both versions, and commit time under
# the others (event time runs above); UPSERTLAKE_MOR_SEEDS=N: every combination, N seeds each
CASES = [(i, m, v, s) for i in INDEXES for m in MODES for v in (6, 8) for s in range(1, MOR_SEEDS + 1)] or [
    ("GLOBAL_SIMPLE", MODES[0], 6, 1), ("GLOBAL_SIMPLE", MODES[1], 8, 1),
    ("GLOBAL_BLOOM", MODES[0], 8, 1), ("GLOBAL_BLOOM", MODES[1], 6, 1),
    ("GLOBAL_INMEMORY", MODES[0], 6, 1), ("GLOBAL_INMEMORY", MODES[1], 8, 1),
    ("SIMPLE", MODES[1], 6, 1), ("BUCKET", MODES[1], 8, 1),
]


@pytest.mark.parametrize(("index", "mode", "version", "seed"), CASES)
def test_random_mor_sequences_with_global_moves_late_rows_and_both_merge_modes_read_as_the_model(
    tmp_path: Path, index: str, mode: str, version: int, seed: int
) -> None:
    """The sequences under every index, keys moving between partitions under a global
    one, late rows after deletes, by either merge mode, compacted at random points (inline too
    for some): the model, copy-on-write fed the same writes, and hudi-rs agree with our reads."""
    extra: dict[str, object] = {"hoodie.index.type": index}
    if index == "BUCKET":
        extra["hoodie.bucket.index.num.buckets"] = 3
    run = run_sequence(tmp_path / "t", version, seed, steps=24, inline=(seed + version) % 2 == 1, mode=mode, **extra)
    if index.startswith("GLOBAL_"):
        assert "upsert:move" in run.ops, run.ops
    assert any(o.startswith("reinsert") and o.endswith(":late") for o in run.ops), run.ops
    check_end(tmp_path / "t", run)


def spark_state(spark, path: Path, **read: str) -> dict[str, tuple]:
    import upsertlake.spark as uls

    return state(
        pa.Table.from_pylist([r.asDict() for r in uls.read(spark, str(path), columns=COLUMNS, **read).collect()])
    )


@pytest.mark.spark
@pytest.mark.parametrize(("version", "inline", "small_batch_bytes", "index"), [
    (6, False, None, "SIMPLE"), (8, True, 0, "SIMPLE"), (6, True, 0, "BUCKET"), (8, False, None, "BUCKET")])
def test_a_random_mor_sequence_through_spark_reads_as_the_model(
    spark, tmp_path: Path, version: int, inline: bool, small_batch_bytes: int | None, index: str
) -> None:
    """The same kind of sequence, shorter, written by `upsertlake.spark` (appends in tasks, slices
    compacted in tasks): after every step the in-process read is the model's state; at the end
    Spark's read, time travel and hudi-rs agree with it, and read_optimized after a compaction.
    Small batches are tagged in one task (the default) or by the distributed jobs
    (upsertlake.small.batch.bytes=0), by the SIMPLE or the BUCKET index."""
    path = tmp_path / "t"
    writes = {} if small_batch_bytes is None else {"upsertlake.small.batch.bytes": small_batch_bytes}
    extra: dict[str, object] = {"hoodie.index.type": index}
    if index == "BUCKET":
        extra["hoodie.bucket.index.num.buckets"] = 3
    run = run_sequence(path, version, seed=1, steps=11, inline=inline, spark=spark, spark_writes=writes, **extra)
    assert "rollback:commit" in run.ops and any(o.startswith("reinsert") for o in run.ops), run.ops
    assert run.compactions >= run.ops.count("compact") + (2 if inline else 0), run.ops  # inline on Spark
    final = state(open_table(path).read())
    assert spark_state(spark, path) == final
    for t, expected in run.at.items():
        if t >= run.floor:
            assert spark_state(spark, path, as_of=t) == expected, f"spark as of {t}"
    check_end(path, run)
    assert spark_state(spark, path, query_type="read_optimized") == final



@pytest.mark.parametrize("version", [6, 8])
def test_kill_9_during_compaction_of_a_table_we_wrote(tmp_path: Path, version: int) -> None:
    """A compactor killed after writing one new base file of a table our writes built (several
    logs per slice, a rollback, deletes): every reader reads the table as before, the writes go on
    (v6 appends to the slice the pending plan starts) and the next compact finishes the plan."""
    import time

    path = tmp_path / "t"
    run = run_sequence(path, version, seed=4, steps=14, inline=False)
    if not any(".log." in f.name for f in path.rglob("*")) or run.ops[-1].startswith("compact"):
        open_table(path).upsert(rows_of([0, 1, 2], [99] * 3, 99))  # a log to compact
    before = state(open_table(path).read())
    kill_mid_compaction(path, FAST_HEARTBEAT)
    table = open_table(path)
    [pending] = Timeline.load(table.storage).pending_compactions()
    assert list(path.rglob(f"*_{pending.time}.parquet")), "the killed compactor wrote a base file"
    assert state(table.read()) == before == hudi_state(path)
    expected = dict(before)
    later = rows_of([3, 4], [99, 99], 100)
    table.upsert(later)  # a writer goes on while the plan is pending
    expected.update({r["id"]: (r["ts"], r["v"], r["p"]) for r in later.to_pylist()})
    assert state(open_table(path).read()) == expected
    time.sleep(0.3)  # the dead compactor's heartbeat expires
    result = open_table(path, {"hoodie.client.heartbeat.interval_in_ms": 100,
                               "hoodie.client.heartbeat.tolerable.misses": 1}).compact()
    assert result.recovered and result.instant_time == pending.time
    table = open_table(path)
    assert not Timeline.load(table.storage).pending_compactions()
    assert state(table.read()) == expected == hudi_state(path)
    table.compact()  # the append made beside the plan, folded too
    assert state(open_table(path).read(query_type="read_optimized")) == expected


@pytest.mark.parametrize("version", [6, 8])
def test_a_record_written_after_delete_with_a_smaller_ts_reads_as_copy_on_write_writes_it(
    tmp_path: Path, version: int
) -> None:
    """delete() writes a plain (natural-order) delete; a later upsert of the key with a smaller
    ts than its base row's read as the base row (Hudi merges the log first, the record replaces
    the delete, then the base row wins by event time), in hudi-rs and in ours, and compaction
    wrote it. The key is gone from its slice, so the record is an insert, into another
    file group: both readers read it, as copy-on-write writes it, before and after compaction."""
    path = tmp_path / "t"
    table = mor_table(path, version)
    table.upsert(rows_of([0, 1, 2], [5, 5, 5], 0))
    table.delete(rows_of([0, 1], [0, 0], 1).drop_columns(["_hoodie_is_deleted"]))
    table.upsert(rows_of([0], [3], 2))  # smaller than the base row's 5
    table.upsert(rows_of([1], [7], 3))  # larger: the new row
    expected = {"k0000": (3, 2.0, "p0"), "k0001": (7, 1003.0, "p1"), "k0002": (5, 2000.0, "p2")}
    assert state(open_table(path).read()) == expected == hudi_state(path)
    open_table(path).compact()
    assert state(open_table(path).read(query_type="read_optimized")) == expected == hudi_state(path)

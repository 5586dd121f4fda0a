"""The conflict simulator: N writer processes against one table, optionally killed at random
moments, then the table is checked against the invariants of optimistic concurrency.

Keys: each writer owns a partition (`w<i>`) of private keys; a shared partition (`shared`) holds
keys every writer may touch. `overlap` is the share of each batch drawn from the shared keys, so
0.0 gives writes on disjoint file groups (which must all commit) and 1.0 gives maximal contention.
With `disjoint_keys` each writer draws only its own keys of the shared partition (key number ≡
writer mod writers): writes share file groups but never a record, so none may conflict; they
exercise the re-merge of groups another commit rewrote.
Every attempt journals its batch before committing and its outcome after (outside the table), and
names its batch in the commit's extraMetadata, so the checker replays exactly the writes that
committed (a re-merge may move a write to a new instant).
On a merge-on-read table the writers append log files and compact inline every
`MOR_COMPACT_EVERY` deltacommits (kills land in compactions too); the table is checked as the
writers left it, and again after the plans killed compactors left and a last compaction ran.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import signal
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from upsertlake.concurrency.lock import FLOCK_PROVIDER, STORAGE_PROVIDER
from upsertlake.config.enums import TableType
from upsertlake.errors import ConfigError, TableExistsError, WriteConflictError
from upsertlake.metadata.partitions import FOLDER as METADATA_FOLDER
from upsertlake.schema.columns import IS_DELETED
from upsertlake.simulation.invariants import BATCH_KEY, check_table
from upsertlake.simulation.kills import KillSwitch
from upsertlake.storage import Storage
from upsertlake.table.open import create_table, open_table
from upsertlake.timeline.active import Timeline
from upsertlake.util.humanize import human_duration

SEED_TIME = "seed"
MOR_COMPACT_EVERY = 3  # hoodie.compact.inline.max.delta.commits of a simulated merge-on-read table
METADATA_COMPACT_EVERY = 2  # hoodie.metadata.compact.max.delta.commits: metadata compactions happen often
KILL_WRITES_GUESS = 40  # storage writes of a first attempt, before any was counted
AFTER_METADATA_COMMIT = 1 << 30  # a kill armed past every write: lands after the metadata commit


@dataclass(frozen=True)
class SimulationConfig:
    table: str
    writers: int = 4
    commits: int = 10
    overlap: float = 0.2
    disjoint_keys: bool = False
    kill_rate: float = 0.0
    batch_size: int = 100
    keys_per_partition: int = 1000
    delete_share: float = 0.05
    lock_provider: str = ""  # "": the store's own (flock on a local disk, Hudi's storage-based lock on an object store)
    heartbeat_ms: int = 1000
    seed: int = 0
    table_version: int = 6
    table_type: TableType = TableType.COPY_ON_WRITE
    metadata: bool = False  # keep the metadata table with its record index (table version 8 or 9)
    storage_options: Mapping[str, str] = field(default_factory=dict)  # an object store's settings
    journal_dir: str = ""  # where the journal goes (a local folder); "": beside a local table

    @property
    def local(self) -> bool:
        return Storage(self.table).location.is_local

    @property
    def journal(self) -> Path:
        return Path(self.journal_dir or f"{self.table.rstrip('/')}.simulate")

    def write_options(self) -> dict[str, object]:
        lock = self.lock_provider or (FLOCK_PROVIDER if self.local else STORAGE_PROVIDER)
        return {
            "hoodie.write.concurrency.mode": "OPTIMISTIC_CONCURRENCY_CONTROL",
            "hoodie.write.lock.provider": lock,
            # a killed writer's lease on the storage lock lapses after the shortest validity Hudi allows
            **({"hoodie.write.lock.storage.validity.timeout.secs": 10,
                "hoodie.write.lock.storage.heartbeat.poll.secs": 1} if lock == STORAGE_PROVIDER else {}),
            "hoodie.client.heartbeat.interval_in_ms": self.heartbeat_ms,
            "hoodie.parquet.small.file.limit": 0,
            "hoodie.write.table.version": self.table_version,
            "hoodie.table.type": self.table_type.value,
            # the checker reads every commit's files: nothing is cleaned or archived
            **({"hoodie.compact.inline": "true", "hoodie.compact.inline.max.delta.commits": MOR_COMPACT_EVERY,
                "hoodie.clean.automatic": "false", "hoodie.archive.automatic": "false"}
               if self.table_type is TableType.MERGE_ON_READ else {}),
            **({"hoodie.metadata.enable": "true", "hoodie.metadata.record.index.enable": "true",
                "hoodie.metadata.compact.max.delta.commits": METADATA_COMPACT_EVERY}
               if self.metadata else {}),
        }


@dataclass
class Report:
    attempted: int = 0
    committed: int = 0
    committed_unacknowledged: int = 0  # killed after its commit became visible: it did commit
    conflicted: int = 0
    killed: int = 0
    failed: int = 0
    conflicts_on_records: int = 0  # conflicts because both wrote one record key
    conflicts_on_file_groups: int = 0  # the rest: a retired or clustered group, re-merges exhausted
    remerged: int = 0  # acknowledged commits that merged file groups again (or moved instant)
    commit_seconds_plain: float = 0.0  # mean commit step of a commit without re-merge
    commit_seconds_remerged: float = 0.0  # mean commit step (re-merges included) of one with
    seconds: float = 0.0
    records_committed: int = 0
    final_rows: int = 0
    hudi_reader: str = "not checked"
    metadata_table: str = "not kept"  # consistent, inconsistent, or not kept (hoodie.properties lists none)
    killed_in_metadata: int = 0  # kills just before or after a write into .hoodie/metadata (or the next one)
    killed_after_metadata_commit: int = 0  # of those: its deltacommit completed, the data instant not yet
    metadata_compactions: int = 0  # metadata-table compactions the writers completed
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        out["commits_per_second"] = round(self.committed / self.seconds, 2) if self.seconds else 0.0
        out["records_per_second"] = round(self.records_committed / self.seconds, 1) if self.seconds else 0.0
        out["ok"] = self.ok
        return out


def run(config: SimulationConfig) -> Report:
    """Create the table, run the writers to completion (respawning killed ones), then check."""
    if not config.local and not config.journal_dir:
        raise ConfigError(f"the simulator keeps its journal on a local disk: name a folder for it ({config.table})")
    if Storage(config.table, config.storage_options).folder_exists("") or config.journal.exists():
        raise TableExistsError(f"the simulator creates its own table: {config.table} (or its journal) exists")
    config.journal.mkdir(parents=True)
    _seed(config)
    started = time.perf_counter()
    ctx = mp.get_context("spawn")
    running = {w: _spawn(ctx, config, w) for w in range(config.writers)}
    kills = 0
    while running:
        for w, proc in list(running.items()):
            proc.join(timeout=0.05)
            if proc.exitcode is None:
                continue
            del running[w]
            if proc.exitcode == -signal.SIGKILL:
                kills += 1
                if _attempts(config, w) < config.commits:
                    running[w] = _spawn(ctx, config, w)
            elif proc.exitcode != 0:
                raise RuntimeError(f"simulated writer {w} failed with exit code {proc.exitcode}")
    seconds = time.perf_counter() - started
    # Killed writers' instants are failed once their heartbeats expire: let them, then clean up.
    time.sleep(config.heartbeat_ms * 2.5 / 1000)
    table = open_table(config.table, config.write_options(), config.storage_options)
    table.write_client().rollback_failed_writes()
    checked = check_table(table.storage, config.journal, compactions_pending=True)
    # each run takes the oldest plan killed compactors left, then a new one
    if config.table_type is TableType.MERGE_ON_READ:
        while table.compact().instant_time is not None and Timeline.load(table.storage).pending_compactions():
            pass
        after = check_table(table.storage, config.journal)
        checked["violations"] += [f"after a last compaction: {v}" for v in after["violations"]]
        if str(checked["hudi_reader"]).startswith("not compared"):  # a plan was pending: compared after it ran
            checked["hudi_reader"] = after["hudi_reader"]
    return Report(
        **checked, **_commit_timings(config.journal), **_kill_journal(config.journal), killed=kills,
        seconds=round(seconds, 3),
    )


def _kill_journal(journal: Path) -> dict[str, Any]:
    """From the `kills-*` and `metadata-compactions-*` journals of the writers' kill switches."""
    kills = [line for f in sorted(journal.glob("kills-*.txt")) for line in f.read_text().splitlines()]
    done = [line for f in sorted(journal.glob("metadata-compactions-*.txt")) for line in f.read_text().splitlines()]
    return {
        "killed_in_metadata": sum(f" {METADATA_FOLDER}/" in line for line in kills),
        "killed_after_metadata_commit": sum(line.startswith(f"after {METADATA_FOLDER}/ completed") for line in kills),
        "metadata_compactions": len(done),
    }


def _commit_timings(journal: Path) -> dict[str, Any]:
    """From the `timings-*` journals: re-merged commits and the mean commit latency with and without."""
    lines = [line.split() for f in sorted(journal.glob("timings-*.txt")) for line in f.read_text().splitlines()]
    plain = [float(s) for n, s in lines if n == "0"]
    merged = [float(s) for n, s in lines if n != "0"]

    def mean(xs: list[float]) -> float:
        return round(sum(xs) / len(xs), 4) if xs else 0.0

    reasons = [line for f in sorted(journal.glob("conflict-reasons-*.txt")) for line in f.read_text().splitlines()]
    on_records = sum("both wrote the record key" in r for r in reasons)
    return {
        "conflicts_on_records": on_records,
        "conflicts_on_file_groups": len(reasons) - on_records,
        "remerged": len(merged),
        "commit_seconds_plain": mean(plain),
        "commit_seconds_remerged": mean(merged),
    }


def _seed(config: SimulationConfig) -> None:
    t = create_table(
        config.table, name="simulated", record_key="id", precombine_field="ts", partition_fields=["p"],
        options=config.write_options(), storage_options=config.storage_options,
    )
    parts = [f"w{w}" for w in range(config.writers)] + ["shared"]
    n = config.keys_per_partition // 2  # half the key space exists; the rest arrives as inserts
    batch = pa.table({
        "id": [f"{p}-{k:06d}" for p in parts for k in range(n)],
        "ts": pa.array([0] * (n * len(parts)), pa.int64()),
        "v": [SEED_TIME] * (n * len(parts)),
        "p": [p for p in parts for _ in range(n)],
        IS_DELETED: [False] * (n * len(parts)),
    })
    pq.write_table(batch, config.journal / f"batch-{SEED_TIME}.parquet")
    client = t.write_client()
    instant = client.start_commit()
    result = client.commit(instant, client.upsert(batch, instant), {BATCH_KEY: SEED_TIME})
    _append(config.journal / "acked-seed.txt", result.instant_time)


def _spawn(ctx: mp.context.SpawnContext, config: SimulationConfig, writer: int) -> mp.process.BaseProcess:
    proc = ctx.Process(target=_writer_main, args=(config, writer), name=f"writer-{writer}")
    proc.start()
    return proc


def _attempts(config: SimulationConfig, writer: int) -> int:
    path = config.journal / f"attempts-w{writer}.txt"
    return len(path.read_text().split()) if path.exists() else 0


def _append(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def _writer_main(config: SimulationConfig, writer: int) -> None:
    """One writer process: its remaining attempts, each journaled before and after the commit."""
    done = _attempts(config, writer)
    rng = random.Random(config.seed * 1_000_003 + writer * 10_007 + done)
    table = open_table(config.table, config.write_options(), config.storage_options)
    client = table.write_client()
    if done == 0:
        _start_together(config, writer)
    switch = KillSwitch(table.storage.base, config.journal, f"w{writer}")
    switch.install()
    # storage writes per attempt (all of them, those into the metadata table), learnt as we go:
    # kills land within an attempt; in metadata mode half of them count metadata-table writes alone,
    # and a third of those wait for the metadata commit: they land just after it, before the data's
    most = {False: KILL_WRITES_GUESS, True: KILL_WRITES_GUESS}
    for attempt in range(done, config.commits):
        _append(config.journal / f"attempts-w{writer}.txt", str(attempt))
        inside = config.metadata and rng.random() < 0.5
        at = None
        if rng.random() < config.kill_rate:
            at = AFTER_METADATA_COMMIT if inside and rng.random() < 1 / 3 else rng.randint(1, most[inside])
        switch.arm(at, inside, after=at is not None and rng.random() < 0.5)
        batch_id = f"w{writer}-{attempt}"
        # First: a later write's batch gets larger ordering values (a write that moves to a new
        # instant keeps its batch, so the checker merges by ordering value, as the table does).
        instant = client.start_commit()
        batch = _batch(config, writer, rng)
        pq.write_table(batch, config.journal / f"batch-{batch_id}.parquet")
        try:
            result = client.commit(instant, client.upsert(batch, instant), {BATCH_KEY: batch_id})
            _append(config.journal / f"acked-w{writer}.txt", result.instant_time)
            spent = result.stage_seconds.get("commit", 0.0) + result.stage_seconds.get("remerge", 0.0)
            _append(config.journal / f"timings-w{writer}.txt", f"{result.remerges} {spent:.6f}")
            if config.table_type is TableType.MERGE_ON_READ:
                table.services_after_commit()  # inline compaction, as a Table's write runs it
            switch.overdue()  # armed past the attempt's last write: killed once it is done
        except WriteConflictError as exc:
            _append(config.journal / f"conflicted-w{writer}.txt", batch_id)
            _append(config.journal / f"conflict-reasons-w{writer}.txt", f"{batch_id} {exc}")
        except Exception as exc:
            _append(config.journal / f"failed-w{writer}.txt", f"{instant} {type(exc).__name__}: {exc}")
            client.rollback(instant)
        most[inside] = max(most[inside], switch.writes())


def _start_together(config: SimulationConfig, writer: int, timeout: float = 60.0) -> None:
    """Wait until every writer has started (its process spawned, its table opened): on a busy
    machine the first could otherwise finish before the last begins, and they would never run
    side by side."""
    (config.journal / f"ready-w{writer}").touch()
    deadline = time.monotonic() + timeout
    while len(list(config.journal.glob("ready-w*"))) < config.writers and time.monotonic() < deadline:
        time.sleep(0.02)


def _batch(config: SimulationConfig, writer: int, rng: random.Random) -> pa.Table:
    """Distinct keys, `overlap` of them shared; ordering values that grow across processes."""
    n = config.batch_size
    shared = np.array([rng.random() < config.overlap for _ in range(n)])
    picks = rng.sample(range(config.keys_per_partition * 2), n)  # distinct (shared, private) draws
    parts = ["shared" if s else f"w{writer}" for s in shared]
    nums = [k % config.keys_per_partition for k in picks]
    if config.disjoint_keys:  # a shared key this writer owns: the draw moved to its residue
        owned = [k - k % config.writers + writer for k in nums]
        nums = [(o if o < config.keys_per_partition else o - config.writers) if s else k
                for k, o, s in zip(nums, owned, shared)]
    ids = [f"{p}-{k:06d}" for p, k in zip(parts, nums)]
    keep = list({i: j for j, i in enumerate(ids)}.values())  # a key drawn twice: keep one
    ts = time.time_ns()
    deleted = [rng.random() < config.delete_share for _ in keep]
    return pa.table({
        "id": [ids[j] for j in keep],
        "ts": pa.array([ts] * len(keep), pa.int64()),
        "v": [f"w{writer}-{ts}"] * len(keep),
        "p": [parts[j] for j in keep],
        IS_DELETED: deleted,
    })


def format_report(report: Report) -> str:
    data = report.to_json()
    lines = [
        (
            f"commits attempted {report.attempted}: committed {report.committed} "
            f"(+{report.committed_unacknowledged} killed after committing), conflicted {report.conflicted}, "
            f"killed {report.killed}, failed {report.failed}"
        ),
        (
            f"conflicts: {report.conflicts_on_records} on a record key, {report.conflicts_on_file_groups} on file "
            "groups; "
            f"re-merged {report.remerged} commits; mean commit step {human_duration(report.commit_seconds_plain)} "
            "plain, "
            f"{human_duration(report.commit_seconds_remerged)} with a re-merge"
        ),
        f"ran {human_duration(report.seconds)}: {data['commits_per_second']} commits/s, {data['records_per_second']} "
        "records/s",
        f"final snapshot: {report.final_rows} rows; Apache Hudi's reader: {report.hudi_reader}",
        f"metadata table: {report.metadata_table}; {report.killed_in_metadata} kills inside its writes "
        f"({report.killed_after_metadata_commit} after its commit, before the data instant's), "
        f"{report.metadata_compactions} compactions of it",
    ]
    lines += [f"VIOLATION: {v}" for v in report.violations] or ["invariants hold"]
    return "\n".join(lines)


def report_json(report: Report) -> str:
    return json.dumps(report.to_json(), indent=2)

"""Random interleavings of upserts and table services. Clean, cluster and savepoint never change the
snapshot; rollback returns the snapshot before the commit it undoes; restore returns the snapshot
at the savepoint. Apache Hudi's reader agrees at the end of every sequence."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from upsertlake import create_table, open_table
from upsertlake.errors import CleanedInstantError, ServiceError

from helpers import hudi_read

OPTS = {"hoodie.parquet.small.file.limit": 0, "hoodie.clean.automatic": False}
COLUMNS = ["_hoodie_commit_time", "_hoodie_record_key", "id", "ts", "v", "p"]

upsert = st.tuples(st.just("upsert"), st.lists(st.integers(0, 11), min_size=1, max_size=6, unique=True))
service = st.sampled_from(["clean_commits", "clean_versions", "cluster", "savepoint", "rollback", "restore"])
ops = st.lists(st.one_of(upsert, service), min_size=3, max_size=14)


def snap(path: Path) -> list[tuple]:
    if not open_table(path).schema():
        return []  # nothing committed yet: no columns to read
    return sorted(tuple(r.values()) for r in open_table(path).read(columns=COLUMNS).to_pylist())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
@example([("upsert", [0]), ("upsert", [0, 1, 2, 3]), "cluster", "savepoint", "restore"])  # savepoint at a replacecommit
def test_services_keep_the_snapshot(sequence: list) -> None:
    path = Path(tempfile.mkdtemp()) / "t"
    t = create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="p", options=OPTS)
    history: dict[str, list[tuple]] = {}  # commit or replacecommit time -> snapshot right after it
    savepoints: list[str] = []
    for step, op in enumerate(sequence):
        before = snap(path)
        clustered = None
        if isinstance(op, tuple):
            keys = op[1]
            r = t.upsert(pa.table({"id": [f"k{k:02d}" for k in keys], "ts": [step] * len(keys),
                                   "v": [f"s{step}"] * len(keys), "p": [f"p{k % 3}" for k in keys]}))
            history[r.instant_time] = snap(path)
            continue
        try:
            if op == "clean_commits":
                t.clean("KEEP_LATEST_COMMITS", 2)
            elif op == "clean_versions":
                t.clean("KEEP_LATEST_FILE_VERSIONS", 1)
            elif op == "cluster":
                clustered = t.cluster().instant_time
            elif op == "savepoint":
                savepoints.append(t.savepoint().time)
            elif op == "rollback":
                writes = [i.time for i in t.timeline() if i.action.value in ("commit", "replacecommit")]
                t.rollback()  # ServiceError when there is nothing to roll back
                undone = writes[-1]
                earlier = [c for c in history if c < undone]
                expected = history[earlier[-1]] if earlier else []
                assert snap(path) == expected, f"rollback of {undone}"
                history.pop(undone, None)
                continue
            elif op == "restore" and savepoints:
                target = savepoints[-1]
                t.restore(target)
                savepoints = [s for s in savepoints if s <= target]
                history = {c: s for c, s in history.items() if c <= target}
                assert snap(path) == history[target]
                continue
        except (ServiceError, CleanedInstantError):
            assert snap(path) == before  # a refused service changes nothing
            continue
        assert snap(path) == before, f"{op} changed the snapshot"
        if op == "cluster" and history:
            history[max(history)] = before  # time travel to the last commit still reads the same
        if clustered:
            history[clustered] = before  # a savepoint may now name the replacecommit
    expected = sorted((r[2], r[3], r[4], r[5]) for r in snap(path))
    theirs = hudi_read(path)
    got = (
        sorted(tuple(r.values()) for r in theirs.select(["id", "ts", "v", "p"]).to_pylist()) if theirs.num_rows else []
    )
    assert got == expected

"""Writers for concurrency tests: a small table (a, b in p1, c in p2), optimistic concurrency
clients with started uncommitted writes, snapshots as sorted tuples, and a writer process."""

from __future__ import annotations

import multiprocessing as mp
import threading
from pathlib import Path

import pyarrow as pa

from upsertlake import create_table, open_table
from upsertlake.config import Config
from upsertlake.storage import Storage
from upsertlake.timeline.instant import State

from helpers import hudi_read

OCC = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control"}


def rows(*recs: tuple[str, int, str, str]) -> pa.Table:
    ids, ts, vs, ps = zip(*recs)
    return pa.table({"id": list(ids), "ts": list(ts), "v": list(vs), "p": list(ps)})


def snap(path: Path) -> list[tuple]:
    t = open_table(path).read(columns=["id", "ts", "v", "p"])
    return sorted(tuple(r.values()) for r in t.to_pylist())


def make(path: Path, options: dict | None = None, small_file_limit: int = 0) -> None:
    """A table with a, b in p1 and c in p2 (one file group each); no small-file packing by default."""
    opts = dict(OCC, **(options or {}))
    opts["hoodie.parquet.small.file.limit"] = small_file_limit
    t = create_table(path, name="t", record_key="id", precombine_field="ts", partition_fields=["p"], options=opts)
    t.upsert(rows(("a", 1, "a1", "p1"), ("b", 1, "b1", "p1"), ("c", 1, "c1", "p2")))


def writer(path: Path, options: dict | None = None, small_file_limit: int = 0):
    opts = dict(OCC, **(options or {}))
    opts["hoodie.parquet.small.file.limit"] = small_file_limit
    return open_table(path, opts).write_client()


def started(path: Path, data: pa.Table, **kw):
    """A client with a started, written, uncommitted upsert of `data`."""
    c = writer(path, **kw)
    t = c.start_commit()
    return c, t, c.upsert(data, t)


def assert_clean(path: Path) -> None:
    """Nothing pending, no markers, and every base file belongs to a completed instant."""
    timeline = open_table(path).timeline()
    assert [i for i in timeline if i.state is not State.COMPLETED] == []
    done = {i.time for i in timeline}
    files = [f for f in path.rglob("*.parquet")]
    assert all(f.stem.rsplit("_", 1)[1] in done for f in files), files
    assert not (path / ".hoodie" / ".temp").exists() or not any((path / ".hoodie" / ".temp").iterdir())


def hudi_snap(path: Path) -> list[tuple]:
    return sorted(tuple(r.values()) for r in hudi_read(path).select(["id", "ts", "v", "p"]).to_pylist())


def concurrent_writer(path: str, n: int, provider: str, part: str, out: mp.Queue) -> None:
    """A process of its own: `n` upserts into partition `part`, their instants put on `out`."""
    t = open_table(path, dict(OCC, **{"hoodie.write.lock.provider": provider}))
    done = []
    for i in range(n):
        r = t.upsert(rows((f"{part}-{i}", 1, "v", part)))
        done.append(r.instant_time)
    out.put(done)


class CountingLock:
    """A user's own lock provider, named by its dotted class path (`concurrent_writers.CountingLock`)."""

    acquired = 0

    def __init__(self, storage: Storage, config: Config) -> None:
        self._lock = threading.Lock()

    def try_lock(self, timeout_ms: int) -> bool:
        CountingLock.acquired += 1
        return self._lock.acquire(timeout=timeout_ms / 1000)

    def unlock(self) -> None:
        self._lock.release()

    def describe_holder(self) -> str:
        return ""

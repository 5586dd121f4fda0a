"""What a new user meets in the first minutes: `--version`, durations as people read them, one
small-file threshold for `stats` and `cluster`, and the current snapshot's file list for engines
that read the folder themselves (`Table.files()`, `upsertlake files --current`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import upsertlake
from upsertlake.timeline.instant_time import parse_instant_time
from upsertlake.util.humanize import human_duration

from helpers import pyproject


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "upsertlake.cli", *map(str, args)], capture_output=True, text=True)


def ok(*args: str | Path) -> str:
    p = run(*args)
    assert p.returncode == 0, p.stderr
    return p.stdout


def batch(keys: range, ts: int, city: str = "sf") -> pa.Table:
    return pa.table({"id": [f"k{k:04d}" for k in keys], "ts": [ts] * len(keys), "city": [city] * len(keys),
                     "v": [f"v{ts}-{k}" for k in keys]})  # fmt: skip


def make(path: Path) -> upsertlake.Table:
    return upsertlake.create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="city")


# -- --version ------------------------------------------------------------------------------------
def test_version() -> None:
    p = run("--version")
    assert (p.returncode, p.stdout, p.stderr) == (0, f"upsertlake {upsertlake.__version__}\n", "")


# -- durations ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, ""), (0.0002, "< 1 ms"), (0.34, "340 ms"), (0.9996, "1.0 s"), (1.0, "1.0 s"), (26.856, "26.9 s"),
     (59.96, "1 min"), (63.2, "1 min 3 s"), (3599.4, "59 min 59 s"), (3600, "1 h"), (7530, "2 h 6 min")],
)  # fmt: skip
def test_human_duration(seconds: float | None, text: str) -> None:
    assert human_duration(seconds) == text


def test_timeline_prints_durations_as_people_read_them(tmp_path: Path) -> None:
    """A savepoint that took 26.856 s reads "26.9 s"; JSON keeps the number."""
    path = tmp_path / "t"
    t = make(path)
    commit = t.upsert(batch(range(3), 1)).instant_time
    sp = t.savepoint().time
    for time, action, took in ((commit, "commit", 63.2), (sp, "savepoint", 26.856)):
        done = parse_instant_time(time).timestamp() + took
        os.utime(path / ".hoodie" / f"{time}.{action}", (done, done))
    rows = json.loads(ok("timeline", path, "--json"))
    assert [(r["action"], r["seconds"]) for r in rows] == [("commit", 63.2), ("savepoint", 26.856)]
    text = ok("timeline", path)
    assert "26.856" not in text and "63.2" not in text
    lines = {line.split()[1]: line for line in text.splitlines()[1:3]}
    assert lines["commit"].endswith("1 min 3 s") and lines["savepoint"].endswith("26.9 s")


# -- one small-file threshold --------------------------------------------------------------------
def test_stats_counts_as_small_what_cluster_merges(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = make(path)
    t.bulk_insert(batch(range(0, 2000), 1))  # one bigger file group
    t.bulk_insert(batch(range(2000, 2010), 1))  # two small ones
    t.bulk_insert(batch(range(2010, 2020), 1))
    sizes = sorted(f.stat().st_size for f in (path / "sf").glob("*.parquet"))
    limit = (sizes[1] + sizes[2]) // 2  # between the small ones and the big one

    info = json.loads(ok("stats", path, "--json"))
    reason = json.loads(
        ok("cluster", path, "--json", "--option", "hoodie.clustering.plan.strategy.target.file.max.bytes=1")
    )
    assert info["small_file_limit"] == 314572800  # Hudi's clustering default, not the writer's 100 MiB
    assert (
        f"small.file.limit={info['small_file_limit']} bytes" in reason["reason"] or "fit together" in reason["reason"]
    )

    option = f"hoodie.clustering.plan.strategy.small.file.limit={limit}"
    info = json.loads(ok("stats", path, "--json", "--option", option))
    assert info["small_file_limit"] == limit and info["partitions"][0]["small_files"] == 2
    done = json.loads(ok("cluster", path, "--json", "--option", option))
    assert sum(len(ids) for ids in done["replaced"].values()) == 2
    assert "what `upsertlake cluster` merges" in ok("stats", path, "--option", option)


# -- the current snapshot's files ------------------------------------------------------------------
def test_files_lists_the_snapshot_an_outside_engine_should_read(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = make(path)
    first = t.upsert(pa.concat_tables([batch(range(10), 1), batch(range(10, 20), 1, "nyc")])).instant_time
    t.upsert(batch(range(5), 2))  # a second version of the sf group
    t.upsert(batch(range(20, 25), 1, "nyc"))
    t.bulk_insert(batch(range(30, 33), 1, "nyc"))  # a second nyc group: the two are clustered below
    assert t.cluster().clustered
    expected = sorted(t.read(columns=["id", "v"]).to_pylist(), key=lambda r: r["id"])

    # Reading the folder as a whole sees every old version and the replaced groups:
    everything = ds.dataset(path, format="parquet", exclude_invalid_files=True, ignore_prefixes=[".hoodie"])
    assert everything.count_rows() > len(expected)

    current = t.files()
    assert all(Path(p).is_absolute() and Path(p).is_file() for p in current)
    got = pa.concat_tables([pq.read_table(p, columns=["id", "v"]) for p in current]).to_pylist()
    assert sorted(got, key=lambda r: r["id"]) == expected

    assert ok("files", path, "--current").split() == current
    assert json.loads(ok("files", path, "--current", "--json")) == current
    assert ok("files", path, "--current", "--partition", "sf").split() == t.files(filters=[("city", "=", "sf")])
    assert len(t.files(filters=[("city", "=", "sf")])) == 1

    old = t.files(as_of=first)
    assert ok("files", path, "--current", "--as-of", first).split() == old
    old_rows = pa.concat_tables([pq.read_table(p, columns=["id", "v"]) for p in old]).to_pylist()
    assert sorted(old_rows, key=lambda r: r["id"]) == sorted(
        t.read(columns=["id", "v"], as_of=first).to_pylist(), key=lambda r: r["id"]
    )


# -- extras --------------------------------------------------------------------------------------
def test_no_extra_downgrades_pandas() -> None:
    """`pip install '.[spark]'` (or any extra a user installs) must not replace an installed pandas 3
    by 2.x. The `test` extra is the exception: it pins what the suite runs with in CI's fresh venv."""
    project = pyproject()["project"]
    pins = [req for extra, reqs in project["optional-dependencies"].items() if extra != "test"
            for req in reqs if req.startswith("pandas")]
    assert pins and all("<" not in req for req in pins), pins

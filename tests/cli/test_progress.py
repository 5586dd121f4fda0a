"""Long work shows progress: a line per stage with its counts on a terminal (rich draws them on
stderr), nothing extra when stderr is not a terminal or with --quiet; in Python, a `Progress`
callback hears each stage, and the `upsertlake.progress` logger logs each when it starts and when
it ends."""

from __future__ import annotations

import logging
import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import upsertlake

STAGES = ["dedup", "tag", "profile", "write", "commit", "services"]


class Heard(upsertlake.Progress):
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def started(self, stage: str, total: int = 0) -> None:
        self.events.append(("started", stage, total))

    def advanced(self, stage: str, done: int) -> None:
        self.events.append(("advanced", stage, done))

    def ended(self, stage: str, seconds: float) -> None:
        self.events.append(("ended", stage))


def batch(n: int, partitions: int = 4) -> pa.Table:
    return pa.table({"id": [f"k{i}" for i in range(n)], "ts": [1] * n, "p": [f"p{i % partitions}" for i in range(n)]})


def test_a_callback_hears_every_stage_and_the_file_groups_written(tmp_path: Path) -> None:
    t = upsertlake.create_table(tmp_path / "t", "t", record_key="id", precombine_field="ts", partition_fields="p")
    heard = Heard()
    t.upsert(batch(100), progress=heard)
    assert [e[1] for e in heard.events if e[0] == "started"] == STAGES
    assert [e[1] for e in heard.events if e[0] == "ended"] == STAGES
    assert ("started", "write", 4) in heard.events  # four new file groups, one per partition
    assert [e[2] for e in heard.events if e[0] == "advanced"] == [1, 2, 3, 4]


def test_the_progress_logger_logs_each_stage_when_it_starts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    t = upsertlake.create_table(tmp_path / "t", "t", record_key="id", precombine_field="ts", partition_fields="p")
    with caplog.at_level(logging.INFO, logger="upsertlake.progress"):
        t.upsert(batch(10))
    lines = [r.getMessage() for r in caplog.records if r.name == "upsertlake.progress"]
    assert [re.sub(r" done in [\d.]+ s$", " done", line) for line in lines] == [
        line
        for s in STAGES
        for line in ((f"{s} started (4 file groups)" if s == "write" else f"{s} started"), f"{s} done")
    ]


def cli(args: list[object], terminal: bool) -> tuple[int, str, str]:
    """The command with stderr on a pseudo-terminal (or a pipe); its exit code, stdout, stderr."""
    cmd = [sys.executable, "-m", "upsertlake.cli", *map(str, args)]
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm"}
    if not terminal:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        return p.returncode, p.stdout, p.stderr
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain)
    reader.start()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=slave, env=env, text=True)
    os.close(slave)
    reader.join(timeout=30)
    os.close(master)
    return p.returncode, p.stdout, b"".join(chunks).decode(errors="replace")


@pytest.fixture
def upsert_args(tmp_path: Path) -> list[object]:
    t = upsertlake.create_table(tmp_path / "t", "t", record_key="id", precombine_field="ts", partition_fields="p")
    t.upsert(batch(1000))
    pq.write_table(batch(3000), tmp_path / "in.parquet")
    return ["upsert", tmp_path / "t", tmp_path / "in.parquet"]


def test_a_terminal_shows_a_line_per_stage_with_its_counts(upsert_args: list[object]) -> None:
    code, out, err = cli(upsert_args, terminal=True)
    assert code == 0 and out.startswith("upsert ")
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", err)  # rich's cursor moves and colours
    finals = {}
    for line in screen.replace("\r", "\n").splitlines():
        words = line.split()
        if words and words[0] in ["read", *STAGES]:
            finals[words[0]] = line  # the last state drawn of each stage's line
    assert list(finals) == ["read", *STAGES]
    assert re.search(r"3,000 rows, [\d.]+ [KM]iB", finals["read"]), finals["read"]
    assert "3,000 rows" in finals["dedup"]
    assert "4 file groups" in finals["write"]  # 1,000 stored keys in 4 groups, updated and inserted into
    assert all(re.search(r"\d:\d\d:\d\d\s*$", line) for line in finals.values()), finals  # each one's time


def test_nothing_extra_off_a_terminal_or_when_quiet(upsert_args: list[object]) -> None:
    code, out, err = cli(upsert_args, terminal=False)
    assert (code, err) == (0, "") and out.startswith("upsert ")
    code, out, err = cli([*upsert_args, "--quiet"], terminal=True)
    assert (code, err) == (0, "") and out.startswith("upsert ")


def test_verbose_logs_each_stage_as_it_starts(upsert_args: list[object]) -> None:
    _code, _, err = cli([*upsert_args, "-v"], terminal=False)
    logged = [line.split("upsertlake.progress: ")[1] for line in err.splitlines() if "upsertlake.progress: " in line]
    assert [line.split()[0] for line in logged] == [s for s in ["read", *STAGES] for _ in (0, 1)]
    assert [line.split()[1] for line in logged] == ["started", "done"] * (len(STAGES) + 1)

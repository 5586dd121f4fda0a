"""A reader that leaves early (`upsertlake show T | head -1`) ends the command quietly, as `git` or
`ls` do: the lines it read, nothing on stderr (no traceback, no `Exception ignored`), and the
status Python's note on SIGPIPE recommends (1), or 0 when every line was written before it left.

Real shell pipes, in the environment a user has: without PYTHONUNBUFFERED, so stdout is
block-buffered and a short output is written once, at the end.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import upsertlake

UPSERTLAKE = f"{shlex.quote(sys.executable)} -m upsertlake.cli"
ROWS = 20_000  # about 2 MB of JSON lines: more than the pipe and head's read can hold


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pipes") / "t"
    t = upsertlake.create_table(path, name="t", record_key="id", precombine_field="ts")
    t.upsert(pa.table({"id": [f"k{i:05d}" for i in range(ROWS)], "ts": range(ROWS), "v": ["x" * 40] * ROWS}))
    return path


def pipeline(script: str, cwd: Path) -> tuple[str, str, list[int]]:
    """stdout and stderr of a bash pipeline, and the status of each of its commands."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    p = subprocess.run(
        ["bash", "-c", f'{script}; echo "${{PIPESTATUS[@]}}" > status'], cwd=cwd, env=env,
        capture_output=True, text=True, timeout=300,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout, p.stderr, [int(s) for s in (cwd / "status").read_text().split()]


def test_show_into_head_prints_the_first_line_and_nothing_else(table: Path, tmp_path: Path) -> None:
    # show's few lines leave in one write, before head reads: every line was written, status 0
    out, err, status = pipeline(f"{UPSERTLAKE} show {shlex.quote(str(table))} | head -1", tmp_path)
    assert (out, err, status) == (f"table 't' at {table}\n", "", [0, 0])


def test_a_long_read_into_head_stops_quietly_with_status_1(table: Path, tmp_path: Path) -> None:
    # head leaves after its first read while rows are still coming: the next write breaks the pipe
    cmd = f"{UPSERTLAKE} read {shlex.quote(str(table))} --format ndjson --columns id,ts | head -1"
    out, err, status = pipeline(cmd, tmp_path)
    assert (out, err, status) == ('{"id": "k00000", "ts": 0}\n', "", [1, 0])


@pytest.mark.parametrize("command", ["show {table}", "--version", "--help"])
def test_a_reader_gone_before_the_output_ends_it_quietly(table: Path, tmp_path: Path, command: str) -> None:
    # the reader closes the pipe and only then is the command started: its one write, at the end
    # (after argparse's exit for --help), breaks the pipe; Python's exit flush would print
    # "Exception ignored ... BrokenPipeError" and end with status 120
    cmd = command.format(table=shlex.quote(str(table)))
    script = (
        f"(while [ ! -e closed ]; do sleep 0.01; done; exec {UPSERTLAKE} {cmd})"
        " | (exec 0<&-; touch closed; echo reader done)"
    )
    out, err, status = pipeline(script, tmp_path)
    assert (out, err, status) == ("reader done\n", "", [1, 0])

"""Every code block of the README and of the documentation (docs/) runs as written and prints what
its comments say.

A page's ```python and ```bash blocks run in order, in a folder of their own (the page's Python
blocks share one namespace; a shell block sees the files the ones before it made), with
`upsertlake` on the PATH as `pip install .` puts it there. A comment `# prints: TEXT` says that a
line of what the block prints is TEXT (`…` stands for anything: a time, a path); the lines are
looked for in order. Pages that use an object store run against the S3 test server (the
environment variables the page tells a reader to set, an empty bucket `lake`), pages that use
Spark on the tests' session. Blocks in other languages (```text, a tree of folders) are not code.

The README's two commands: the test command is the one `.ci/run` runs (so it runs, as written,
with every test); the demo command runs here, as written, in a copy of the repository.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from upsertlake.errors import UpsertlakeWarning

from helpers import REPO

ROOT = REPO
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
DEMO = "python3 -m venv .venv && . .venv/bin/activate && pip install . && upsertlake demo"
TESTS = "python3 -m venv .venv && . .venv/bin/activate && pip install -q '.[test]' && python -m pytest -q"
SKIP = re.compile(r"<!-- docs-test: not run here: (.+?) -->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    code: str
    not_run: str | None  # why, when another test runs it

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def prints(self) -> list[str]:
        return [m.group(1).strip() for m in re.finditer(r"#\s*prints:\s*(.*)$", self.code, re.M)]


def blocks(page: Path) -> list[Block]:
    lines = page.read_text("utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        skip = SKIP.match(lines[i - 1]) if i else None
        if m.group(1) in ("python", "bash"):
            out.append(
                Block(page, i + 1, m.group(1), "\n".join(lines[i + 1 : end]) + "\n", skip.group(1) if skip else None)
            )
        i = end + 1
    return out


def needs(page: Path) -> set[str]:
    code = "".join(b.code for b in blocks(page) if not b.not_run)
    return {
        n
        for n, words in (("spark", ("pyspark", "upsertlake.spark", "upsertlake ingest")), ("s3", ("s3://",)))
        if any(w in code for w in words)
    }


def check_prints(block: Block, output: str) -> None:
    """Each `# prints:` line is a line of the output, in order (`…` matches anything)."""
    lines = [line.rstrip() for line in output.splitlines()]
    at = 0
    for expected in block.prints:
        pattern = re.compile("".join(".*" if c == "…" else re.escape(c) for c in expected) + r"\Z")
        found = next((i for i in range(at, len(lines)) if pattern.match(lines[i])), None)
        assert found is not None, f"{block.where}: no line {expected!r} (after line {at}) in what it printed:\n{output}"
        at = found + 1


def shims(folder: Path) -> Path:
    """`upsertlake` (and `python`) on a PATH, as installing the package puts them there."""
    folder.mkdir()
    for name, target in (
        ("upsertlake", f'"{sys.executable}" -m upsertlake.cli'),
        ("python", f'"{sys.executable}"'),
        ("python3", f'"{sys.executable}"'),
    ):
        (folder / name).write_text(f'#!/bin/sh\nexec {target} "$@"\n')
        (folder / name).chmod(0o755)
    return folder


def page_params() -> list:
    out = []
    for page in PAGES:
        if not any(not b.not_run for b in blocks(page)):
            continue
        marks = [pytest.mark.spark, pytest.mark.slow] if "spark" in needs(page) else []
        out.append(pytest.param(page, marks=marks, id=str(page.relative_to(ROOT))))
    return out


@pytest.mark.parametrize("page", page_params())
def test_every_block_runs_as_written_and_prints_what_it_says(
    page: Path, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "PATH": f"{shims(tmp_path / 'bin')}:{os.environ['PATH']}",
        "TMPDIR": str(work),
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "100",
    }
    if "s3" in needs(page):
        s3 = request.getfixturevalue("s3_server")
        env.update(s3.env)
        if "lake" not in [b["Name"] for b in s3.client.list_buckets()["Buckets"]]:
            s3.client.create_bucket(Bucket="lake")
        for key in s3.keys("lake"):
            s3.client.delete_object(Bucket="lake", Key=key)
    if "spark" in needs(page):
        request.getfixturevalue("spark")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", None)
    namespace: dict[str, object] = {"__name__": "__main__"}
    for block in blocks(page):
        if block.not_run:
            continue
        if block.lang == "bash":
            p = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", block.code], cwd=work, capture_output=True, text=True, timeout=600
            )
            assert p.returncode == 0, f"{block.where} failed:\n{block.code}\n{p.stdout}\n{p.stderr}"
            check_prints(block, p.stdout)
            continue
        out = io.StringIO()
        with warnings.catch_warnings(), contextlib.redirect_stdout(out):
            warnings.simplefilter("error", UpsertlakeWarning)  # the examples mean what they do
            warnings.filterwarnings("error", category=DeprecationWarning, module="upsertlake")  # today's names
            exec(compile(block.code, block.where, "exec"), namespace)  # the page's own code
        check_prints(block, out.getvalue())


def test_the_readme_starts_with_the_two_commands() -> None:
    """The repository's contract: install and run the demo, install and run the tests; `.ci/run`
    runs the second exactly."""
    first = [b for b in blocks(README)][:2]
    assert [b.code.strip() for b in first] == [DEMO, TESTS]
    assert first[1].not_run and TESTS in (ROOT / ".ci" / "run").read_text()
    assert all(b.not_run is None for b in blocks(README)[2:])


def test_every_page_has_its_examples_run() -> None:
    """No page hides code from the runner: only the README's install commands are run elsewhere."""
    not_run = [b.where for page in PAGES for b in blocks(page) if b.not_run]
    assert not_run == ["README.md:" + str(b.line) for b in blocks(README)[:2]]
    assert sum(len(blocks(p)) for p in PAGES) >= 20


@pytest.mark.slow
def test_the_demo_command_runs_as_written(tmp_path: Path) -> None:
    """In a copy of the repository's files, a venv of its own, the package installed from PyPI's
    dependencies: the README's first command."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    clone = tmp_path / "clone"
    for name in tracked:
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    p = subprocess.run(
        ["bash", "-c", DEMO],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=900,
        env={"PATH": os.environ["PATH"], "HOME": str(Path.home()), "TMPDIR": str(tmp_path)},
    )
    assert p.returncode == 0, p.stderr[-3000:]
    demo = p.stdout[p.stdout.index("created table 'trips' at ") :]  # after pip's lines
    assert demo.startswith(f"created table 'trips' at {tmp_path}/upsertlake-demo-") and "\nrows now: 9\n" in demo

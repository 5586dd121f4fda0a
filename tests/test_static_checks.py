"""The code passes its static checks, configured in pyproject.toml: mypy in strict mode on the
package (every function typed, no implicit Any where types are known) and ruff's lint rules on the
package, the tests and the benchmarks. Each runs as its own process, as a developer runs it."""

from __future__ import annotations

import subprocess
import sys

from helpers import REPO


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=900)


def test_mypy_strict_finds_no_error_in_the_package() -> None:
    checked = run("mypy")  # [tool.mypy]: strict, files = upsertlake
    assert checked.returncode == 0, checked.stdout[-6000:] + checked.stderr[-2000:]
    assert checked.stdout.startswith("Success: no issues found")


def test_ruff_finds_nothing_to_lint() -> None:
    checked = run("ruff", "check", "--no-cache", "upsertlake", "tests", "benchmarks")
    assert checked.returncode == 0, checked.stdout[-6000:] + checked.stderr[-2000:]
    assert checked.stdout.strip() == "All checks passed!"

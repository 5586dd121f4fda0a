"""The package's imports run top-down, in no circle, reads import no write side, and the HFile
codec imports only errors and util: import-linter checks the contracts in pyproject.toml (the
layers, no cycle between the modules of any package, `TYPE_CHECKING` imports included, and the
read side's and the codec's forbidden imports)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from helpers import REPO


def lint(package_parent: Path) -> subprocess.CompletedProcess:
    """Run import-linter on the upsertlake package found under package_parent (no cache)."""
    code = ("import sys; from importlinter.cli import lint_imports; "
            f"sys.exit(lint_imports(config_filename={str(REPO / 'pyproject.toml')!r}, no_cache=True, no_logo=True))")
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run([sys.executable, "-c", code], cwd=package_parent, capture_output=True, text=True, env=env)


def test_layers_contract_is_kept():
    result = lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    """The check can fail: a copy of the package whose storage imports the engine is refused (both
    contracts: reads import storage, so through it the engine too)."""
    shutil.copytree(REPO / "upsertlake", tmp_path / "upsertlake", ignore=shutil.ignore_patterns("__pycache__"))
    storage = tmp_path / "upsertlake" / "storage" / "storage.py"
    storage.write_text(storage.read_text() + "\nfrom upsertlake.engine import write_client  # noqa\n")
    result = lint(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    # upward, it also closes a circle of packages, and reads import storage, so the engine too
    assert "1 kept, 3 broken" in result.stdout
    assert "upsertlake.storage.storage -> upsertlake.engine.write_client" in result.stdout


def test_an_import_circle_inside_a_package_breaks_the_contract(tmp_path):
    """A circle between two modules of one package is refused, also through a TYPE_CHECKING import
    (the engine's steps once imported the write client for its type)."""
    shutil.copytree(REPO / "upsertlake", tmp_path / "upsertlake", ignore=shutil.ignore_patterns("__pycache__"))
    commit = tmp_path / "upsertlake" / "engine" / "commit.py"
    commit.write_text(commit.read_text() + "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from upsertlake.engine.write_client import WriteClient  # noqa\n")
    result = lint(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "3 kept, 1 broken" in result.stdout
    assert "No cycles are allowed in upsertlake.engine" in result.stdout


def test_the_hfile_codec_importing_storage_breaks_its_contract(tmp_path):
    """The HFile codec reads files it is handed; it may not open them itself through storage
    (which its floor would allow)."""
    shutil.copytree(REPO / "upsertlake", tmp_path / "upsertlake", ignore=shutil.ignore_patterns("__pycache__"))
    reader = tmp_path / "upsertlake" / "hfile" / "reader.py"
    reader.write_text(reader.read_text() + "\nfrom upsertlake.storage import Storage  # noqa\n")
    result = lint(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "3 kept, 1 broken" in result.stdout
    assert "upsertlake.hfile.reader -> upsertlake.storage" in result.stdout

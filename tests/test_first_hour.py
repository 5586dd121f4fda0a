"""What a newcomer meets in the first hour, beyond the README's examples (tests/test_readme.py):
the README's test command runs every test (the test extra brings every library the tests and the
benchmark harness import, and no test skips itself for a missing one), and a write to a table that
does not exist yet says how to create it."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from helpers import pyproject

ROOT = Path(__file__).resolve().parents[1]
# Import names whose distribution is named otherwise, or that come with another one (moto[server]
# brings boto3 and werkzeug, mkdocs PyYAML).
DISTRIBUTIONS = {"yaml": "mkdocs", "boto3": "moto", "botocore": "moto", "werkzeug": "moto",
                 "importlinter": "import-linter", "packaging": "pytest"}
NEWER_STDLIB = {"tomllib"}  # imported from Python 3.11 on (tomli before): not a library to install


def third_party_imports(paths: list[Path]) -> set[str]:
    names = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "importorskip":
                names.add(node.args[0].value.split(".")[0])
    local = {p.stem for p in (ROOT / "tests").rglob("*.py")} | {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
    local |= {p.name for p in (ROOT / "tests").rglob("*") if p.is_dir()}
    return {n for n in names - local - {"upsertlake", "tests", "benchmarks", "__future__"}
            if n not in sys.stdlib_module_names | NEWER_STDLIB}


def test_the_test_extra_brings_every_library_the_tests_import() -> None:
    project = pyproject()["project"]
    required = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]
    def distribution(name: str) -> str:
        return canonicalize_name(DISTRIBUTIONS.get(name, name))

    used = third_party_imports(sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py")))
    assert sorted(n for n in used if distribution(n) not in {canonicalize_name(r.name) for r in required}) == []
    # Installed where this Python needs it (tomli only before 3.11, where tomllib came).
    here = {canonicalize_name(r.name) for r in required if r.marker is None or r.marker.evaluate()}
    assert all(importlib.util.find_spec(n) is not None for n in used if distribution(n) in here)


def test_no_test_skips_itself_for_a_missing_library() -> None:
    skipping = [
        f"{path.name}:{node.lineno}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", "") == "importorskip"
    ]
    assert skipping == []


def test_a_write_to_a_missing_table_says_to_create_it(tmp_path: Path) -> None:
    (tmp_path / "in.ndjson").write_text('{"id": "a", "ts": 1}\n')
    p = subprocess.run(
        [sys.executable, "-m", "upsertlake.cli", "upsert", str(tmp_path / "t"), str(tmp_path / "in.ndjson")],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2
    assert p.stderr == (
        f"error: TableNotFoundError: no Hudi table at {tmp_path / 't'} (missing .hoodie/hoodie.properties); "
        f"create it first: upsertlake create {tmp_path / 't'} --name NAME --record-key KEY "
        "[--precombine-field FIELD] [--partition-fields FIELDS] (or `upsertlake ingest`, which creates it)\n"
    )
    assert not (tmp_path / "t").exists()

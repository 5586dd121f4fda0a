"""The documentation site builds with `mkdocs build --strict` (no broken link, no missing page, no
docstring mkdocstrings cannot read), every page is in its navigation, the references are generated
from the code (every option of the registry, every command's help, the API's docstrings), and the
README's links point at pages that exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from upsertlake.cli import build_parser
from upsertlake.config import options as opt

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_strictly_with_generated_references(tmp_path: Path) -> None:
    site = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    assert "WARNING" not in p.stderr, p.stderr
    options = (site / "reference" / "options" / "index.html").read_text()
    assert all(f"<code>{key}</code>" in options for key in {o.key for o in opt.OPTIONS.values()})
    cli = (site / "reference" / "cli" / "index.html").read_text()
    commands = next(a for a in build_parser()._actions if hasattr(a, "choices") and isinstance(a.choices, dict)).choices
    assert all(f"usage: upsertlake {name}" in cli for name in commands)
    api = (site / "reference" / "api" / "index.html").read_text()
    for name in ("create_table", "open_table", "read_incremental", "to_batches", "Progress", "WriteResult"):
        assert name in api, name
    assert "InstantTimeError" in (site / "reference" / "errors" / "index.html").read_text()


def nav_pages(items: list) -> set[str]:
    out = set()
    for item in items:
        for value in item.values() if isinstance(item, dict) else [item]:
            out |= nav_pages(value) if isinstance(value, list) else {value}
    return out


def test_every_page_is_in_the_navigation() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert nav_pages(config["nav"]) == pages


def test_the_readme_links_to_pages_that_exist() -> None:
    links = re.findall(r"\]\(((?:docs/)[^)#]+)", (ROOT / "README.md").read_text())
    assert len(links) >= 15
    assert [link for link in links if not (ROOT / link).exists()] == []

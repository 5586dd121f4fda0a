"""Which allocator upsertlake makes pyarrow's default (`upsertlake.util.memory_pool`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

from upsertlake.util.memory_pool import huge_pages_mode, pool_to_use

BOTH = ["mimalloc", "jemalloc", "system"]


@pytest.mark.parametrize(
    ("backend", "huge_pages", "environ", "available", "expected"),
    [
        ("mimalloc", "madvise", {}, BOTH, "jemalloc"),
        ("mimalloc", "always", {}, BOTH, "jemalloc"),
        ("mimalloc", "never", {}, BOTH, None),  # no huge pages: nothing to avoid
        ("mimalloc", "madvise", {}, ["mimalloc", "system"], None),  # a build without jemalloc
        ("jemalloc", "madvise", {}, BOTH, None),  # not mimalloc already
        ("system", "always", {}, BOTH, None),
        ("mimalloc", "madvise", {"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}, BOTH, None),  # the user's choice
        ("mimalloc", "madvise", {"MIMALLOC_ALLOW_THP": "0"}, BOTH, None),  # mimalloc without huge pages
        ("mimalloc", "madvise", {"MIMALLOC_ALLOW_THP": "1"}, BOTH, "jemalloc"),
    ],
)
def test_pool_to_use(
    backend: str, huge_pages: str, environ: dict[str, str], available: list[str], expected: str | None
) -> None:
    assert pool_to_use(backend, huge_pages, environ, available) == expected


def test_huge_pages_mode_reads_the_bracketed_word(tmp_path) -> None:
    setting = tmp_path / "enabled"
    setting.write_text("always [madvise] never\n")
    assert huge_pages_mode(setting) == "madvise"
    setting.write_text("[always] madvise never\n")
    assert huge_pages_mode(setting) == "always"
    setting.write_text("always madvise [never]\n")
    assert huge_pages_mode(setting) == "never"
    assert huge_pages_mode(tmp_path / "missing") == "never"


@pytest.mark.parametrize("environ", [{}, {"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}])
def test_importing_upsertlake_sets_the_pool_it_chooses(environ: dict[str, str]) -> None:
    """Importing upsertlake after pyarrow makes the chosen pool the default of this machine."""
    env = {k: v for k, v in os.environ.items() if k not in ("ARROW_DEFAULT_MEMORY_POOL", "MIMALLOC_ALLOW_THP")}
    code = "import pyarrow as pa; before = pa.default_memory_pool().backend_name; import upsertlake; " \
           "print(before, pa.default_memory_pool().backend_name)"
    out = subprocess.run([sys.executable, "-c", code], env={**env, **environ}, capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    chosen = pool_to_use(out[0], huge_pages_mode(), environ, pa.supported_memory_backends())
    assert out == [out[0], chosen or out[0]]
    if environ:
        assert out == ["mimalloc", "mimalloc"]

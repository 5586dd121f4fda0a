"""Which allocator backs the process's Arrow buffers.

pyarrow's default allocator, mimalloc (version 3 in pyarrow 26), asks Linux for transparent huge
pages where the kernel offers them (`always` or `madvise` in
/sys/kernel/mm/transparent_hugepage/enabled). A read that fills hundreds of MB of fresh buffers
then waits on the kernel compacting memory into 2 MB pages and zeroing them: on a 2-core machine
a 4M-row snapshot's `to_arrow` spent 1.1-2.1 s in the kernel under mimalloc and 0.4-0.6 s under
pyarrow's jemalloc, its wall time 1.1-2.9 s against 0.7-1.0 s (benchmarks/results/reads.md).
So when the default is mimalloc and huge pages are on, upsertlake makes jemalloc the default
pool when it is imported. An explicit choice wins: `ARROW_DEFAULT_MEMORY_POOL` (pyarrow's own
setting, e.g. `mimalloc` to keep it), or `MIMALLOC_ALLOW_THP=0`, which takes the huge pages away
from mimalloc itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa

THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def huge_pages_mode(setting: Path = THP_SETTING) -> str:
    """The kernel's transparent huge page mode (the bracketed word: `always`, `madvise` or
    `never`); `never` where the kernel says nothing (not Linux, or no THP)."""
    try:
        text = setting.read_text()
    except OSError:
        return "never"
    chosen = [word[1:-1] for word in text.split() if word.startswith("[") and word.endswith("]")]
    return chosen[0] if chosen else "never"


def pool_to_use(default_backend: str, huge_pages: str, environ: Mapping[str, str], available: list[str]) -> str | None:
    """The backend to make the default pool, or None to leave pyarrow's choice alone."""
    if "ARROW_DEFAULT_MEMORY_POOL" in environ or environ.get("MIMALLOC_ALLOW_THP") == "0":
        return None
    if default_backend != "mimalloc" or huge_pages == "never" or "jemalloc" not in available:
        return None
    return "jemalloc"


def choose_memory_pool() -> None:
    """Make jemalloc pyarrow's default pool where mimalloc would back buffers with huge pages
    (`pool_to_use`); called once, when upsertlake is imported."""
    backend = pool_to_use(
        pa.default_memory_pool().backend_name, huge_pages_mode(), os.environ, pa.supported_memory_backends()
    )
    if backend == "jemalloc":
        pa.set_memory_pool(pa.jemalloc_memory_pool())

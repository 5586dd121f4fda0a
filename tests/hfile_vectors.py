"""The HFile test vectors (vectors/README.md says where each comes from) and the key and value
makers of Hudi's TestHFileReader."""

from __future__ import annotations

import functools
import hashlib
import zipfile
from pathlib import Path

VECTORS = Path(__file__).resolve().parent / "hfile" / "vectors"
HUDI_IO = VECTORS / "hudi_io_hfile.zip"
TRIPS = VECTORS / "hudi_rs_v8_trips_metadata.zip"
TRIPS_FILES = "files-0000-0_23-1133-3302_20251220210130942.hfile"
TRIPS_RECORD_INDEX = "record-index-0001-0_2-1133-3281_20251220210130942.hfile"
TRIPS_FILES_LOG = ".files-0000-0_20251220210108078.log.1_10-999-2838"

# Hudi's TestHFileReader
CUSTOM_META_KEY = "hudi_hfile_testing.custom_key"
CUSTOM_META_VALUE = b"hudi_custom_value"
DUMMY_BLOOM_FILTER = b"/////wAAABQBAAABID797Rg6cC9QEnS/mT3C01cdQGaLYH2jbOCLtMA0RWppEH1HQg=="
LARGE_KEY_PREFIX = "hudi-key-" + "a" * 100 + "-"


def key(i: int) -> str:
    return f"hudi-key-{i:09d}"


def key_with_suffix(i: int) -> str:
    return f"hudi-key-{i:09d}-abcdefghij"


def large_key(i: int) -> str:
    return f"{LARGE_KEY_PREFIX}{i:09d}"


def value(i: int) -> str:
    return f"hudi-value-{i:09d}"


@functools.cache
def _archive(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def hudi_io_names() -> list[str]:
    return sorted(_archive(HUDI_IO))


def vector(name: str) -> bytes:
    """A vector's bytes, by file name, from either archive."""
    for path in (HUDI_IO, TRIPS):
        files = _archive(path)
        if name in files:
            return files[name]
    raise KeyError(name)


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()

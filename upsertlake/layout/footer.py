"""The Hudi footer of a base file: bloom filter, its type, and the record key range.

Written into every base file whatever the index, so Hudi's bloom index (and ours) can use it.
Footers are immutable, so each file's (min, max, filter) is read once per process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, cast

import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.errors import CorruptTableError
from upsertlake.layout.bloom_filter import BloomFilter, StoredFilter, bloom_filter_for_keys
from upsertlake.layout.file_system_view import BaseFile
from upsertlake.storage import Storage


class BloomSettings(Protocol):
    """How a file's bloom filter is sized (the file writer's config has these)."""

    @property
    def bloom_num_entries(self) -> int: ...
    @property
    def bloom_fpp(self) -> float: ...
    @property
    def bloom_filter_type(self) -> str: ...
    @property
    def bloom_max_entries(self) -> int: ...

BLOOM_FILTER_KEY = "org.apache.hudi.bloomfilter"
BLOOM_TYPE_KEY = "hoodie_bloom_filter_type_code"
MIN_KEY = "hoodie_min_record_key"
MAX_KEY = "hoodie_max_record_key"


def footer_metadata(
    keys: pa.ChunkedArray | pa.Array,
    num_entries: int,
    fpp: float,
    filter_type: str,
    max_entries: int,
    bloom: BloomFilter | StoredFilter | None = None,
    key_range: tuple[str, str] | None = None,
) -> dict[str, str]:
    """The footer entries for a file holding `keys`, in file order (`bloom`, `key_range`: already
    known, see `resumed_key_range`)."""
    if bloom is None:
        bloom = bloom_filter_for_keys(keys, num_entries, fpp, filter_type, max_entries)
    meta = {BLOOM_FILTER_KEY: bloom.serialize(), BLOOM_TYPE_KEY: bloom.type_code}
    if key_range is None and len(keys):
        bounds = pc.min_max(keys)
        key_range = bounds["min"].as_py(), bounds["max"].as_py()
    if key_range is not None:
        meta[MIN_KEY], meta[MAX_KEY] = key_range
    return meta


def resumed_key_range(footer: dict[bytes, bytes], added_keys: pa.Array | pa.ChunkedArray) -> tuple[str, str] | None:
    """The key range of a new file version that keeps every old key and adds `added_keys`: the
    old footer's range widened by theirs, without a pass over the old keys (None when the old
    footer has no range). Strings compare as their UTF-8 bytes, as pc.min_max compares them."""
    lo, hi = footer.get(MIN_KEY.encode()), footer.get(MAX_KEY.encode())
    if lo is None or hi is None:
        return None
    low, high = lo.decode(), hi.decode()
    if len(added_keys):
        bounds = pc.min_max(added_keys)
        low, high = min(low, bounds["min"].as_py()), max(high, bounds["max"].as_py())
    return low, high


def resumed_bloom(
    footer: dict[bytes, bytes], n_old: int, inserted_keys: pa.Array | pa.ChunkedArray, config: BloomSettings
) -> BloomFilter | StoredFilter | None:
    """The old file's filter plus the inserted keys, for a new version that keeps every old key
    in place and appends them: hashing only the new keys gives the same bytes as a filter built
    from the whole file (with no new key, the old footer text itself). None without an old filter."""
    text = footer.get(BLOOM_FILTER_KEY.encode())
    if not text:
        return None
    params = (
        footer.get(BLOOM_TYPE_KEY.encode(), b"").decode(),
        n_old,
        config.bloom_num_entries,
        config.bloom_fpp,
        config.bloom_filter_type,
        config.bloom_max_entries,
    )
    if not len(inserted_keys) and (kept := BloomFilter.unchanged(text, *params)) is not None:
        return kept
    bloom = BloomFilter.resume(text, *params)
    if bloom is not None and len(inserted_keys):
        bloom.add_keys(inserted_keys)
    return bloom


@dataclass(frozen=True)
class Footer:
    min_key: str | None
    max_key: str | None
    bloom: BloomFilter | None


FOOTERS_KEPT = 4096  # parsed footers a storage keeps (a bloom filter of up to 430 KB each)


def read_footer(storage: Storage, bf: BaseFile) -> Footer:
    """The Hudi footer of a base file (kept by the storage: a file never changes under its name)."""
    cache = storage.cache("footers", FOOTERS_KEPT)
    cached = cache.get(bf.path)
    if cached is not None:
        return cast(Footer, cached)
    path = storage.full_path(bf.path)
    meta = storage.parquet_file(bf.path).metadata.metadata or {}
    try:
        text = meta.get(BLOOM_FILTER_KEY.encode())
        type_code = (meta.get(BLOOM_TYPE_KEY.encode()) or b"SIMPLE").decode()
        bloom = BloomFilter.deserialize(text, type_code) if text else None
    except Exception as exc:
        raise CorruptTableError(f"bloom filter footer of {path} cannot be read: {exc}") from exc
    lo, hi = meta.get(MIN_KEY.encode()), meta.get(MAX_KEY.encode())
    footer = Footer(lo.decode() if lo else None, hi.decode() if hi else None, bloom)
    cache.put(bf.path, footer)
    return footer

"""Key summaries: the record keys one write wrote in one file group, as 32-bit hashes.

The commit-time conflict check compares the keys of concurrent writes per record (issue 16). The
keys never travel to the writer: each bucket write stores, next to its data file, a sidecar
`.hoodie/.keys/<instant>/<partition>/<fileId>.keys` holding the sorted, distinct hashes of the keys
it updated, deleted and inserted. Hudi's readers never look there (it is neither an instant file
nor in extraMetadata); rollback, archive and clean delete it with its instant or file version.

A hash match only says "maybe the same key": the conflict check confirms it against the actual
keys (`written_keys`) before failing a write.

Format (little-endian): magic `ULKS`, version byte, then three sections (updated, deleted,
inserted), each an encoding byte, a uint32 count, a uint32 byte length and the payload: a sorted
uint32 array (4 bytes a key), or a portable roaring bitmap where that is smaller (from about half a
million keys on; about 2.5 bytes a key at a million).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyroaring

from upsertlake.errors import CorruptTableError
from upsertlake.layout.markers import key_summary_folder
from upsertlake.storage import Storage
from upsertlake.util.arrays import sorted_unique

MAGIC = b"ULKS"
VERSION = 1
RAW, ROARING = 0, 1
ROARING_MIN = 1 << 18  # below this a roaring bitmap of random hashes is never smaller
_SECTION = struct.Struct("<BII")
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
EMPTY = np.zeros(0, dtype=np.uint32)


def key_hashes(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A stable 32-bit hash of each key's UTF-8 bytes (FNV-1a 64, murmur3's finalizer, high half),
    computed one byte position at a time over all keys at once."""
    arr = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    arr = pc.cast(arr, pa.large_binary())
    n = len(arr)
    if n == 0:
        return EMPTY.copy()
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + n + 1]
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    starts, lengths = offsets[:-1], np.diff(offsets)
    h = np.full(n, _FNV_OFFSET, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(int(lengths.max())):
            live = np.flatnonzero(lengths > j) if lengths.min() <= j else slice(None)
            h[live] = (h[live] ^ data[starts[live] + j]) * _FNV_PRIME
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xFF51AFD7ED558CCD)
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xC4CEB9FE1A85EC53)
        h ^= h >> np.uint64(33)
    return (h >> np.uint64(32)).astype(np.uint32)


@dataclass(frozen=True)
class KeySummary:
    """Sorted distinct key hashes of what one write did to one file group."""

    updated: np.ndarray
    deleted: np.ndarray
    inserted: np.ndarray

    @classmethod
    def of(cls, updated: pa.Array, deleted: pa.Array, inserted: pa.Array) -> KeySummary:
        return cls(*(sorted_unique(key_hashes(k)) for k in (updated, deleted, inserted)))

    def hashes(self) -> np.ndarray:
        """Every key the write touched: updated, deleted or inserted."""
        return sorted_unique(np.concatenate([self.updated, self.deleted, self.inserted]))

    def to_bytes(self) -> bytes:
        out = [MAGIC, bytes([VERSION])]
        for values in (self.updated, self.deleted, self.inserted):
            encoding, payload = _encode(values)
            out += [_SECTION.pack(encoding, len(values), len(payload)), payload]
        return b"".join(out)

    @classmethod
    def from_bytes(cls, data: bytes, source: str) -> KeySummary:
        if data[:4] != MAGIC or len(data) < 5 or data[4] != VERSION:
            raise CorruptTableError(f"{source} is not a version {VERSION} key summary")
        pos, sections = 5, []
        try:
            for _ in range(3):
                encoding, count, size = _SECTION.unpack_from(data, pos)
                pos += _SECTION.size
                values = _decode(encoding, data[pos : pos + size])
                if len(values) != count:
                    raise ValueError(f"{len(values)} hashes where the header says {count}")
                sections.append(values)
                pos += size
        except (struct.error, ValueError) as exc:
            raise CorruptTableError(f"key summary {source} is damaged: {exc}") from exc
        return cls(*sections)


def _encode(values: np.ndarray) -> tuple[int, bytes]:
    raw = values.astype("<u4").tobytes()
    if len(values) >= ROARING_MIN:
        bitmap = pyroaring.BitMap(values).serialize()
        if len(bitmap) < len(raw):
            return ROARING, bitmap
    return RAW, raw


def _decode(encoding: int, payload: bytes) -> np.ndarray:
    if encoding == RAW:
        return np.frombuffer(payload, dtype="<u4").astype(np.uint32)
    if encoding == ROARING:
        return np.frombuffer(pyroaring.BitMap.deserialize(payload).to_array(), dtype=np.uint32)
    raise ValueError(f"unknown encoding {encoding}")


def summary_path(instant_time: str, partition_path: str, file_id: str) -> str:
    middle = f"{partition_path}/" if partition_path else ""
    return f"{key_summary_folder(instant_time)}/{middle}{file_id}.keys"


def write_summary(storage: Storage, instant_time: str, partition_path: str, file_id: str, summary: KeySummary) -> None:
    """Store (or replace, when a re-merge rewrites the group) the summary of one file group."""
    storage.write_bytes(summary_path(instant_time, partition_path, file_id), summary.to_bytes())


def read_summary(storage: Storage, instant_time: str, partition_path: str, file_id: str) -> KeySummary | None:
    """The summary, or None when the write kept none (Apache Hudi's writers, older upsertlake)."""
    path = summary_path(instant_time, partition_path, file_id)
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        return None
    return KeySummary.from_bytes(data, storage.full_path(path))


def delete_summary(storage: Storage, instant_time: str, partition_path: str, file_id: str) -> None:
    storage.delete(summary_path(instant_time, partition_path, file_id))

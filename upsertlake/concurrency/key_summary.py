"""Key summaries: the record keys one write wrote in each file group, as 32-bit hashes.

The commit-time conflict check compares the keys of concurrent writes per record (docs/DESIGN.md §2). The
keys never travel to the writer: each writing unit (the in-process pool, a Spark task) stores,
beside its data files, one sidecar `.hoodie/.keys/<instant>/batch-<id>.keys` holding, per file
group it wrote, the sorted, distinct hashes of the keys it updated, deleted and inserted: one
request per write on an object store, not one per file group. Hudi's readers never look there (it
is neither an instant file nor in extraMetadata); rollback and archive delete an instant's
summaries with it. A re-merge or a retried task writes another sidecar: a group's summary is the
union of all of them, a superset of the keys its committed file holds, which is safe (below).

A hash match only says "maybe the same key": the conflict check confirms it against the actual
keys, read from the written files, before failing a write.

Format (little-endian): magic `ULKS`, version 2, a uint32 count of groups, then per group its
partition path and file id (each a uint16 length and UTF-8) and its summary: a uint32 length and
the summary's own encoding: magic, version 1, then three sections (updated, deleted, inserted),
each an encoding byte, a uint32 count, a uint32 byte length and the payload: a sorted uint32
array (4 bytes a key), or a portable roaring bitmap where that is smaller (from about half a
million keys on; about 2.5 bytes a key at a million). A version 1 file (one group, named by its
path `<partition>/<fileId>.keys`) is what writers stored before the batches.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyroaring

from upsertlake.errors import CorruptTableError
from upsertlake.layout.file_system_view import FileGroup
from upsertlake.layout.markers import key_summary_folder
from upsertlake.storage import Storage
from upsertlake.util.arrays import sorted_unique

MAGIC = b"ULKS"
VERSION = 1  # one group's summary
BATCH_VERSION = 2  # a writing unit's summaries of many groups
RAW, ROARING = 0, 1
ROARING_MIN = 1 << 18  # below this a roaring bitmap of random hashes is never smaller
_SECTION = struct.Struct("<BII")
_COUNT = struct.Struct("<I")
_NAME = struct.Struct("<H")
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
        return cast(np.ndarray, EMPTY.copy())
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
    return cast(np.ndarray, (h >> np.uint64(32)).astype(np.uint32))


@dataclass(frozen=True)
class KeySummary:
    """Sorted distinct key hashes of what one write did to one file group."""

    updated: np.ndarray
    deleted: np.ndarray
    inserted: np.ndarray

    @classmethod
    def of(cls, updated: pa.Array, deleted: pa.Array, inserted: pa.Array) -> KeySummary:
        return cls(*(sorted_unique(key_hashes(k)) for k in (updated, deleted, inserted)))

    @property
    def sections(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(updated, deleted, inserted), in their order on disk."""
        return self.updated, self.deleted, self.inserted

    def union(self, other: KeySummary) -> KeySummary:
        """Both summaries' keys, section by section (two sidecars of one write's file group)."""
        return KeySummary(*(sorted_unique(np.concatenate(pair)) for pair in zip(self.sections, other.sections)))

    def hashes(self) -> np.ndarray:
        """Every key the write touched: updated, deleted or inserted."""
        return sorted_unique(np.concatenate(self.sections))

    def to_bytes(self) -> bytes:
        out = [MAGIC, bytes([VERSION])]
        for values in self.sections:
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


def write_summaries(storage: Storage, instant_time: str, summaries: Mapping[FileGroup, KeySummary]) -> None:
    """Store the summaries of the file groups one writing unit wrote, in one new object."""
    if not summaries:
        return
    out = [MAGIC, bytes([BATCH_VERSION]), _COUNT.pack(len(summaries))]
    for (partition, file_id), summary in sorted(summaries.items()):
        body = summary.to_bytes()
        for name in (partition.encode(), file_id.encode()):
            out += [_NAME.pack(len(name)), name]
        out += [_COUNT.pack(len(body)), body]
    storage.write_bytes(f"{key_summary_folder(instant_time)}/batch-{uuid.uuid4().hex}.keys", b"".join(out))


def read_summaries(storage: Storage, instant_time: str) -> dict[FileGroup, KeySummary]:
    """Every file group's summary for a write (the union of its sidecars); a group it wrote without
    one (Apache Hudi's writers, older upsertlake) is absent."""
    folder = key_summary_folder(instant_time)
    out: dict[FileGroup, KeySummary] = {}
    for entry in storage.list(folder, recursive=True):
        if entry.is_dir or not entry.path.endswith(".keys"):
            continue
        try:
            data = storage.read_bytes(entry.path)
        except FileNotFoundError:  # rolled back or archived since the listing
            continue
        source = storage.full_path(entry.path)
        if data[:5] == MAGIC + bytes([BATCH_VERSION]):
            groups = _batch(data, source)
        else:  # one group's, named by it
            partition, _, name = entry.path[len(folder) + 1 :].rpartition("/")
            groups = [((partition, name.removesuffix(".keys")), KeySummary.from_bytes(data, source))]
        for group, summary in groups:
            out[group] = summary.union(out[group]) if group in out else summary
    return out


def _batch(data: bytes, source: str) -> list[tuple[FileGroup, KeySummary]]:
    try:
        (count,), pos, groups = _COUNT.unpack_from(data, 5), 5 + _COUNT.size, []
        for _ in range(count):
            names = []
            for _ in range(2):
                (size,) = _NAME.unpack_from(data, pos)
                names.append(data[pos + _NAME.size : pos + _NAME.size + size].decode())
                pos += _NAME.size + size
            (size,) = _COUNT.unpack_from(data, pos)
            pos += _COUNT.size
            groups.append(((names[0], names[1]), KeySummary.from_bytes(data[pos : pos + size], source)))
            pos += size
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptTableError(f"key summary {source} is damaged: {exc}") from exc
    if pos != len(data):
        raise CorruptTableError(f"key summary {source} is damaged: {len(data) - pos} bytes after its last group")
    return groups

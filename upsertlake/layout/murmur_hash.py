"""Hadoop's MurmurHash (`org.apache.hudi.common.util.hash.MurmurHash`), vectorised over arrays of keys.

A bloom filter's bit positions come from it, chained `nbHash` times from seed 0 over the key's
UTF-8 bytes. Hadoop's MurmurHash is MurmurHash2 except for the 1-3 tail bytes: it xors them in
reversed order (the first tail byte lands highest), each sign-extended as a Java byte, so it
differs from the C original for most keys.

Everything is vectorised with numpy: with Hudi's defaults a file of 100,000 keys needs 3 million
chained hashes. Its own room, apart from the filters that use it (`upsertlake.layout.bloom_filter`):
the hash knows bytes and words, the filters know bit vectors and their serialization.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeAlias, cast

import numpy as np
import pyarrow as pa

_M = np.uint32(0x5BD1E995)
_WORDS_PER_GATHER = 4  # one 16-byte gather yields 4 words: ~2.5x faster than 4 gathers of 4 bytes
_SLACK = 4 * _WORDS_PER_GATHER  # zero bytes after the key bytes, so gathers never run off the end
_TAIL_MASKS = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF], np.uint32)  # the 0..3 bytes after the words
_TAIL_SHIFTS = np.array([0, 24, 16, 8], np.uint32)  # moves the byte-swapped tail bytes down

KeysLike: TypeAlias = pa.Array | pa.ChunkedArray | Sequence[str | bytes]


@dataclass(frozen=True)
class PreparedKeys:
    """Keys prepared for repeated hashing, sorted by descending number of 4-byte words.

    Sorting makes the keys that have an `i`-th word a prefix, so a hash round is a few in-place
    slice operations per word index. The mixed words and the tail do not depend on the seed:
    they are computed once and reused by all `nbHash` chained rounds.
    """

    order: np.ndarray  # original position of each sorted key
    lengths: np.ndarray  # uint32 byte length
    words: list[np.ndarray]  # words[i]: the mixed i-th words (uint32) of the keys having one
    tails: np.ndarray  # uint32 xor-ed in for the 1..3 trailing bytes (0 if none)
    tail_factors: np.ndarray  # uint32 multiplier after the tail: m if there is a tail, else 1

    def __len__(self) -> int:
        return len(self.order)

    def hash(self, seeds: np.ndarray) -> np.ndarray:
        """Hadoop's `MurmurHash.hash(bytes, length, seed)` per key, as uint32 bits."""
        h = seeds ^ self.lengths
        for word in self.words:
            head = h[: len(word)]
            np.multiply(head, _M, out=head)
            np.bitwise_xor(head, word, out=head)
        h ^= self.tails
        h *= self.tail_factors
        h ^= h >> np.uint32(13)
        h *= _M
        h ^= h >> np.uint32(15)
        return cast(np.ndarray, h)

    def subset(self, keep: np.ndarray) -> PreparedKeys:
        """The keys where the mask `keep` is set, still sorted."""
        index = np.flatnonzero(keep)
        words = [word.take(index[: np.searchsorted(index, len(word))]) for word in self.words]
        return PreparedKeys(
            self.order.take(index),
            self.lengths.take(index),
            [word for word in words if len(word)],
            self.tails.take(index),
            self.tail_factors.take(index),
        )


def _byte_strings(keys: KeysLike) -> pa.Array:
    """One contiguous arrow string or binary array of the keys, without nulls."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    elif not isinstance(keys, pa.Array):
        keys = pa.array(keys)
    if not (pa.types.is_string(keys.type) or pa.types.is_binary(keys.type)):
        keys = keys.cast(pa.large_binary())
    if keys.null_count:
        raise ValueError("bloom filter keys must not be null")
    return keys


def _key_bytes(keys: KeysLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes followed by zero slack, start of each key, length of each key), from arrow buffers."""
    arr = _byte_strings(keys)
    offset_type = np.dtype(np.int32 if arr.type in (pa.string(), pa.binary()) else np.int64)
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, offset_type, len(arr) + 1, arr.offset * offset_type.itemsize)
    offsets = offsets.astype(np.int64)
    padded = np.zeros(offsets[-1] - offsets[0] + _SLACK, np.uint8)
    if data_buf is not None:
        padded[:-_SLACK] = np.frombuffer(data_buf, np.uint8)[offsets[0] : offsets[-1]]
    return padded, offsets[:-1] - offsets[0], np.diff(offsets)


def prepare_keys(keys: KeysLike) -> PreparedKeys:
    """Sort the keys by word count and precompute everything the seed does not change."""
    padded, starts, lengths = _key_bytes(keys)
    nwords = lengths >> 2
    order = np.argsort(-nwords, kind="stable")
    starts, lengths, nwords = starts[order], lengths[order], nwords[order]
    having = len(lengths) - np.cumsum(np.bincount(nwords))  # having[i]: keys with more than i words
    words = [_mix_word(w) for w in _gather_words(padded, starts, having[:-1])]
    tail_bytes = (lengths & 3).astype(np.intp)
    tail = _gather(padded, starts + 4 * nwords, 1)[:, 0] & _TAIL_MASKS[tail_bytes]
    tail = tail.byteswap() >> _TAIL_SHIFTS[tail_bytes]  # Hadoop reads the tail big-endian
    tail_factors = np.where(tail_bytes > 0, _M, np.uint32(1)).astype(np.uint32)
    return PreparedKeys(order, lengths.astype(np.uint32), words, _signed_tail(tail), tail_factors)


def _gather(padded: np.ndarray, at: np.ndarray, count: int) -> np.ndarray:
    """`count` little-endian uint32 words read from each (unaligned) byte offset in `at`."""
    width = 4 * count
    rows = np.ndarray((len(padded) - width + 1,), np.dtype(f"V{width}"), padded, 0, (1,))
    return cast(np.ndarray, rows[at].view("<u4").reshape(len(at), count))


def _gather_words(padded: np.ndarray, starts: np.ndarray, having: np.ndarray) -> Iterator[np.ndarray]:
    """Word i of the first having[i] keys, for every i, several words per gather.

    A gather for the keys having word i also reads the next few words of keys that are shorter
    (bytes of the next key, or the zero slack); those values are dropped.
    """
    for first in range(0, len(having), _WORDS_PER_GATHER):
        count = min(_WORDS_PER_GATHER, len(having) - first)
        block = _gather(padded, starts[: having[first]] + 4 * first, count)
        for j in range(count):
            yield block[: having[first + j], j]


def _mix_word(k: np.ndarray) -> np.ndarray:
    """MurmurHash2's per-word mix, independent of the seed."""
    k = k * _M
    k ^= k >> np.uint32(24)
    k *= _M
    return k


def _signed_tail(tail: np.ndarray) -> np.ndarray:
    """Hadoop's tail value from its bytes in place: each is a signed Java byte, sign-extended
    before it is shifted to its place and xor-ed in."""
    value = np.zeros(len(tail), np.int32)
    for byte in range(3):
        signed = (tail << np.uint32(24 - 8 * byte)).view(np.int32) >> 24
        value ^= signed << (8 * byte)
    return value.view(np.uint32)


def hadoop_murmur_hash(keys: KeysLike, seed: int | np.ndarray) -> np.ndarray:
    """Hadoop's `MurmurHash.hash(bytes, len, seed)` as int32 per key (str keys hash as UTF-8).

    `seed` is one int for all keys or one per key, as when Hudi chains hashes.
    """
    prepared = prepare_keys(keys)
    seeds = np.broadcast_to(np.asarray(seed, np.int64), len(prepared)).astype(np.uint32)
    result = np.empty(len(prepared), np.int32)
    result[prepared.order] = prepared.hash(seeds[prepared.order]).view(np.int32)
    return result

"""Hudi's bloom filters: footers byte-identical to Apache Hudi's, no false negatives, and the
false-positive rate the sizing promises."""

from __future__ import annotations

import base64
import functools
import math
import random
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from upsertlake.layout.bloom_filter import BloomFilter, bloom_filter_for_keys
from upsertlake.layout.murmur_hash import hadoop_murmur_hash

FILTER_KEY = b"org.apache.hudi.bloomfilter"
TYPE_KEY = b"hoodie_bloom_filter_type_code"
HUDI_DEFAULTS = {"num_entries": 60000, "fpp": 1e-9, "filter_type": "DYNAMIC_V0", "max_entries": 100000}
DEFAULT_BITS, DEFAULT_HASHES = 2587966, 30  # what Hudi's defaults size a filter to
INT32 = st.integers(-(2**31), 2**31 - 1)


def reference_murmur(data: bytes, seed: int) -> int:
    """Hadoop's MurmurHash.hash(data, data.length, seed), transcribed byte by byte from the Java."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    java_byte = lambda b: b - 256 if b > 127 else b  # noqa: E731 - Java bytes are signed
    length = len(data)
    h = (seed ^ length) & mask
    for i in range(length // 4):
        k = data[4 * i] | data[4 * i + 1] << 8 | data[4 * i + 2] << 16 | data[4 * i + 3] << 24
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    left = length % 4
    if left:
        if left >= 3:
            h ^= (java_byte(data[length - 3]) << 16) & mask
        if left >= 2:
            h ^= (java_byte(data[length - 2]) << 8) & mask
        h ^= java_byte(data[length - 1]) & mask
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - 2**32 if h >= 2**31 else h


def reference_positions(key: str, nb_hash: int, vector_size: int) -> set[int]:
    """Hudi's HashFunction.hash: chained murmur from seed 0, Math.abs(h % vectorSize) each."""
    positions, seed = set(), 0
    for _ in range(nb_hash):
        seed = reference_murmur(key.encode(), seed)
        positions.add(abs(int(math.fmod(seed, vector_size))))
    return positions


def java_vector_choice(count: int, nr: int, max_nr: int) -> tuple[list[int], int, int]:
    """InternalDynamicBloomFilter.add's vector for each key, key by key as the Java does it;
    also the final number of vectors and currentNbRecord."""
    vectors, current, reached_max, round_robin, chosen = 1, 0, False, 0, []
    for _ in range(count):
        if reached_max:
            chosen.append(round_robin % vectors)
            round_robin += 1
        elif current >= nr and vectors * nr < max_nr:
            vectors, current = vectors + 1, 0
            chosen.append(vectors - 1)
        elif current >= nr:
            reached_max = True
            chosen.append(0)
        else:
            chosen.append(vectors - 1)
        current += 1
    return chosen, vectors, current


def header(nb_hash: int, vector_size: int) -> bytes:
    """Hadoop Filter.write: version -1, nbHash, hash type 1 (murmur), vectorSize; big-endian."""
    return struct.pack(">iibi", -1, nb_hash, 1, vector_size)


def set_bits(vector: bytes, vector_size: int) -> set[int]:
    """Positions set in a serialized bit vector (least significant bit first in each byte)."""
    return {i for i in range(vector_size) if vector[i >> 3] >> (i & 7) & 1}


@functools.cache
def random_keys(count: int, seed: int) -> tuple[str, ...]:
    """Distinct keys (a unique hex prefix) of many lengths, so that every tail length occurs."""
    rng = random.Random(seed)
    return tuple(f"{i:x}-" + f"{rng.getrandbits(160):040x}"[: rng.randint(0, 40)] for i in range(count))


# --- against Apache Hudi's own footers ---------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "base_files"),
    [
        ("v6_simplekeygen_nonhivestyle", 4),
        ("v6_nonpartitioned", 2),
        ("v8_simplekeygen_nonhivestyle", 4),
        ("v8_nonpartitioned", 2),
    ],
)
def test_filter_rebuilt_from_a_files_keys_equals_hudis_footer(hudi_table, table, base_files):
    paths = sorted(hudi_table(table).rglob("*.parquet"))
    assert len(paths) == base_files
    for path in paths:
        parquet = pq.ParquetFile(path)
        footer = parquet.metadata.metadata
        keys = parquet.read(columns=["_hoodie_record_key"]).column("_hoodie_record_key")
        assert footer[TYPE_KEY] == b"DYNAMIC_V0"
        assert bloom_filter_for_keys(keys, **HUDI_DEFAULTS).serialize() == footer[FILTER_KEY].decode()


def test_hudis_footer_reads_back_identically_and_answers_for_its_keys(hudi_table):
    path = next(hudi_table("v6_nonpartitioned").rglob("*20240418173551906.parquet"))
    footer = pq.ParquetFile(path).metadata.metadata
    text = footer[FILTER_KEY].decode()

    bloom = BloomFilter.deserialize(text, "DYNAMIC_V0")

    assert bloom.type_code == "DYNAMIC_V0"
    assert bloom.serialize() == text
    answers = bloom.might_contain(["1", "2", "3", "4", "0", "5", "id:1"])
    assert answers.tolist() == [True, True, True, True, False, False, False]
    raw = base64.b64decode(text)
    nbytes = (DEFAULT_BITS + 7) // 8
    assert raw[:25] == header(DEFAULT_HASHES, DEFAULT_BITS) + struct.pack(">iii", 60000, 4, 1)
    assert raw[25:38] == header(DEFAULT_HASHES, DEFAULT_BITS)
    assert len(raw) == 38 + nbytes
    expected = set().union(*(reference_positions(k, DEFAULT_HASHES, DEFAULT_BITS) for k in "1234"))
    assert set_bits(raw[38:], DEFAULT_BITS) == expected


# --- the hash ----------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=80), INT32), min_size=1, max_size=40))
def test_vectorised_murmur_equals_the_byte_by_byte_reference(keys_and_seeds):
    keys = [key for key, _ in keys_and_seeds]
    seeds = np.array([seed for _, seed in keys_and_seeds])

    hashes = hadoop_murmur_hash(keys, seeds)

    assert hashes.dtype == np.int32
    assert hashes.tolist() == [reference_murmur(key, seed) for key, seed in keys_and_seeds]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=20), INT32)
def test_murmur_of_strings_hashes_their_utf8_bytes_with_one_seed_for_all(keys, seed):
    assert hadoop_murmur_hash(keys, seed).tolist() == [reference_murmur(k.encode(), seed) for k in keys]


def test_murmur_tail_bytes_are_signed_and_the_first_is_the_highest():
    # Hadoop xors data[len-3] << 16, data[len-2] << 8, data[len-1], each a sign-extended Java byte.
    keys = [b"ab", b"ba", b"abc", b"cba", b"\x80", b"\xff\x7f", b"\x00\x80\xff"]
    expected = [reference_murmur(k, 7) for k in keys]
    assert hadoop_murmur_hash(keys, 7).tolist() == expected
    assert len(set(expected)) == len(keys)


def test_a_keys_bits_are_the_chained_hash_positions():
    bloom = BloomFilter.create(100, 0.01, "SIMPLE")
    bloom.add_keys(["hoodie"])

    raw = base64.b64decode(bloom.serialize())

    assert raw[:13] == header(7, 959)
    assert set_bits(raw[13:], 959) == reference_positions("hoodie", 7, 959)


# --- the filters -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("num_entries", "max_entries", "vectors", "current_nb_record"),
    [(60000, 100000, 2, 190000), (50000, 200000, 4, 100000)],
)
def test_dynamic_filter_has_no_false_negatives_past_its_bound(num_entries, max_entries, vectors,
                                                              current_nb_record):
    keys = random_keys(250_000, seed=1)
    bloom = bloom_filter_for_keys(keys, num_entries, 1e-9, "DYNAMIC_V0", max_entries)

    assert bloom.might_contain(keys).all()
    text = bloom.serialize()
    assert base64.b64decode(text)[13:25] == struct.pack(">iii", num_entries, current_nb_record, vectors)
    again = BloomFilter.deserialize(text, "DYNAMIC_V0")
    assert again.serialize() == text
    assert again.might_contain(pa.array(keys)).all()


def test_dynamic_filter_places_keys_as_hudi_does_whatever_the_batches():
    nr, max_nr, fpp = 50, 180, 0.01
    keys = random_keys(500, seed=2)
    chosen, vectors, current = java_vector_choice(len(keys), nr, max_nr)
    # Each vector serializes exactly as a SIMPLE filter of the same size holding that vector's keys.
    vector_keys = [[k for k, v in zip(keys, chosen) if v == i] for i in range(vectors)]
    simple_bytes = [base64.b64decode(bloom_filter_for_keys(ks, nr, fpp, "SIMPLE", 0).serialize())
                    for ks in vector_keys]
    expected = header(7, 480) + struct.pack(">iii", nr, current, vectors) + b"".join(simple_bytes)

    bloom = BloomFilter.create(nr, fpp, "DYNAMIC_V0", max_nr)
    for start, stop in [(0, 1), (1, 49), (49, 50), (50, 51), (51, 199), (199, 200), (200, 201),
                        (201, 202), (202, 500)]:
        bloom.add_keys(keys[start:stop])

    assert (vectors, current) == (4, 350)
    assert base64.b64decode(bloom.serialize()) == expected


def test_simple_filter_false_positive_rate_is_near_its_target():
    bloom = bloom_filter_for_keys([f"key-{i}" for i in range(10_000)], 10_000, 0.01, "SIMPLE", 0)

    rate = bloom.might_contain([f"absent-{i}" for i in range(200_000)]).mean()

    assert 0.005 <= rate <= 0.02


def test_simple_filter_round_trips():
    keys = random_keys(500, seed=3)
    bloom = bloom_filter_for_keys(keys, 1000, 1e-6, "SIMPLE", 0)
    text = bloom.serialize()

    again = BloomFilter.deserialize(text, "SIMPLE")

    assert again.type_code == "SIMPLE"
    assert again.serialize() == text
    assert again.might_contain(keys).all()
    raw = base64.b64decode(text)
    assert raw[:13] == header(20, 28756)
    assert len(raw) == 13 + (28756 + 7) // 8

def test_bits_past_a_vectors_size_are_read_as_the_zeros_hadoop_writes():
    keys = random_keys(500, seed=3)
    text = bloom_filter_for_keys(keys, 1000, 1e-6, "SIMPLE", 0).serialize()  # 28756 bits: 4 spare
    raw = bytearray(base64.b64decode(text))
    assert raw[-1] >> 4 == 0
    raw[-1] |= 0xF0

    again = BloomFilter.deserialize(base64.b64encode(bytes(raw)), "SIMPLE")

    assert again.serialize() == text
    assert again.might_contain(keys).all()



def test_every_kind_of_key_input_gives_the_same_filter():
    keys = random_keys(1000, seed=4)
    expected = bloom_filter_for_keys(keys, **HUDI_DEFAULTS).serialize()
    padded = pa.array(["x"] * 7 + list(keys))
    inputs = [
        pa.array(keys),
        pa.array(keys, pa.large_string()),
        pa.chunked_array([keys[:300], keys[300:]]),
        padded.slice(7),
        [k.encode() for k in keys],
    ]
    serialized = [bloom_filter_for_keys(keys_in, **HUDI_DEFAULTS).serialize() for keys_in in inputs]
    assert serialized == [expected] * len(inputs)


def test_type_codes_are_matched_case_insensitively():
    text = bloom_filter_for_keys(["a"], **HUDI_DEFAULTS).serialize()
    assert BloomFilter.deserialize(text, "dynamic_v0").serialize() == text


def test_an_empty_dynamic_filter_is_one_empty_vector():
    raw = base64.b64decode(BloomFilter.create().serialize())
    assert raw == (header(DEFAULT_HASHES, DEFAULT_BITS) + struct.pack(">iii", 60000, 0, 1)
                   + header(DEFAULT_HASHES, DEFAULT_BITS) + bytes((DEFAULT_BITS + 7) // 8))


@pytest.mark.parametrize(
    ("keys", "message"),
    [(pa.array(["a", None]), "null"), (["a", ""], "empty")],
)
def test_keys_hudi_refuses_are_refused(keys, message):
    bloom = BloomFilter.create()
    with pytest.raises(ValueError, match=message):
        bloom.add_keys(keys)
    with pytest.raises(ValueError, match=message):
        bloom.might_contain(keys)


def test_unreadable_filters_are_refused():
    text = bloom_filter_for_keys(["a"], 100, 0.01, "SIMPLE", 0).serialize()
    raw = base64.b64decode(text)
    with pytest.raises(ValueError, match="truncated"):
        BloomFilter.deserialize(base64.b64encode(raw[:-1]), "SIMPLE")
    with pytest.raises(ValueError, match="unexpected bytes"):
        BloomFilter.deserialize(base64.b64encode(raw + b"\0"), "SIMPLE")
    with pytest.raises(ValueError, match="unknown bloom filter type"):
        BloomFilter.deserialize(text, "CUCKOO")
    with pytest.raises(ValueError, match="hash type 0"):
        BloomFilter.deserialize(base64.b64encode(raw[:8] + b"\0" + raw[9:]), "SIMPLE")


@pytest.mark.parametrize("filter_type", ["DYNAMIC_V0", "SIMPLE"])
@pytest.mark.parametrize("first,more", [(0, 10), (500, 300), (1500, 1000), (3000, 2500)])
def test_resume_equals_building_from_scratch(filter_type: str, first: int, more: int) -> None:
    """A filter resumed from a footer of `first` keys, plus `more`, serializes like one built
    from all keys — including across the dynamic filter's growth and round robin."""
    keys = [f"key-{i:06d}" for i in range(first + more)]
    params = dict(num_entries=1000, fpp=0.01, filter_type=filter_type, max_entries=2000)
    old = (
        bloom_filter_for_keys(pa.array(keys[:first], pa.string()), **params) if first else BloomFilter.create(**params)
    )
    resumed = BloomFilter.resume(old.serialize(), old.type_code, first, **params)
    assert resumed is not None
    resumed.add_keys(pa.array(keys[first:], pa.string()))
    assert resumed.serialize() == bloom_filter_for_keys(pa.array(keys, pa.string()), **params).serialize()


def test_resume_refuses_other_parameters() -> None:
    old = bloom_filter_for_keys(pa.array(["a", "b"]), 1000, 0.01, "DYNAMIC_V0", 2000)
    assert BloomFilter.resume(old.serialize(), "DYNAMIC_V0", 2, 1000, 0.001, "DYNAMIC_V0", 2000) is None
    assert BloomFilter.resume(old.serialize(), "DYNAMIC_V0", 3, 1000, 0.01, "DYNAMIC_V0", 2000) is None
    assert BloomFilter.resume(old.serialize(), "DYNAMIC_V0", 2, 1000, 0.01, "SIMPLE", 2000) is None


def test_rewritten_files_carry_the_filter_of_their_keys(tmp_path) -> None:
    """Upserts reuse the old footer's filter when every old row keeps its place; deletes rebuild.
    Either way each file's footer equals a filter built from its keys in file order."""
    import upsertlake

    table = upsertlake.create_table(tmp_path, name="t", record_key="k", precombine_field="ts", partition_fields=["p"])
    keys = [f"k{i:04d}" for i in range(400)]
    table.insert(pa.table({"k": keys, "ts": [1] * 400, "p": ["a", "b"] * 200}))
    table.upsert(pa.table({"k": [*keys[:50], "new1", "new2"], "ts": [2] * 52, "p": ["a", "b"] * 26}))
    table.delete(pa.table({"k": keys[50:60], "p": ["a", "b"] * 5}))
    table.upsert(pa.table({"k": ["new3"], "ts": [3], "p": ["a"]}))
    files = {f["_hoodie_file_name"] for f in table.read(columns=["_hoodie_file_name"]).to_pylist()}
    assert len(files) == 2
    for name in files:
        path = next(tmp_path.rglob(name))
        stored = pq.ParquetFile(path).metadata.metadata[b"org.apache.hudi.bloomfilter"].decode()
        file_keys = pq.read_table(path, columns=["_hoodie_record_key"]).column(0)
        assert stored == bloom_filter_for_keys(file_keys, 60000, 1e-9, "DYNAMIC_V0", 100000).serialize()


@pytest.mark.parametrize("filter_type", ["DYNAMIC_V0", "SIMPLE"])
@pytest.mark.parametrize("count", [0, 700, 2500])
def test_unchanged_keeps_the_footer_text_exactly_when_resume_would_rebuild_it(filter_type: str, count: int) -> None:
    """A rewrite adding no key writes the footer text back; only when it is what `resume` gives."""
    keys = pa.array([f"key-{i:06d}" for i in range(count)], pa.string())
    params = dict(num_entries=1000, fpp=0.01, filter_type=filter_type, max_entries=2000)
    text = bloom_filter_for_keys(keys, **params).serialize() if count else BloomFilter.create(**params).serialize()
    kept = BloomFilter.unchanged(text, filter_type, count, **params)
    assert kept is not None and kept.serialize() == text and kept.type_code == filter_type
    assert BloomFilter.resume(text, filter_type, count, **params).serialize() == text
    # other parameters, another key count (dynamic: another fill state), a cut or damaged text
    assert BloomFilter.unchanged(text, filter_type, count, **{**params, "fpp": 0.001}) is None
    assert BloomFilter.unchanged(text, "SIMPLE" if filter_type != "SIMPLE" else "DYNAMIC_V0", count, **params) is None
    if filter_type == "DYNAMIC_V0":
        assert BloomFilter.unchanged(text, filter_type, count + 1, **params) is None
    assert BloomFilter.unchanged(text[:-4], filter_type, count, **params) is None
    assert BloomFilter.unchanged("!" + text[1:], filter_type, count, **params) is None


def test_rewrites_adding_no_key_copy_the_footer_filter(tmp_path) -> None:
    """An upsert of only updates rewrites the file with the very filter text it had."""
    import upsertlake

    table = upsertlake.create_table(tmp_path, name="t", record_key="k", precombine_field="ts")
    keys = [f"k{i:05d}" for i in range(3000)]
    table.insert(pa.table({"k": keys, "ts": [1] * 3000}))
    (before,) = tmp_path.glob("*.parquet")
    table.upsert(pa.table({"k": keys[::10], "ts": [2] * 300}))
    after = [p for p in tmp_path.glob("*.parquet") if p != before]
    assert len(after) == 1
    footer = [pq.ParquetFile(p).metadata.metadata[b"org.apache.hudi.bloomfilter"] for p in (before, after[0])]
    assert footer[0] == footer[1]
    file_keys = pq.read_table(after[0], columns=["_hoodie_record_key"]).column(0)
    assert footer[1].decode() == bloom_filter_for_keys(file_keys, 60000, 1e-9, "DYNAMIC_V0", 100000).serialize()

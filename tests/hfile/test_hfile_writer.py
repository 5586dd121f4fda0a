"""The HFile writer: byte for byte what Apache Hudi's writer (hudi-io 1.2.1, run as the reference)
writes for the same inputs, read back by Hudi's reader and ours; round trips across block
boundaries, empty files, single keys, large values, GZ; unsorted keys refused."""

from __future__ import annotations

import io
import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from upsertlake.errors import HFileError
from upsertlake.hfile import Compression, HFileReader, HFileWriter, write_hfile
from upsertlake.hfile import file_info as info
from upsertlake.hfile.blocks import BlockType, parse_header, read_block
from upsertlake.hfile.index import parse_root_index
from upsertlake.hfile.java_order import hash_map_order
from upsertlake.util.java_hash import java_string_hash

from hfile_vectors import vector
from hudi_io_reference import Case, HudiHFile

SCHEMA = b'{"type":"record","name":"HoodieMetadataRecord","namespace":"org.apache.hudi.avro.model","fields":[]}'


def ours(case: Case) -> bytes:
    return write_hfile(case.entries, block_size=case.block_size, compression=case.codec,
                       file_creation_time=case.create_time, meta_blocks=case.meta_blocks, file_info=case.file_info)


def random_entries(rng: random.Random, n: int, key_size: int, value_size: int, dups: bool = False) -> list:
    alphabet = "abcdefghij0123456789-_/=.é中"  # non-ASCII too: keys are UTF-8
    keys = sorted({"".join(rng.choices(alphabet, k=rng.randint(1, key_size))) for _ in range(n)},
                  key=lambda k: k.encode())
    entries = []
    for k in keys:
        for _ in range(rng.randint(1, 3) if dups else 1):
            entries.append((k, rng.randbytes(rng.randint(0, value_size))))
    return entries


def reference_cases() -> dict[str, Case]:
    rng = random.Random(51)
    hudi_info = {info.SCHEMA: SCHEMA, info.MIN_RECORD_KEY: b"a", info.MAX_RECORD_KEY: b"z",
                 info.BLOOM_FILTER_TYPE_CODE: b"DYNAMIC_V0"}
    three = [("key1", b"value1"), ("key2", b"value2"), ("key3", b"value3")]
    cases = {
        "three_none": Case(three), "three_gz": Case(three, codec="GZ"),
        "empty_none": Case([]), "empty_gz": Case([], codec="GZ", meta_blocks={"bloomFilter": b"bits"}),
        "one_key": Case([("k", b"v")], codec="GZ"),
        "empty_key_and_value": Case([("", b""), ("a", b"")]),
        # TestHFileWriter's same-key and unique-key cases: 50-byte blocks
        "same_key_location": Case([("key00", f"value{i:02d}".encode()) for i in range(10)]
                                  + [(f"key{i:02d}", f"value{i:02d}".encode()) for i in range(1, 11)], block_size=50),
        "unique_key_location": Case([(f"key{i:02d}", f"value{i:02d}".encode()) for i in range(50)], block_size=50),
        "large_values_gz": Case([("big1", rng.randbytes(300_000)), ("big2", b"x" * 2_000_000), ("small", b"s")],
                                block_size=64 * 1024, codec="GZ"),
        "long_keys": Case([("k" * 200 + f"{i:03d}", b"v") for i in range(100)], block_size=1024),  # VInt > 127
        "metadata_like": Case(random_entries(rng, 3000, 40, 120), block_size=16 * 1024, codec="GZ",
                              file_info=hudi_info, meta_blocks={"bloomFilter": rng.randbytes(5000)}),
        "many_info": Case(three, file_info={f"custom.key.{i}": bytes([i]) for i in range(30)},
                          meta_blocks={f"meta{i}": bytes([i]) * i for i in range(20)}),
        "info_overrides": Case(three, file_info={info.KEY_VALUE_VERSION: b"\x00\x00\x00\x07",
                                                 info.LAST_KEY: b"junk"}),
        "negative_time": Case(three, create_time=-5),
    }
    for block_size in (64, 512, 4096, 65536):
        for codec in ("NONE", "GZ"):
            cases[f"random_{block_size}_{codec}"] = Case(random_entries(rng, 800, 30, 200, dups=True),
                                                         block_size=block_size, codec=codec)
    return cases


@pytest.fixture(scope="module")
def hudi(tmp_path_factory: pytest.TempPathFactory) -> HudiHFile:
    return HudiHFile(tmp_path_factory.mktemp("hudi_hfile"))


def test_we_write_what_hudi_writes_and_hudi_reads_it(hudi: HudiHFile) -> None:
    """For every case Hudi's writer and ours write the same bytes; Hudi's reader reads back every
    entry, file info entry and meta block of our file, finds every key by seeking to it, and so
    does ours."""
    cases = reference_cases()
    theirs = hudi.write(cases)
    for name, case in cases.items():
        mine = ours(case)
        if case.entries:
            assert mine == theirs[name], f"{name}: first difference at byte {_first_difference(mine, theirs[name])}"
        else:
            assert_same_but_the_empty_last_key(mine, theirs[name])
    for name in ("three_gz", "empty_gz", "metadata_like", "random_64_GZ", "random_65536_NONE", "many_info"):
        check_hudi_reads(hudi, cases[name], "1.2.1")


@pytest.mark.parametrize("release", ["1.1.1", "0.15.0", "hbase"])
def test_older_hudi_releases_read_what_we_write(hudi: HudiHFile, release: str) -> None:
    """The native HFile reader of Hudi 1.1.1 and 0.15.0 (the releases the Spark reference runs for
    table versions 8/9 and 6) reads our files as the newest does; so does HBase's reader as Hudi
    0.15 opens metadata-table files, point lookups included (which need the index's whole
    KeyValue keys that Hudi 1.2.1 writes and 1.2.0 did not)."""
    cases = reference_cases()
    for name in ("three_gz", "empty_gz", "metadata_like", "random_512_NONE", "long_keys"):
        check_hudi_reads(hudi, cases[name], release)


def check_hudi_reads(hudi: HudiHFile, case: Case, release: str) -> None:
    data = ours(case)
    dump = hudi.read(data, [*case.file_info, info.LAST_KEY, info.AVG_KEY_LEN, info.KEY_VALUE_VERSION],
                     list(case.meta_blocks), release)
    assert dump.entries == len(case.entries)
    assert dump.pairs == [(k.encode(), v) for k, v in case.entries]
    assert dump.found == len({k for k, _ in case.entries})
    assert dump.meta == case.meta_blocks
    assert all(dump.info[k] == v for k, v in case.file_info.items())
    reader = HFileReader(data)
    assert list(reader.scan()) == dump.pairs
    assert {k: reader.file_info[k] for k in dump.info} == dump.info
    assert {k: reader.meta_block(k) for k in case.meta_blocks} == case.meta_blocks


def assert_same_but_the_empty_last_key(mine: bytes, theirs: bytes) -> None:
    """A file without entries: Hudi 1.2.1 writes an empty last key into the file info, which HBase's
    reader (Hudi 0.x's) cannot open; we leave it out as HBase's writer does. Every other block,
    file info entry and trailer field is the same."""
    my_blocks, their_blocks = _blocks(mine), _blocks(theirs)
    assert [b[:2] for b in my_blocks[:-1]] == [b[:2] for b in their_blocks[:-1]]
    assert [b[2] for b in my_blocks[:-1]] == [b[2] for b in their_blocks[:-1]]
    assert my_blocks[-1][1] is their_blocks[-1][1] is BlockType.FILE_INFO
    my_reader, their_reader = HFileReader(mine), HFileReader(theirs)
    assert their_reader.file_info.pop(info.LAST_KEY) == b""
    assert list(my_reader.file_info.items()) == list(their_reader.file_info.items())
    assert my_reader.trailer == their_reader.trailer


def _first_difference(a: bytes, b: bytes) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _blocks(data: bytes) -> list[tuple[int, BlockType, bytes]]:
    """Every block of a file before its trailer: (offset, type, bytes on disk)."""
    out, pos = [], 0
    while pos < len(data) - 4096:
        header = parse_header(data, pos, "test")
        out.append((pos, header.type, data[pos:pos + header.on_disk_size]))
        pos += header.on_disk_size
    return out


def test_hudi_generated_vector_block_by_block() -> None:
    """Hudi's own vector (written by its 1.1/1.2.0 writer: five rows, 64 KiB blocks, meta block
    `bloom_filter`) rewritten from the same inputs: the same data block, meta block, meta index
    and file info, byte for byte. The root data index holds the same entry; Hudi 1.2.1 (which we
    write as) changed only its key from the row to the whole KeyValue key, which HBase's reader
    needs; so the file is that key's ten bytes longer and the trailer's offsets move with it."""
    theirs = vector("hudi-generated.hfile")
    vector_reader = HFileReader(theirs)
    created = int.from_bytes(vector_reader.file_info[info.CREATE_TIME_TS], "big")
    mine = write_hfile([(f"row{i}", f"value{i}".encode()) for i in range(1, 6)], block_size=64 * 1024,
                       file_creation_time=created, meta_blocks={"bloom_filter": b"random_string"})
    their_blocks, my_blocks = _blocks(theirs), _blocks(mine)
    assert [kind for _, kind, _ in my_blocks] == [kind for _, kind, _ in their_blocks] == [
        BlockType.DATA, BlockType.META, BlockType.ROOT_INDEX, BlockType.ROOT_INDEX, BlockType.FILE_INFO]
    for i in (0, 1, 3, 4):
        assert my_blocks[i][2] == their_blocks[i][2], my_blocks[i][1]
    root = [parse_root_index(read_block(blocks[2][2], 0, Compression.NONE, BlockType.ROOT_INDEX, "t")[1], 1, True, "t")
            for blocks in (my_blocks, their_blocks)]
    assert root[0] == root[1]
    assert len(mine) - len(theirs) == len(my_blocks[2][2]) - len(their_blocks[2][2]) == 10
    mine_trailer, their_trailer = HFileReader(mine).trailer, vector_reader.trailer
    assert mine_trailer.load_on_open_offset == their_trailer.load_on_open_offset
    assert mine_trailer.file_info_offset == their_trailer.file_info_offset + 10
    # and the writer that wrote the vector counted 9 bytes per entry besides key and value where
    # 1.2.x counts the 21 an entry takes (which also moves block boundaries)
    assert (their_trailer.uncompressed_data_index_size, mine_trailer.uncompressed_data_index_size) == (
        5 * (4 + 6 + 9), 5 * (4 + 6 + 21))
    moved = {"file_info_offset": 0, "uncompressed_data_index_size": 0}
    assert {**mine_trailer.__dict__, **moved} == {**their_trailer.__dict__, **moved}


def test_java_hash_map_order() -> None:
    """Hudi's file info and meta blocks come out in `HashMap` order: as the vector Hudi wrote has
    them, and across the table's growth."""
    assert java_string_hash("hello") == 99162322 and java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == 0x80000000  # Integer.MIN_VALUE: 32-bit wrap
    assert java_string_hash("中é") == (0x4E2D * 31 + 0xE9)  # UTF-16 code units, not UTF-8 bytes
    assert java_string_hash("😀") == (0xD83D * 31 + 0xDE00)  # a surrogate pair
    written = list(HFileReader(vector("hudi-generated.hfile")).file_info)
    assert hash_map_order([info.MAX_MEMSTORE_TS_KEY, info.LAST_KEY, info.AVG_KEY_LEN, info.CREATE_TIME_TS,
                           info.AVG_VALUE_LEN, info.KEY_VALUE_VERSION]) == written


@pytest.mark.parametrize("codec", ["NONE", "GZ"])
@pytest.mark.parametrize("block_size", [1, 100, 4096, 1 << 20])
def test_round_trip(codec: str, block_size: int) -> None:
    """Random keys and values (some repeated) read back exactly, whole, by key, by prefix and from
    any start; blocks close where Hudi's rule says (never between equal keys)."""
    rng = random.Random(block_size)
    entries = random_entries(rng, 2000, 24, 300, dups=True)
    data = write_hfile(entries, block_size=block_size, compression=codec, file_creation_time=1)
    reader = HFileReader(data)
    expected = [(k.encode(), v) for k, v in entries]
    assert reader.entry_count == len(entries) and list(reader.scan()) == expected
    table = reader.read()
    assert list(zip(table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True)) == expected
    first = {}
    for k, v in expected:
        first.setdefault(k, v)
    assert all(reader.get(k) == v for k, v in first.items())
    assert reader.get_many(list(first)) == first
    between = [k + b"\x00" for k in first if k + b"\x00" not in first]  # each in the block of the key before it
    assert reader.get_many([b"", *between, *first, b"\xff" * 5]) == first  # many keys a block: hashed
    sparse = list(first)[::97]
    assert reader.get_many([*sparse, *between[::89]]) == {k: first[k] for k in sparse}  # few: searched
    assert reader.get("not there") is None and reader.get(b"\xff" * 5) is None
    for prefix in ("a", "ab", "é", "中", "9-", "zzz"):
        p = prefix.encode()
        assert list(reader.scan(prefix)) == [(k, v) for k, v in expected if k.startswith(p)]
    start = expected[len(expected) // 2][0]
    assert list(reader.scan(start=start)) == [(k, v) for k, v in expected if k >= start]
    blocks = _blocks(data)
    data_blocks = [b for b in blocks if b[1] is BlockType.DATA]
    assert len(data_blocks) == reader.trailer.data_index_count == _expected_blocks(expected, block_size)
    assert reader.compression is Compression[codec]


def _expected_blocks(entries: list[tuple[bytes, bytes]], block_size: int) -> int:
    blocks, size, last = 0, 0, None
    for k, v in entries:
        if blocks == 0 or (k != last and size + len(k) + len(v) + 21 > block_size):
            blocks, size = blocks + 1, 0
        size += len(k) + len(v) + 21
        last = k
    return blocks


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=40), st.binary(max_size=100)), max_size=60),
       st.integers(min_value=1, max_value=600), st.sampled_from(["NONE", "GZ"]))
def test_any_sorted_entries_read_back(pairs: list[tuple[bytes, bytes]], block_size: int, codec: str) -> None:
    entries = sorted(pairs, key=lambda p: p[0])
    data = write_hfile(entries, block_size=block_size, compression=codec)
    reader = HFileReader(data)
    assert list(reader.scan()) == entries
    for k, _v in entries:
        assert reader.get(k) == dict(reversed(entries))[k]


def test_empty_file_and_one_key() -> None:
    empty = HFileReader(write_hfile([], compression="GZ", meta_blocks={"bloomFilter": b"b"}))
    assert empty.entry_count == 0 and empty.read().num_rows == 0 and empty.last_key is None
    assert empty.trailer.first_data_block_offset == -1 and empty.meta_block("bloomFilter") == b"b"
    assert info.LAST_KEY not in empty.file_info and empty.cursor().seek_to_first() is False
    one = HFileReader(write_hfile([("only", b"value")]))
    assert list(one.scan()) == [(b"only", b"value")] and one.last_key == b"only"
    assert int.from_bytes(one.file_info[info.AVG_KEY_LEN], "big") == 4


def test_large_values_span_blocks_alone() -> None:
    """A value larger than the block size gets a block of its own; GZ shrinks it on disk."""
    entries = [("a", b"1"), ("b", b"\x00" * 3_000_000), ("c", b"3")]
    data = write_hfile(entries, block_size=64 * 1024, compression="GZ")
    reader = HFileReader(data)
    assert reader.trailer.data_index_count == 3 and len(data) < 100_000
    assert reader.get("b") == b"\x00" * 3_000_000


def test_writer_to_a_file(tmp_path) -> None:
    path = tmp_path / "x.hfile"
    with path.open("wb") as sink, HFileWriter(sink, block_size=128, compression=Compression.GZ) as writer:
        writer.append_batch([f"k{i:04d}" for i in range(500)], [str(i).encode() for i in range(500)])
        writer.append_file_info(info.SCHEMA, SCHEMA)
    reader = HFileReader(path.read_bytes(), str(path))
    assert reader.entry_count == 500 and reader.get("k0499") == b"499" and reader.file_info[info.SCHEMA] == SCHEMA
    with pytest.raises(HFileError, match="wrote to a file, not to memory"):
        writer.getvalue()


@pytest.mark.parametrize("block_size", [1, 60, 700, 1 << 20])
def test_one_at_a_time_and_in_batches_write_the_same_file(block_size: int) -> None:
    """`append` (Hudi's loop) and `append_batch` (block boundaries computed per batch), mixed in any
    way, with Arrow or Python input, write the same bytes."""
    rng = random.Random(block_size)
    entries = random_entries(rng, 600, 12, 90, dups=True)
    keys, values = [k for k, _ in entries], [v for _, v in entries]
    one_by_one = HFileWriter(block_size=block_size, file_creation_time=7)
    for k, v in entries:
        one_by_one.append(k, v)
    one_by_one.close()
    expected = one_by_one.getvalue()
    cuts = sorted(rng.sample(range(1, len(entries)), 8))
    mixed = HFileWriter(block_size=block_size, file_creation_time=7)
    for lo, hi in zip([0, *cuts], [*cuts, len(entries)], strict=True):
        if lo % 2:
            for k, v in entries[lo:hi]:
                mixed.append(k, v)
        else:
            mixed.append_batch(pa.chunked_array([pa.array(keys[lo:hi])]), pa.array(values[lo:hi], pa.binary()))
    mixed.close()
    assert mixed.getvalue() == expected
    assert write_hfile(entries, block_size=block_size, file_creation_time=7) == expected


def test_unsorted_and_impossible_input_is_refused_by_name() -> None:
    writer = HFileWriter()
    writer.append("b", b"1")
    writer.append("b", b"2")  # equal keys may repeat
    with pytest.raises(HFileError, match=r"sorted order: b'a' after b'b'"):
        writer.append("a", b"3")
    with pytest.raises(HFileError, match="key of 40000 bytes: at most 32767"):
        writer.append("c" * 40000, b"")
    writer.close()
    assert list(HFileReader(writer.getvalue()).scan()) == [(b"b", b"1"), (b"b", b"2")]
    with pytest.raises(HFileError, match="writer is closed"):
        writer.append("z", b"")
    with pytest.raises(HFileError, match="compression LZ4: Hudi writes NONE or GZ"):
        HFileWriter(io.BytesIO(), compression="LZ4")
    with pytest.raises(HFileError, match="block size 0"):
        HFileWriter(block_size=0)
    batch = HFileWriter()
    batch.append_batch(["a", "c"], [b"1", b"2"])
    with pytest.raises(HFileError, match=r"sorted order: b'b' after b'c'"):
        batch.append_batch(["b"], [b"3"])
    with pytest.raises(HFileError, match=r"sorted order: b'd' after b'e'"):
        batch.append_batch(["c", "e", "d"], [b"", b"", b""])
    with pytest.raises(HFileError, match="2 keys and 1 values"):
        batch.append_batch(["x", "y"], [b""])
    with pytest.raises(HFileError, match="a null key"):
        batch.append_batch(pa.array(["x", None]), [b"", b""])
    with pytest.raises(HFileError, match="keys must be bytes or strings, not int64"):
        batch.append_batch(pa.array([1, 2]), [b"", b""])

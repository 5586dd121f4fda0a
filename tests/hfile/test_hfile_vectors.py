"""Every HFile of Apache Hudi's and hudi-rs's test vectors reads key by key as those projects' tests
expect (Hudi's TestHFileReader and TestHFileCompatibility, hudi-rs's hfile reader tests): entry
counts, every key and value in order, seek results and positions, meta blocks, file info."""

from __future__ import annotations

import pyarrow as pa
import pytest

from upsertlake.hfile import Compression, HFileReader, SeekResult
from upsertlake.hfile import file_info as info

from hfile_vectors import (
    CUSTOM_META_KEY,
    CUSTOM_META_VALUE,
    DUMMY_BLOOM_FILTER,
    LARGE_KEY_PREFIX,
    TRIPS_FILES,
    TRIPS_FILES_LOG,
    TRIPS_RECORD_INDEX,
    hudi_io_names,
    key,
    key_with_suffix,
    large_key,
    value,
    vector,
)

B, F, FOUND, IN, EOF = (SeekResult.BEFORE_BLOCK_FIRST_KEY, SeekResult.BEFORE_FILE_FIRST_KEY, SeekResult.FOUND,
                        SeekResult.IN_RANGE, SeekResult.EOF)
THROW = "throw"  # a backward seek: refused
P = LARGE_KEY_PREFIX


def _start(expected_first: int) -> list[tuple]:
    """The lookups every file of TestHFileReader starts with: before the first key."""
    return [("", F, expected_first), ("as", F, expected_first), ("aa", F, expected_first)]


def _found(*indexes: int, make=key) -> list[tuple]:
    return [(make(i), FOUND, i) for i in indexes]


# (file, entries, key maker, lookups): a lookup is (key, result, index of the entry the cursor is on)
POINT_AND_PREFIX_LOOKUPS = [
    ("hudi_1_0_hbase_2_4_9_16KB_GZ_20000.hfile", 20000, key, [
        *_start(0), ("hudi-key-0000000", F, 0), *_found(0, 99), ("hudi-key-000000098", THROW, None),
        ("hudi-key-00000010", IN, 99), ("hudi-key-000000100a", IN, 100), ("hudi-key-000000100b", IN, 100),
        ("hudi-key-00000020", IN, 199), ("hudi-key-000000200a", IN, 200), ("hudi-key-000000200b", IN, 200),
        *_found(277), ("hudi-key-000000277a", IN, 277), ("hudi-key-000000277b", IN, 277), *_found(278),
        ("hudi-key-000002501a", IN, 2501), ("hudi-key-000002501b", IN, 2501),
        *_found(8340, 13899, 13899, 13900, 13901, 13902, 19500),
        ("hudi-key-0000196", IN, 19599), ("hudi-key-00001960", IN, 19599), ("hudi-key-000019600a", IN, 19600),
        *_found(19998, 19999), ("hudi-key-000019999a", EOF, None), ("hudi-key-000019999b", EOF, None),
    ]),
    ("hudi_1_0_hbase_2_4_13_16KB_GZ_20000_fake_first_key.hfile", 20000, key_with_suffix, [
        *_start(0), ("hudi-key-0000000", F, 0), *_found(0, 99, make=key_with_suffix),
        ("hudi-key-000000098", THROW, None), ("hudi-key-00000010", IN, 99), ("hudi-key-000000100a", IN, 100),
        ("hudi-key-000000100b", IN, 100), ("hudi-key-00000030", IN, 299), ("hudi-key-000000300", IN, 299),
        ("hudi-key-000000300a", IN, 300), *_found(469, make=key_with_suffix), ("hudi-key-000000469a", IN, 469),
        ("hudi-key-000000469b", IN, 469),
        # block 2: index key "hudi-key-00000047" (shortened), first key hudi-key-000000470-abcdefghij
        ("hudi-key-00000047", B, 470), ("hudi-key-000000470", B, 470), ("hudi-key-000000473", IN, 472),
        # block 29: index key hudi-key-000006815; a backward seek within [index key, first key) is allowed
        ("hudi-key-000006815-aaa", B, 6815), ("hudi-key-000006815-aaa", B, 6815), ("hudi-key-000006815-aa", B, 6815),
        ("hudi-key-000006815", B, 6815), ("hudi-key-000006814", THROW, None), ("hudi-key-000006815-ab", B, 6815),
        *_found(6815, make=key_with_suffix), ("hudi-key-000006815-ac", IN, 6815), ("hudi-key-000006816", IN, 6815),
        *_found(6816, 13900, 13901, 13902, 19500, make=key_with_suffix),
        ("hudi-key-0000196", IN, 19599), ("hudi-key-00001960", IN, 19599), ("hudi-key-000019600a", IN, 19600),
        *_found(19998, 19999, make=key_with_suffix), ("hudi-key-000019999a", EOF, None),
        ("hudi-key-000019999b", EOF, None),
    ]),
    ("hudi_1_0_hbase_2_4_9_512KB_GZ_20000.hfile", 20000, key, [
        *_start(0), ("hudi-key-0000000", F, 0), *_found(0, 8886), ("hudi-key-000008886a", IN, 8886),
        ("hudi-key-000008886b", IN, 8886), *_found(8888, 8889, 8890), ("hudi-key-0000090", IN, 8999),
        ("hudi-key-00000900", IN, 8999), ("hudi-key-000009000a", IN, 9000), *_found(17773),
        ("hudi-key-000020000", EOF, None), ("hudi-key-000020001", EOF, None),
    ]),
    ("hudi_1_0_hbase_2_4_9_16KB_NONE_5000.hfile", 5000, key, [
        *_start(0), ("hudi-key-0000000", F, 0), *_found(0, 99), ("hudi-key-000000098", THROW, None),
        ("hudi-key-00000010", IN, 99), ("hudi-key-000000100a", IN, 100), ("hudi-key-000000100b", IN, 100),
        ("hudi-key-00000020", IN, 199), ("hudi-key-000000200a", IN, 200), ("hudi-key-000000200b", IN, 200),
        *_found(277), ("hudi-key-000000277a", IN, 277), ("hudi-key-000000277b", IN, 277), *_found(278),
        ("hudi-key-000002501a", IN, 2501), ("hudi-key-000002501b", IN, 2501),
        *_found(3336, 4169, 4169, 4600, 4601, 4602),
        ("hudi-key-0000047", IN, 4699), ("hudi-key-00000470", IN, 4699), ("hudi-key-000004700a", IN, 4700),
        *_found(4998, 4999), ("hudi-key-000004999a", EOF, None), ("hudi-key-000004999b", EOF, None),
    ]),
    ("hudi_1_0_hbase_2_4_9_64KB_NONE_5000.hfile", 5000, key, [
        *_start(0), ("hudi-key-0000000", F, 0), *_found(0, 1110), ("hudi-key-000001110a", IN, 1110),
        ("hudi-key-000001110b", IN, 1110), *_found(1688, 1689, 1690), ("hudi-key-0000023", IN, 2299),
        ("hudi-key-00000230", IN, 2299), ("hudi-key-000002300a", IN, 2300), *_found(3332),
        ("hudi-key-000020000", EOF, None), ("hudi-key-000020001", EOF, None),
    ]),
    # large keys (> 100 bytes): a 2-level data index
    ("hudi_1_0_hbase_2_4_13_1KB_GZ_20000_large_keys.hfile", 20000, large_key, [
        *_start(0), (P + "0000000", F, 0), *_found(0, 5, make=large_key), (P + "000000004", THROW, None),
        (P + "00000010", IN, 99), (P + "000000100a", IN, 100), (P + "000000100b", IN, 100), (P + "00000040", IN, 399),
        (P + "000000400a", IN, 400), (P + "000000400b", IN, 400), *_found(2785, make=large_key),
        (P + "000002785a", IN, 2785), (P + "000002785b", IN, 2785),
        *_found(2786, 5340, 7340, 9340, 13899, 13899, 13900, 13901, 13902, 15902, 17902, 19500, make=large_key),
        (P + "0000196", B, 19600), (P + "00001960", B, 19600), (P + "000019600a", IN, 19600),
        *_found(19998, 19999, make=large_key), (P + "000019999a", EOF, None), (P + "000019999b", EOF, None),
    ]),
    # large keys, index blocks of at most 2 KiB: a 3-level data index
    ("hudi_1_0_hbase_2_4_13_1KB_GZ_10000_large_keys_deep_index.hfile", 10000, large_key, [
        *_start(0), (P + "0000000", F, 0), *_found(0, 5, make=large_key), (P + "000000004", THROW, None),
        (P + "00000010", IN, 99), (P + "000000100a", IN, 100), (P + "000000100b", IN, 100), (P + "00000040", IN, 399),
        (P + "000000400a", IN, 400), (P + "000000400b", IN, 400), *_found(2785, make=large_key),
        (P + "000002785a", IN, 2785), (P + "000002785b", IN, 2785),
        *_found(2786, 3340, 4340, 5340, 6899, 6899, 6900, 6901, 6902, 7902, 8902, make=large_key),
        (P + "0000091", B, 9100), (P + "00000910", B, 9100), (P + "000009100a", IN, 9100),
        *_found(9998, 9999, make=large_key), (P + "000009999a", EOF, None), (P + "000009999b", EOF, None),
    ]),
    # ... and a 4-level one
    ("hudi_1_0_hbase_2_4_13_1KB_GZ_50000_large_keys_deep_index.hfile", 50000, large_key, [
        *_start(0), (P + "0000000", F, 0), *_found(0, 5, make=large_key), (P + "000000004", THROW, None),
        (P + "00000010", IN, 99), (P + "000000100a", IN, 100), (P + "000000100b", IN, 100), (P + "00000040", IN, 399),
        (P + "000000400a", IN, 400), (P + "000000400b", IN, 400), *_found(2785, make=large_key),
        (P + "000002785a", IN, 2785), (P + "000002785b", IN, 2785),
        *_found(2786, 5340, 10340, 19340, 23899, 23899, 23900, 23901, 23902, 30902, 37902, 39500, make=large_key),
        (P + "0000448", B, 44800), (P + "00004480", B, 44800), (P + "000044800a", IN, 44800),
        *_found(49998, 49999, make=large_key), (P + "000049999a", EOF, None), (P + "000049999b", EOF, None),
    ]),
]


def check_sequential_reads(reader: HFileReader, n: int, make_key, make_value) -> None:
    """Hudi's verifyHFileValuesInSequentialReads: next() through every entry, then seek_to every
    key (FOUND, on that entry)."""
    cursor = reader.cursor()
    assert not cursor.is_seeked and not cursor.next()
    assert cursor.seek_to_first() == (n > 0)
    for i in range(n):
        k, v = cursor.key_value
        assert k == make_key(i).encode()
        if make_value is not None:
            assert v == make_value(i).encode()
        assert cursor.next() == (i < n - 1)
    if make_key is not None:
        assert cursor.seek_to_first() == (n > 0)
        for i in range(n):
            assert cursor.seek_to(make_key(i)) == FOUND
            k, v = cursor.key_value
            assert k == make_key(i).encode()
            if make_value is not None:
                assert v == make_value(i).encode()


def check_seeks(reader: HFileReader, lookups: list[tuple], make_key, make_value=value) -> None:
    """Hudi's verifyHFileSeekToReads: from the first entry, each lookup in turn gives its result
    and leaves the cursor on the expected entry (nowhere at EOF; unmoved after a refused
    backward seek)."""
    cursor = reader.cursor()
    assert cursor.seek_to_first()
    for lookup, result, expected in lookups:
        if result == THROW:
            before = cursor.key_value
            with pytest.raises(ValueError, match="moves forward only"):
                cursor.seek_to(lookup)
            assert cursor.key_value == before
            continue
        assert cursor.seek_to(lookup) == result, lookup
        if result == EOF:
            assert cursor.key_value is None and not cursor.next()
        else:
            want = expected if isinstance(expected, tuple) else (make_key(expected), make_value(expected))
            assert cursor.key_value == (want[0].encode(), want[1].encode()), lookup


@pytest.mark.parametrize("name,entries,make_key,lookups", POINT_AND_PREFIX_LOOKUPS,
                         ids=[case[0] for case in POINT_AND_PREFIX_LOOKUPS])
def test_point_and_prefix_lookups(name: str, entries: int, make_key, lookups: list[tuple]) -> None:
    reader = HFileReader(vector(name), name)
    assert reader.entry_count == entries
    assert reader.file_info[CUSTOM_META_KEY] == CUSTOM_META_VALUE
    assert reader.meta_block("bloomFilter") == DUMMY_BLOOM_FILTER
    check_sequential_reads(reader, entries, make_key, value)
    check_seeks(reader, lookups, make_key)
    table = reader.read()  # the whole file at once holds the same
    assert table.column("key").to_pylist() == [make_key(i).encode() for i in range(entries)]
    assert table.column("value").to_pylist() == [value(i).encode() for i in range(entries)]


def test_non_unique_keys() -> None:
    """TestHFileReader.testReadHFileWithNonUniqueKeys: 200 keys, each once with its value and 20
    times more with `_0` to `_19`; a seek finds the first, and does not move off an equal key."""
    reader = HFileReader(vector("hudi_1_0_hbase_2_4_9_16KB_GZ_200_20_non_unique.hfile"))
    assert reader.entry_count == 4200
    assert reader.file_info[CUSTOM_META_KEY] == CUSTOM_META_VALUE
    assert reader.meta_block("bloomFilter") == DUMMY_BLOOM_FILTER
    cursor = reader.cursor()
    assert not cursor.is_seeked and not cursor.next() and cursor.seek_to_first()
    for i in range(200):
        assert cursor.key_value == (key(i).encode(), value(i).encode())
        assert cursor.next()
        for j in range(20):
            assert cursor.key_value == (key(i).encode(), f"{value(i)}_{j}".encode())
            assert cursor.next() == (not (i == 199 and j == 19))
    assert cursor.seek_to_first()
    for i in range(200):
        assert cursor.seek_to(key(i)) == FOUND
        assert cursor.key_value == (key(i).encode(), value(i).encode())
        assert cursor.next()
        assert cursor.seek_to(key(i)) == FOUND  # already on an equal key: stays
        assert cursor.key_value == (key(i).encode(), f"{value(i)}_0".encode())

    def last_dup(i: int) -> tuple[str, str]:
        return key(i), f"{value(i)}_19"

    check_seeks(reader, [
        ("", F, 0), ("a", F, 0), ("hudi-key-0000000", F, 0), *_found(0, 5), ("hudi-key-000000004", THROW, None),
        ("hudi-key-000000006a", IN, last_dup(6)), ("hudi-key-000000006b", IN, last_dup(6)),
        ("hudi-key-000000008a", IN, last_dup(8)), ("hudi-key-000000008b", IN, last_dup(8)), *_found(12),
        ("hudi-key-000000012a", IN, last_dup(12)), ("hudi-key-000000012b", IN, last_dup(12)), *_found(13),
        ("hudi-key-000000064a", IN, last_dup(64)), ("hudi-key-000000064b", IN, last_dup(64)),
        *_found(104, 155, 155, 156, 157, 158), ("hudi-key-00000019", IN, last_dup(189)),
        ("hudi-key-000000190a", IN, last_dup(190)), *_found(198, 199),
        ("hudi-key-000000199a", EOF, None), ("hudi-key-000000199b", EOF, None),
    ], key)
    assert reader.get(key(7)) == value(7).encode()  # the first of equal keys


def test_file_without_entries() -> None:
    """TestHFileReader.testReadHFileWithoutKeyValueEntries and hudi-rs's empty-file tests."""
    reader = HFileReader(vector("hudi_1_0_hbase_2_4_9_no_entry.hfile"))
    assert reader.entry_count == 0 and reader.last_key is None
    cursor = reader.cursor()
    assert not cursor.is_seeked and not cursor.next()
    assert not cursor.seek_to_first() and cursor.is_seeked and not cursor.next()
    assert cursor.seek_to("random") == EOF and not cursor.next() and cursor.key_value is None
    assert reader.read().num_rows == 0 and list(reader.scan()) == [] and reader.get("random") is None
    assert reader.file_info[info.MIN_RECORD_KEY] == b"" and reader.file_info[info.MAX_RECORD_KEY] == b""
    assert reader.meta_block_names == ["bloomFilter"]


@pytest.mark.parametrize("release", ["hudi_0_9_hbase_1_2_3", "hudi_0_10_hbase_1_2_3", "hudi_0_11_hbase_2_4_9"])
def test_files_of_older_releases(release: str) -> None:
    """TestHFileReader.testReadHFileCompatibility: a simple and a complex base file (50 keys
    key00..key49) and a bootstrap index file (4 entries) written by Hudi 0.9 to 0.11."""
    for kind, entries in (("simple", 50), ("complex", 50), ("bootstrap_index_partitions", 4)):
        reader = HFileReader(vector(f"{release}_{kind}.hfile"))
        assert reader.entry_count == entries
        if kind == "bootstrap_index_partitions":
            keys = [k for k, _ in reader.scan()]
            assert keys == [f"part=2020/03/{day}".encode() for day in (18, 19, 20, 21)]
            assert reader.file_info["INDEX_INFO"].startswith(b"Obj\x01")  # an Avro container
            continue
        check_sequential_reads(reader, entries, lambda i: f"key{i:02d}", None)
        assert reader.file_info[info.MIN_RECORD_KEY] == b"key00" and reader.file_info[info.MAX_RECORD_KEY] == b"key49"
        assert reader.file_info[info.BLOOM_FILTER_TYPE_CODE] == b"DYNAMIC_V0"
        assert reader.file_info[info.SCHEMA].startswith(b'{"type":"record","name":"trip"')
        assert reader.compression is Compression.GZ and reader.meta_block_names == ["bloomFilter"]


@pytest.mark.parametrize("name", ["hudi-generated.hfile", "hbase-generated.hfile"])
def test_files_written_by_hudi_and_by_hbase(name: str) -> None:
    """TestHFileCompatibility: the same five records written by Hudi's writer and by HBase's read
    the same; the file info holds the last key (HBase's with the KeyValue key's ten extra bytes),
    the average lengths, the key-value version, and MVCC timestamp 0."""
    reader = HFileReader(vector(name))
    assert reader.entry_count == 5
    assert list(reader.scan()) == [(f"row{i}".encode(), f"value{i}".encode()) for i in range(1, 6)]
    last = reader.file_info[info.LAST_KEY]
    assert last[:6] == b"\x00\x04row5" and len(last) == (6 if name.startswith("hudi") else 16)
    assert reader.last_key == b"row5"
    assert int.from_bytes(reader.file_info[info.AVG_VALUE_LEN], "big") == 6
    assert int.from_bytes(reader.file_info[info.KEY_VALUE_VERSION], "big") == 1
    assert reader.file_info[info.MAX_MEMSTORE_TS_KEY] == bytes(8)
    assert reader.meta_block("bloom_filter") == (b"random_string" if name.startswith("hudi") else None)


@pytest.mark.parametrize("name", hudi_io_names())
def test_every_vector_reads_the_same_every_way(name: str) -> None:
    """Every vector: as many entries as the trailer says, keys in order, and the same entries
    whether read whole, scanned, walked with the cursor, or read from a file a block at a time."""
    data = vector(name)
    reader = HFileReader(data, name)
    table = reader.read()
    assert table.num_rows == reader.entry_count
    keys = table.column("key").to_pylist()
    assert keys == sorted(keys)
    assert list(reader.scan()) == list(zip(keys, table.column("value").to_pylist(), strict=True))
    from_file = HFileReader(pa.BufferReader(data), name)
    assert from_file.read().equals(table) and from_file.file_info == reader.file_info
    assert pa.concat_tables(list(reader.batches())).equals(table) if table.num_rows else True


def test_hudi_rs_lookups_and_prefix_scans() -> None:
    """hudi-rs's lookup_records and collect_records_by_prefix on its 16KB NONE file."""
    reader = HFileReader(vector("hudi_1_0_hbase_2_4_9_16KB_NONE_5000.hfile"))
    assert reader.get_many(["hudi-key-000000000", "hudi-key-000000100", "hudi-key-nonexistent"]) == {
        b"hudi-key-000000000": b"hudi-value-000000000", b"hudi-key-000000100": b"hudi-value-000000100"}
    assert reader.get_many([]) == {} and reader.get_many(["nonexistent-key"]) == {}
    assert [k for k, _ in reader.scan("hudi-key-00000010")] == [key(i).encode() for i in range(100, 110)]
    assert [k for k, _ in reader.scan("hudi-key-00000000")] == [key(i).encode() for i in range(10)]
    assert list(reader.scan("nonexistent-prefix-")) == []
    assert reader.read("hudi-key-00000012").column("key").to_pylist() == [key(i).encode() for i in range(120, 130)]
    assert [k for k, _ in reader.scan(start="hudi-key-000004997")] == [key(i).encode() for i in (4997, 4998, 4999)]
    assert info.LAST_KEY in reader.file_info and "nonexistent.key" not in reader.file_info
    assert info.MIN_RECORD_KEY not in reader.file_info and info.SCHEMA not in reader.file_info
    gz = HFileReader(vector("hudi_1_0_hbase_2_4_9_16KB_GZ_20000.hfile"))
    wanted = [key(i) for i in (0, 5000, 10000, 15000, 19999)]
    assert gz.get_many([*wanted, "hudi-key-nonexistent"]) == {k.encode(): value(int(k[-9:])).encode() for k in wanted}


def test_metadata_table_files_partition() -> None:
    """hudi-rs's metadata table HFile tests on v8_trips_8i3u1d's `files` partition: four keys,
    values that are HoodieMetadataRecord Avro, the key range and schema in the file info."""
    reader = HFileReader(vector(TRIPS_FILES), TRIPS_FILES)
    assert reader.entry_count == 4
    keys = [b"__all_partitions__", b"city=chennai", b"city=san_francisco", b"city=sao_paulo"]
    assert [k for k, _ in reader.scan()] == keys
    assert all(len(v) > 50 for _, v in reader.scan())
    assert [k for k, _ in reader.scan("city=")] == keys[1:]
    assert reader.get("city=san_francisco") == dict(reader.scan())[b"city=san_francisco"]
    cursor = reader.cursor()
    assert cursor.seek_to_first() and cursor.seek_to("AAA") == F and cursor.seek_to("zzz") == EOF
    assert cursor.seek_to_first() and cursor.seek_to("city=berlin") == IN
    assert cursor.key_value[0] == b"__all_partitions__"
    assert reader.file_info[info.MIN_RECORD_KEY] == b"__all_partitions__"
    assert reader.file_info[info.MAX_RECORD_KEY] == b"city=sao_paulo"
    assert reader.file_info[info.SCHEMA].startswith(b'{"type":"record","name":"HoodieMetadataRecord"')
    assert reader.meta_block_names == [info.BLOOM_FILTER_BLOCK] and reader.compression is Compression.GZ
    index = HFileReader(vector(TRIPS_RECORD_INDEX))
    [(record_key, payload)] = list(index.scan())
    assert record_key == b"e96c4396-3fad-413a-a942-4cb36106d721" == index.file_info[info.MIN_RECORD_KEY]
    assert index.get(record_key) == payload


def test_metadata_table_log_block() -> None:
    """An HFile data block of the metadata table's log (its content, a whole HFile, behind the
    block's 8-byte content length) decodes to the records the block holds."""
    log = vector(TRIPS_FILES_LOG)
    start = log.index(b"DATABLK*")
    content = log[start:start + int.from_bytes(log[start - 8:start], "big")]
    records = HFileReader(content, TRIPS_FILES_LOG).read()
    assert records.column("key").to_pylist() == [
        b"__all_partitions__", b"city=chennai", b"city=san_francisco", b"city=sao_paulo"]
    assert HFileReader(content).file_info[info.SCHEMA].startswith(b'{"type":"record","name":"HoodieMetadataRecord"')
    assert records.column("value").to_pylist() == [v for _, v in HFileReader(content).scan()]


class CountingFile:
    """A random-access file that counts the reads made of it."""

    def __init__(self, data: bytes) -> None:
        self.data, self.reads = data, []

    def size(self) -> int:
        return len(self.data)

    def read_at(self, nbytes: int, offset: int) -> bytes:
        self.reads.append((offset, nbytes))
        return self.data[offset:offset + nbytes]


@pytest.mark.parametrize("name,levels", [
    ("hudi_1_0_hbase_2_4_9_16KB_GZ_20000.hfile", 1),
    ("hudi_1_0_hbase_2_4_13_1KB_GZ_20000_large_keys.hfile", 2),
    ("hudi_1_0_hbase_2_4_13_1KB_GZ_50000_large_keys_deep_index.hfile", 4),
])
def test_a_point_lookup_reads_one_block_per_index_level(name: str, levels: int) -> None:
    """Opening reads the tail once (trailer and load-on-open section); a lookup then reads one data
    block, and one index block for each level below the root; a second lookup in the same block
    reads nothing more."""
    file = CountingFile(vector(name))
    reader = HFileReader(file, name)
    assert reader.trailer.data_index_levels == levels
    assert len(file.reads) == 1 and file.reads[0][0] + file.reads[0][1] == file.size()
    file.reads.clear()
    target = 12345 if "large" in name else 4321
    make = large_key if "large" in name else key
    assert reader.get(make(target)) == value(target).encode()
    assert len(file.reads) == levels
    data_offset, data_size = file.reads[-1]
    assert file.data[data_offset:data_offset + 8] == b"DATABLK*"
    assert data_size < 20_000  # one block, not a range of them
    file.reads.clear()
    assert reader.get(make(target + 1)) == value(target + 1).encode() and file.reads == []

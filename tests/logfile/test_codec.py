"""Hudi's log file codec: names, every log file of every Hudi-written MOR fixture parsed
to exact blocks, Avro and delete blocks re-encoded byte for byte, blocks we write read back (and
read by the `hudi` reader), torn blocks skipped, HFile and old delete blocks refused by name."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import struct
from itertools import pairwise
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from upsertlake.config.enums import MergeMode
from upsertlake.errors import (
    CorruptTableError,
    SchemaError,
    UnsupportedLogBlockError,
)
from upsertlake.logfile import (
    BlockType,
    Command,
    CommandBlock,
    CorruptBlock,
    DataBlock,
    DeleteBlock,
    HeaderKey,
    LogFileName,
    append_blocks,
    avro_data_blocks,
    block_keys,
    data_block,
    delete_block,
    encode_block,
    hfile_block,
    read_blocks,
    rollback_block,
    sort_log_files,
)
from upsertlake.logfile.avro_records import decode_records, decode_rows, encode_records, encode_rows, with_meta_fields
from upsertlake.logfile.merge import merge_slice
from upsertlake.schema import arrow_to_avro, avro_schema_json

from helpers import HUDI_TABLES, hudi_read, unzip_mor_table

MOR = HUDI_TABLES / "mor"
KEY_COLUMN = "_hoodie_record_key"
V8_KEYS = {  # rider -> record key in the v8 trips fixture
    "A": "334e26e9-8355-45cc-97c6-c31daf0df330",
    "C": "e96c4396-3fad-413a-a942-4cb36106d721",
    "D": "9909a8b1-2d15-4d3d-8ec9-efc48c536a00",
    "F": "e3cf430c-889d-4015-bc98-59bdce1e530c",
    "G": "7a84095f-737f-40bc-b62f-6b69664712d2",
    "J": "c8abbe79-8d89-47ea-b4ce-4d224bae5bfa",
}


def data_log_files(table: Path) -> list[Path]:
    """The table's data log files (the metadata table's left out), by relative path."""
    return sorted(p for p in table.rglob(".*.log.*") if ".hoodie" not in p.parts)


def summary(path: Path) -> list[tuple]:
    """(kind, instant, record keys) of each block of a log file."""
    out: list[tuple] = []
    for b in read_blocks(path.read_bytes(), path.name):
        if isinstance(b, DataBlock):
            out.append((b.block_type.name, b.instant, b.records.column("_hoodie_record_key").to_pylist()))
        elif isinstance(b, DeleteBlock):
            out.append(
                (
                    "DELETE",
                    b.instant,
                    b.keys.column("record_key").to_pylist(),
                    b.keys.column("natural_order").to_pylist(),
                )
            )
        else:
            out.append((type(b).__name__,))
    return out


# ---- names ----------------------------------------------------------------------------------------


def test_log_file_names_parse_and_format_exactly(tmp_path: Path) -> None:
    names = []
    for zip_path in sorted(MOR.glob("*.zip")):
        names += [p.name for p in unzip_mor_table(zip_path.stem, tmp_path / zip_path.stem).rglob(".*.log.*")]
    assert len(names) == 71  # 8 data log files, 63 in the v8 table's metadata table
    for name in names:
        parsed = LogFileName.parse(name)
        assert parsed is not None and parsed.format() == name
    n = LogFileName.parse(".8aa68f7e-afd6-4c94-b86c-8a886552e08d-0_20251220210130911.log.1_0-1139-3316")
    assert n == LogFileName("8aa68f7e-afd6-4c94-b86c-8a886552e08d-0", "20251220210130911", 1, "0-1139-3316", "")
    cdc = LogFileName.parse(".f1-0_001.log.2_1-2-3.cdc")
    assert cdc == LogFileName("f1-0", "001", 2, "1-2-3", ".cdc") and cdc.is_cdc
    assert LogFileName.parse(".col-stats-0000-0_00000000000000001.log.1_0-0-0").file_id == "col-stats-0000-0"
    for not_a_log in (
        "8aa68f7e-afd6-4c94-b86c-8a886552e08d-0_2-1112-3192_20251220210129235.parquet",
        ".hoodie_partition_metadata",
        ".f1-0_001.archive.1_1-0-1",
        "f1-0_001.log.1_1-0-1",
        ".f1-0_001.log.1",
        ".f1-0_001.log.x_1-0-1",
        ".f1-0_001.log.1_1-0-1.crc",
    ):
        assert LogFileName.parse(not_a_log) is None, not_a_log


def test_log_files_sort_by_instant_then_version_then_write_token() -> None:
    def n(instant: str, version: int, token: str) -> LogFileName:
        return LogFileName("f-0", instant, version, token)

    logs = [
        n("002", 1, "0-1-1"),
        n("001", 10, "0-1-1"),
        n("001", 2, "2-1-1"),
        n("001", 2, "10-1-1"),
        n("001", 2, "0-9-9"),
    ]
    assert sort_log_files(logs) == [logs[4], logs[3], logs[2], logs[1], logs[0]]  # tokens compare as strings
    assert n("001", 1, "0-1-1").next_version("1-2-3") == n("001", 2, "1-2-3")


# ---- every fixture's log files ----------------------------------------------------------------------


def test_every_fixture_log_file_parses_to_its_blocks(tmp_path: Path) -> None:
    got = {}
    for zip_path in sorted(MOR.glob("*.zip")):
        table = unzip_mor_table(zip_path.stem, tmp_path / zip_path.stem)
        for p in data_log_files(table):
            got[f"{zip_path.stem}/{p.parent.name}/{p.name}"] = summary(p)
    v8 = "mor_v8_trips_8i3u1d"
    assert got == {
        "mor_v6_nonpartitioned/v6_nonpartitioned/"
        ".d206069c-22c8-4532-b9ea-3cf4282342c4-0_20250117083125837.log.1_0-33-43": [
            ("PARQUET_DATA", "20250117083136333", ["1"])
        ],
        "mor_v6_simplekeygen_nonhivestyle/10/.26e33b7b-aa9f-4f2e-b683-a90ef0d5861d-0_20250121000547796.log.1_0-33-47": [
            ("PARQUET_DATA", "20250121000557095", ["1"])
        ],
        "mor_v6_trips_8i1u/city=san_francisco/"
        ".d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0_20250331030642808.log.1_0-26-85": [
            ("AVRO_DATA", "20250331030645735", [V8_KEYS["D"]])
        ],
        f"{v8}/city=chennai/.6e1d5cc4-c487-487d-abbe-fe9b30b1c0cc-0_20251220210127080.log.1_0-1072-3078": [
            ("AVRO_DATA", "20251220210127080", [V8_KEYS["J"]])
        ],
        f"{v8}/city=chennai/.6e1d5cc4-c487-487d-abbe-fe9b30b1c0cc-0_20251220210128625.log.1_0-1097-3150": [
            ("DELETE", "20251220210128625", [V8_KEYS["J"]], [True])
        ],
        f"{v8}/city=san_francisco/.036ded81-9ed4-479f-bcea-7145dfa0079b-0_20251220210123755.log.1_0-1022-2928": [
            ("AVRO_DATA", "20251220210123755", [V8_KEYS["A"]])
        ],
        f"{v8}/city=sao_paulo/.8aa68f7e-afd6-4c94-b86c-8a886552e08d-0_20251220210125441.log.1_0-1047-3000": [
            ("DELETE", "20251220210125441", [V8_KEYS["F"]], [True])
        ],
        f"{v8}/city=sao_paulo/.8aa68f7e-afd6-4c94-b86c-8a886552e08d-0_20251220210130911.log.1_0-1139-3316": [
            ("AVRO_DATA", "20251220210130911", [V8_KEYS["G"]])
        ],
    }


def test_fixture_records_decode_to_their_values(tmp_path: Path) -> None:
    table = unzip_mor_table("mor_v6_nonpartitioned", tmp_path)
    (block,) = read_blocks(data_log_files(table)[0].read_bytes())
    row = block.records.to_pylist()[0]
    assert {
        k: row[k] for k in ("_hoodie_commit_seqno", "id", "name", "isActive", "longField", "decimalField", "dateField")
    } == {
        "_hoodie_commit_seqno": "20250117083136333_0_1",
        "id": 1,
        "name": "Alice",
        "isActive": False,
        "longField": 1234567890,
        "decimalField": decimal.Decimal("12345.67890"),
        "dateField": dt.date(2023, 4, 1),
    }
    assert row["mapField"] == [("key1", {"map_field_value_struct_f1": 123.456, "map_field_value_struct_f2": True}),
                               ("key2", {"map_field_value_struct_f1": 789.012, "map_field_value_struct_f2": False})]
    trips = unzip_mor_table("mor_v6_trips_8i1u", tmp_path / "trips")
    (avro,) = read_blocks(data_log_files(trips)[0].read_bytes())
    assert avro.records.select(["ts", "rider", "driver", "fare", "city"]).to_pylist() == [
        {"ts": 1695046462179, "rider": "rider-D", "driver": "driver-L", "fare": 25.0, "city": "san_francisco"}
    ]
    assert avro.records.schema.field("ts").type == pa.int64()
    assert list(avro.header) == [HeaderKey.INSTANT_TIME, HeaderKey.SCHEMA]


# ---- writing: byte-identical to Hudi, and read back ----------------------------------------------


def test_avro_and_delete_blocks_reencode_byte_for_byte(tmp_path: Path) -> None:
    checked = 0
    for zip_path in sorted(MOR.glob("*.zip")):
        for p in data_log_files(unzip_mor_table(zip_path.stem, tmp_path / zip_path.stem)):
            data = p.read_bytes()
            blocks = read_blocks(data)
            if all(getattr(b, "block_type", None) != BlockType.PARQUET_DATA for b in blocks):
                assert append_blocks(blocks) == data, p.name
                checked += 1
    assert checked == 6  # 4 Avro data blocks, 2 delete blocks


def test_parquet_blocks_reencode_to_the_same_records_and_header(tmp_path: Path) -> None:
    for name in ("mor_v6_nonpartitioned", "mor_v6_simplekeygen_nonhivestyle"):
        (p,) = data_log_files(unzip_mor_table(name, tmp_path / name))
        data = p.read_bytes()
        (block,) = read_blocks(data)
        again = encode_block(block)
        header_end = data.index(block.schema_json.encode()) + len(block.schema_json)
        assert again[4 + 18 : header_end] == data[4 + 18 : header_end]  # format version, type, header
        (back,) = read_blocks(again)
        assert back.records.equals(block.records) and back.header == block.header
        assert back.block_type == BlockType.PARQUET_DATA


def test_the_writer_schema_is_hudis(tmp_path: Path) -> None:
    trips = unzip_mor_table("mor_v6_trips_8i1u", tmp_path)
    commit = json.loads((trips / ".hoodie" / "20250331030645735.deltacommit").read_text())
    (block,) = read_blocks(data_log_files(trips)[0].read_bytes())
    assert avro_schema_json(with_meta_fields(json.loads(commit["extraMetadata"]["schema"]))) == block.schema_json


def random_table(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    valid = rng.random(n) > 0.3

    def nullable(values: list, t: pa.DataType) -> pa.Array:
        return pa.array([v if ok else None for v, ok in zip(values, valid)], t)

    big = rng.integers(-(2**62), 2**62, n)
    small = rng.integers(-(2**31), 2**31, n)
    texts = ["".join(chr(c) for c in rng.integers(32, 0x2FF, rng.integers(0, 12))) for _ in range(n)]
    return pa.table(
        {
            "_hoodie_commit_time": pa.array(["20250101000000000"] * n),
            "_hoodie_record_key": pa.array([f"k{i}" for i in range(n)]),
            "id": pa.array(big, pa.int64()),
            "small": nullable(small.tolist(), pa.int32()),
            "extreme": pa.array(np.array([-(2**63), 2**63 - 1, 0, -1, 63, 64, -64, -65] * n)[:n], pa.int64()),
            "f": nullable(rng.random(n).astype(np.float32).tolist(), pa.float32()),
            "d": pa.array(rng.standard_normal(n)),
            "flag": nullable((rng.random(n) < 0.5).tolist(), pa.bool_()),
            "text": nullable(texts, pa.string()),
            "blob": pa.array([bytes(rng.integers(0, 256, i % 7, dtype=np.uint8)) for i in range(n)], pa.binary()),
            "amount": nullable(
                [decimal.Decimal(int(x)).scaleb(-5) for x in rng.integers(-(10**14), 10**14, n)], pa.decimal128(20, 5)
            ),
            "day": nullable(
                [dt.date(1970, 1, 1) + dt.timedelta(days=int(x)) for x in rng.integers(-5000, 30000, n)], pa.date32()
            ),
            "at": pa.array(rng.integers(-(10**15), 10**15, n), pa.timestamp("us", tz="UTC")),
            "local": nullable(rng.integers(0, 10**12, n).tolist(), pa.timestamp("ms")),
        }
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_vectorized_avro_encoder_writes_fastavros_bytes(seed: int) -> None:
    table = random_table(500, seed)
    schema = with_meta_fields(arrow_to_avro(table.schema, "t"))
    fields = {f["name"]: f for f in schema["fields"]}
    fields["small"]["type"] = ["int", "null"]  # a union with null second, as some Hudi schemas have
    schema_json = avro_schema_json(schema)
    fast = encode_records(table, schema_json)
    assert fast == encode_rows(table, schema_json)
    assert encode_records(table.slice(7, 100), schema_json) == encode_rows(table.slice(7, 100), schema_json)
    (block,) = read_blocks(encode_block(data_block("20250101000000000", table, schema_json)))
    assert block.records.select(table.column_names).equals(table.cast(block.records.select(table.column_names).schema))
    assert block.records.column("_hoodie_commit_seqno").null_count == 500  # absent from the table: written null
    assert decode_records(fast, 500, schema_json).equals(decode_rows(fast, 500, schema_json))  # numpy == fastavro


def test_records_that_do_not_fit_their_schema_are_corrupt() -> None:
    table = pa.table({"_hoodie_record_key": ["a", "b"], "n": pa.array([1, None], pa.int64())})
    schema_json = avro_schema_json(with_meta_fields(arrow_to_avro(table.schema, "t")))
    payload = bytearray(encode_records(table, schema_json))
    assert decode_records(bytes(payload), 2, schema_json).select(table.column_names).equals(table)
    payload[4] = 6  # the first field's union branch: 3, of a two-branch union
    with pytest.raises(CorruptTableError, match="union branch index out of range"):
        decode_records(bytes(payload), 2, schema_json)
    good = encode_records(table, schema_json)
    first = int.from_bytes(good[:4], "big")
    padded = (first + 1).to_bytes(4, "big") + good[4 : 4 + first] + b"\x00" + good[4 + first :]  # a byte too many
    with pytest.raises(CorruptTableError, match="do not end where their lengths say"):
        decode_records(padded, 2, schema_json)


def test_nested_records_round_trip_through_fastavro() -> None:
    table = pa.table(
        {
            "_hoodie_record_key": ["a", "b"],
            "tags": pa.array([["x", None], []], pa.list_(pa.field("element", pa.string()))),
            "attrs": pa.array([[("k", 1.5)], None], pa.map_(pa.string(), pa.field("value", pa.float64()))),
            "point": pa.array([{"x": 1, "y": None}, None], pa.struct([("x", pa.int32()), ("y", pa.int32())])),
        }
    )
    schema_json = avro_schema_json(with_meta_fields(arrow_to_avro(table.schema, "nested")))
    (block,) = read_blocks(encode_block(data_block("001", table, schema_json)))
    assert block.records.select(table.column_names).to_pylist() == table.to_pylist()


def test_delete_and_rollback_blocks_round_trip() -> None:
    keys = pa.table(
        {
            "record_key": ["a", "b", "c"],
            "partition_path": ["p=1", "p=1", None],
            "ordering_value": pa.array([5, None, 2**40], pa.int64()),
            "natural_order": [False, True, False],
        }
    )
    log = append_blocks([delete_block("002", keys), rollback_block("003", "002")])
    deletes, command = read_blocks(log)
    assert deletes.keys.to_pylist() == [
        {"record_key": "a", "partition_path": "p=1", "ordering_value": 5, "natural_order": False},
        {"record_key": "b", "partition_path": "p=1", "ordering_value": None, "natural_order": True},
        {"record_key": "c", "partition_path": None, "ordering_value": 2**40, "natural_order": False},
    ]
    assert command == CommandBlock("003", "002", Command.ROLLBACK)
    assert command.header == {
        HeaderKey.INSTANT_TIME: "003",
        HeaderKey.TARGET_INSTANT_TIME: "002",
        HeaderKey.COMMAND_BLOCK_TYPE: "0",
    }
    # a delete without ordering values is Hudi's plain delete: IntWrapper(0), union branch 2, value 0
    plain = encode_block(delete_block("004", pa.table({"record_key": ["k"], "partition_path": ["p"]})))
    assert b"\x02\x02\x02k\x02\x02p\x04\x00\x00" in plain
    (back,) = read_blocks(plain)
    assert back.keys.column("natural_order").to_pylist() == [True]
    dated = pa.table({"record_key": ["k"], "partition_path": ["p"], "ordering_value": pa.array([dt.date(2024, 2, 29)])})
    assert read_blocks(encode_block(delete_block("005", dated)))[0].keys.column("ordering_value").to_pylist() == [
        dt.date(2024, 2, 29)
    ]


def test_deletes_of_a_table_ordered_by_several_fields_carry_hudi_1_1s_array_wrapper() -> None:
    """A delete's ordering value by several fields (a struct of them, in order) is written as
    Hudi 1.1.1's HoodieDeleteRecord writes an ArrayComparable: union branch 12 (ArrayWrapper), its
    wrappedValues array of wrapped values, a null as the null branch; and reads back so."""
    values = pa.StructArray.from_arrays(
        [pa.array([5, 7, None], pa.int64()), pa.array([None, "x", None], pa.string())], names=["ts", "seq"]
    )
    keys = pa.table({"record_key": ["k", "m", "n"], "partition_path": ["p", "p", "p"], "ordering_value": values,
                     "natural_order": [False, False, True]})
    block = encode_block(delete_block("006", keys))
    # k: ArrayWrapper (branch 12), wrappedValues present (branch 1), 2 items: LongWrapper 5, null
    assert b"\x02\x02k\x02\x02p\x18\x02\x04\x06\x0a\x00\x00" in block
    # m: LongWrapper 7, StringWrapper "x" (branch 7); n: natural, IntWrapper(0)
    assert b"\x02\x02m\x02\x02p\x18\x02\x04\x06\x0e\x0e\x02x\x00\x02\x02n\x02\x02p\x04\x00" in block
    (back,) = read_blocks(block)
    assert back.keys.column("ordering_value").to_pylist() == [{"0": 5, "1": None}, {"0": 7, "1": "x"}, None]
    assert back.keys.column("natural_order").to_pylist() == [False, False, True]
    assert back.keys.column("ordering_value").type == pa.struct([("0", pa.int64()), ("1", pa.string())])


def test_an_hfile_block_in_a_data_tables_log_is_refused_not_skipped() -> None:
    """HFile blocks are the metadata table's: in a data table's log (Hudi's HFile base format,
    which upsertlake does not read) its keys and merge refuse it by name."""
    log = encode_block(hfile_block("001", pa.table({"key": [b"k"], "value": [b"v"]}), "{}"))
    blocks = read_blocks(log, "log")
    with pytest.raises(UnsupportedLogBlockError, match="log: block at byte 0: an HFile data block in a data table"):
        block_keys(blocks)
    with pytest.raises(UnsupportedLogBlockError, match="an HFile data block in a data table"):
        merge_slice(None, blocks, "_hoodie_record_key", None, MergeMode.COMMIT_TIME, {"001"})


def test_old_delete_blocks_and_unknown_blocks_are_refused_by_name() -> None:
    block = bytearray(encode_block(delete_block("001", pa.table({"record_key": ["k"], "partition_path": ["p"]}))))
    content_at = block.index(b"\x00\x00\x00\x03\x00\x00\x00")
    block[content_at : content_at + 4] = struct.pack(">i", 2)  # a Java-serialized (Kryo) version-2 block
    with pytest.raises(UnsupportedLogBlockError, match="block at byte 0: delete block version 2: only version 3"):
        read_blocks(bytes(block), "log")
    cdc = bytearray(encode_block(rollback_block("002", "001")))
    cdc[18:22] = struct.pack(">i", BlockType.CDC_DATA)
    with pytest.raises(UnsupportedLogBlockError, match="a CDC_DATA block is not read"):
        read_blocks(bytes(cdc))
    cdc[18:22] = struct.pack(">i", 9)
    with pytest.raises(UnsupportedLogBlockError, match="unknown log block type 9"):
        read_blocks(bytes(cdc))


# ---- corrupt blocks ---------------------------------------------------------------------------------


def three_block_log() -> tuple[bytes, list[bytes]]:
    table = pa.table({"_hoodie_record_key": ["a", "b"], "v": [1, 2]})
    schema_json = avro_schema_json(with_meta_fields(arrow_to_avro(table.schema, "t")))
    parts = [
        encode_block(data_block("001", table, schema_json)),
        encode_block(delete_block("002", pa.table({"record_key": ["a"], "partition_path": [""]}))),
        encode_block(data_block("003", table.slice(1), schema_json)),
    ]
    return b"".join(parts), parts


def test_a_torn_last_block_is_skipped() -> None:
    log, parts = three_block_log()
    torn = log[: len(parts[0]) + len(parts[1]) + len(parts[2]) // 2]
    blocks = read_blocks(torn)
    assert [type(b) for b in blocks] == [DataBlock, DeleteBlock, CorruptBlock]
    start = len(parts[0]) + len(parts[1]) + 6
    assert blocks[2] == CorruptBlock(start, len(torn) - start)
    assert [type(b) for b in read_blocks(log[:-3])] == [DataBlock, DeleteBlock, CorruptBlock]  # total length cut
    assert [type(b) for b in read_blocks(log + b"#HU")] == [DataBlock, DeleteBlock, DataBlock]  # under a magic: EOF


def test_a_garbled_block_is_skipped_to_the_next_magic() -> None:
    log, parts = three_block_log()
    bad_size = bytearray(log)
    bad_size[6:14] = struct.pack(">q", 10**9)  # runs past the end
    blocks = read_blocks(bytes(bad_size))
    assert blocks[0] == CorruptBlock(6, len(parts[0]) - 6)
    assert [type(b) for b in blocks[1:]] == [DeleteBlock, DataBlock]
    bad_total = bytearray(log)
    end = len(parts[0])
    bad_total[end - 8 : end] = struct.pack(">q", 1234)  # the trailing total disagrees with the size
    assert [type(b) for b in read_blocks(bytes(bad_total))] == [CorruptBlock, DeleteBlock, DataBlock]
    no_magic_after = bytearray(log)
    no_magic_after[len(parts[0]) : len(parts[0]) + 6] = b"XXXXXX"  # block 1 not followed by a magic
    assert [type(b) for b in read_blocks(bytes(no_magic_after))] == [CorruptBlock, DataBlock]
    garbage_first = b"junk" + log
    assert [type(b) for b in read_blocks(garbage_first)] == [CorruptBlock, DataBlock, DeleteBlock, DataBlock]


def test_a_well_framed_block_with_bad_content_is_a_corrupt_table() -> None:
    table = pa.table({"_hoodie_record_key": ["a"], "v": [1]})
    schema_json = avro_schema_json(with_meta_fields(arrow_to_avro(table.schema, "t")))
    block = bytearray(encode_block(data_block("001", table, schema_json)))
    count_at = block.index(struct.pack(">ii", 3, 1))
    block[count_at + 4 : count_at + 8] = struct.pack(">i", 5)  # claims 5 records
    with pytest.raises(
        CorruptTableError, match=r"f.log: block at byte 0: the lengths of 5 records run past the block.s end"
    ):
        read_blocks(bytes(block), "f.log")


# ---- the `hudi` reader reads what we write -----------------------------------------------------------


def test_the_hudi_reader_reads_blocks_we_append_to_a_hudi_slice(tmp_path: Path) -> None:
    """v6 trips table: a deltacommit of ours appends a log file to the san_francisco slice with an
    update (rider-D), an insert, a delete (rider-A), and blocks of a failed instant voided by a
    rollback block; the `hudi` reader reads our blocks, and merge_slice reads the slice as it does."""
    table = unzip_mor_table("mor_v6_trips_8i1u", tmp_path)
    hoodie = table / ".hoodie"
    slice_dir = table / "city=san_francisco"
    (old_log,) = data_log_files(table)
    name = LogFileName.parse(old_log.name)
    assert name is not None
    new_log = slice_dir / name.next_version("0-1-1").format()
    ours, failed, rollback = "20250331040000000", "20250331035000000", "20250331040000002"
    (old,) = read_blocks(old_log.read_bytes())
    d = old.records.to_pylist()[0]

    def record(instant: str, n: int, **change: object) -> dict:
        return {**d, "_hoodie_commit_time": instant, "_hoodie_commit_seqno": f"{instant}_0_{n}", **change}

    new_key = "00000000-0000-0000-0000-000000000001"
    update = pa.Table.from_pylist(
        [record(ours, 1, fare=99.0), record(ours, 2, _hoodie_record_key=new_key, uuid=new_key, rider="rider-Z")],
        schema=old.records.schema,
    )
    voided = pa.Table.from_pylist([record(failed, 1, fare=1.0)], schema=old.records.schema)
    deletes = pa.table({"record_key": [V8_KEYS["A"]], "partition_path": ["city=san_francisco"]})
    new_log.write_bytes(
        append_blocks(
            [
                data_block(ours, update, old.schema_json),
                delete_block(ours, deletes, old.schema_json),
                data_block(failed, voided, old.schema_json),
                rollback_block(rollback, failed),
            ]
        )
    )
    commit = json.loads((hoodie / "20250331030645735.deltacommit").read_text())
    (stat,) = commit["partitionToWriteStats"]["city=san_francisco"]
    stat.update(path=f"city=san_francisco/{new_log.name}", logFiles=[new_log.name], logVersion=2)
    for suffix in (".deltacommit.requested", ".deltacommit.inflight"):
        (hoodie / f"{ours}{suffix}").write_bytes(b"")
    (hoodie / f"{ours}.deltacommit").write_text(json.dumps(commit))

    hudi = hudi_read(table).filter(pa.compute.equal(pa.compute.field("city"), "san_francisco"))
    base = pq.read_table(next(slice_dir.glob("*.parquet")))
    blocks = [b for p in (old_log, new_log) for b in read_blocks(p.read_bytes())]
    valid = {"20250331030642808", "20250331030645735", ours}
    ours_read = merge_slice(base, blocks, "_hoodie_record_key", "ts", MergeMode.COMMIT_TIME, valid)
    columns = ["_hoodie_commit_time", "rider", "fare"]
    expected = [
        {"_hoodie_commit_time": "20250331030642808", "rider": "rider-C", "fare": 27.7},
        {"_hoodie_commit_time": ours, "rider": "rider-D", "fare": 99.0},
        {"_hoodie_commit_time": "20250331030642808", "rider": "rider-E", "fare": 93.5},
        {"_hoodie_commit_time": ours, "rider": "rider-Z", "fare": 25.0},
    ]
    assert sorted(hudi.select(columns).to_pylist(), key=lambda r: r["rider"]) == expected
    assert sorted(ours_read.select(columns).to_pylist(), key=lambda r: r["rider"]) == expected
    # an instant before the active timeline's start counts as completed (as in Hudi's scanner):
    # then only the rollback block keeps the failed write out
    everything = merge_slice(base, blocks, "_hoodie_record_key", "ts", MergeMode.COMMIT_TIME, lambda _: True)
    assert sorted(everything.select(columns).to_pylist(), key=lambda r: r["rider"]) == expected


def test_blocks_of_unwanted_instants_are_left_out_undecoded() -> None:
    log, _ = three_block_log()
    assert [(type(b).__name__, b.instant) for b in read_blocks(log, keep=lambda i: i != "002")] == [
        ("DataBlock", "001"),
        ("DataBlock", "003"),
    ]
    garbled = bytearray(log + encode_block(rollback_block("004", "003")))
    content_at = garbled.index(struct.pack(">ii", 3, 2), garbled.index(b"]}"))  # the first data block's version, count
    garbled[content_at + 4 : content_at + 8] = struct.pack(">i", 99)
    blocks = read_blocks(bytes(garbled), keep=lambda i: i > "001")  # the bad block is never decoded
    assert [type(b).__name__ for b in blocks] == ["DeleteBlock", "DataBlock", "CommandBlock"]


def test_columns_are_written_in_the_writer_schemas_units_and_scales() -> None:
    schema = pa.schema(
        [
            (KEY_COLUMN, pa.string()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("amount", pa.decimal128(10, 4)),
            ("ms", pa.timestamp("ms")),
        ]
    )
    schema_json = avro_schema_json(with_meta_fields(arrow_to_avro(schema, "t")))
    given = pa.table(
        {
            KEY_COLUMN: ["a"],
            "at": pa.array([1_500], pa.timestamp("ms", tz="UTC")),
            "amount": pa.array([decimal.Decimal("1.5")], pa.decimal128(5, 1)),
            "ms": pa.array([2_000_000], pa.timestamp("us")),
        }
    )
    assert encode_records(given, schema_json) == encode_rows(given, schema_json)
    (block,) = read_blocks(encode_block(data_block("001", given, schema_json)))
    assert block.records.select(schema.names).to_pylist() == [
        {
            KEY_COLUMN: "a",
            "at": dt.datetime(1970, 1, 1, 0, 0, 1, 500_000, tzinfo=dt.timezone.utc),
            "amount": decimal.Decimal("1.5000"),
            "ms": dt.datetime(1970, 1, 1, 0, 0, 2),
        }
    ]
    lossy = given.set_column(3, "ms", pa.array([2_000_001], pa.timestamp("us")))
    with pytest.raises(SchemaError, match="column 'ms': timestamp\\[us\\] values do not convert exactly"):
        encode_records(lossy, schema_json)


@pytest.mark.parametrize("parquet", [False, True], ids=["avro", "parquet"])
def test_the_hudi_reader_reads_nested_records_we_write(tmp_path: Path, parquet: bool) -> None:
    """v6 non-partitioned table (arrays, maps, structs, decimals, dates, timestamps): a deltacommit
    of ours updates id 2 in a data block (Avro or parquet) and deletes id 3."""
    table = unzip_mor_table("mor_v6_nonpartitioned", tmp_path)
    hoodie = table / ".hoodie"
    (old_log,) = data_log_files(table)
    name = LogFileName.parse(old_log.name)
    assert name is not None
    new_log = table / name.next_version("0-1-1").format()
    (old,) = read_blocks(old_log.read_bytes())
    ours = "20250117090000000"
    row = old.records.to_pylist()[0]
    row.update(_hoodie_commit_time=ours, _hoodie_commit_seqno=f"{ours}_0_1", _hoodie_record_key="2", id=2, name="Bobby")
    update = pa.Table.from_pylist([row], schema=old.records.schema)
    gone = pa.table({"record_key": ["3"], "partition_path": [""]})
    blocks = [data_block(ours, update, old.schema_json, parquet=parquet), delete_block(ours, gone, old.schema_json)]
    new_log.write_bytes(append_blocks(blocks))
    for suffix in (".deltacommit.requested", ".deltacommit.inflight"):
        (hoodie / f"{ours}{suffix}").write_bytes(b"")
    (hoodie / f"{ours}.deltacommit").write_bytes((hoodie / "20250117083136333.deltacommit").read_bytes())

    columns = [
        "_hoodie_commit_time",
        "id",
        "name",
        "decimalField",
        "dateField",
        "timestampField",
        "arrayField",
        "mapField",
        "structField",
    ]
    hudi = hudi_read(table).select(columns).sort_by("id").to_pylist()
    assert [(r["id"], r["name"], r["_hoodie_commit_time"]) for r in hudi] == [
        (1, "Alice", "20250117083136333"),
        (2, "Bobby", ours),
        (4, "Diana", "20250117083136333"),
    ]
    assert {k: v for k, v in hudi[1].items() if k not in ("id", "name", "_hoodie_commit_time")} == {
        k: v for k, v in hudi[0].items() if k not in ("id", "name", "_hoodie_commit_time")
    }
    base = pq.read_table(table / "d206069c-22c8-4532-b9ea-3cf4282342c4-0_0-13-23_20250117083125837.parquet")
    log_blocks = [b for p in (old_log, new_log) for b in read_blocks(p.read_bytes())]
    valid = {"20250117083125837", "20250117083136333", ours}
    ours_read = merge_slice(base, log_blocks, KEY_COLUMN, "longField", MergeMode.COMMIT_TIME, valid)
    assert ours_read.select(columns).sort_by("id").to_pylist() == hudi[:2]


def test_avro_data_blocks_encode_each_file_groups_rows_as_a_block_of_its_own() -> None:
    table = random_table(300, 7)
    schema_json = avro_schema_json(with_meta_fields(arrow_to_avro(table.schema, "t")))
    runs = [0, 120, 120, 299, 300]  # an empty run first, one in the middle
    framed = avro_data_blocks("001", table, schema_json, runs)
    cuts = [0, *runs]
    assert framed == [
        encode_block(data_block("001", table.slice(a, b - a), schema_json)) for a, b in pairwise(cuts)
    ]
    nested = pa.table({KEY_COLUMN: ["a", "b", "c"], "tags": pa.array([["x"], [], None], pa.list_(pa.string()))})
    nested_json = avro_schema_json(with_meta_fields(arrow_to_avro(nested.schema, "n")))
    assert [
        read_blocks(b)[0].records.column("tags").to_pylist()
        for b in avro_data_blocks("001", nested, nested_json, [2, 3])
    ] == [
        [["x"], []],
        [None],
    ]


def test_a_slices_log_files_read_together_decode_as_each_alone() -> None:
    """`read_logs` decodes the Avro blocks of several log files (one schema) in one pass: the
    blocks are those `read_blocks` finds in each file; records that run across their block's end
    are decoded block by block, and a damaged block is named as when its file is read alone."""
    from upsertlake.logfile.reader import read_logs

    table = random_table(300, 11)
    schema_json = avro_schema_json(with_meta_fields(arrow_to_avro(table.schema, "t")))
    keys = pa.table({"record_key": ["a"], "partition_path": [""], "natural_order": [True]})
    files = [
        append_blocks([data_block("001", table.slice(0, 100), schema_json)]),
        append_blocks([data_block("002", table.slice(100, 150), schema_json), delete_block("002", keys)]),
        append_blocks(
            [data_block("003", table.slice(250, 0), schema_json), data_block("003", table.slice(250, 50), schema_json)]
        ),
    ]
    named = [(f, f"log{i}") for i, f in enumerate(files)]
    alone = [b for f, name in named for b in read_blocks(f, name)]
    assert [type(b) for b in alone] == [DataBlock, DataBlock, DeleteBlock, DataBlock, DataBlock]
    assert read_logs(named) == alone
    # The second file's first record claims one byte more: its records no longer fit the block.
    records = encode_records(table.slice(100, 150), schema_json)
    at = files[1].index(records)
    (length,) = struct.unpack_from(">i", files[1], at)
    damaged = files[1][:at] + struct.pack(">i", length + 1) + files[1][at + 4 :]
    with pytest.raises(CorruptTableError) as alone_error:
        read_blocks(damaged, "log1")
    with pytest.raises(CorruptTableError) as together_error:
        read_logs([named[0], (damaged, "log1"), named[2]])
    assert str(together_error.value) == str(alone_error.value)
    assert str(alone_error.value).startswith("log1: block at byte 0: ")

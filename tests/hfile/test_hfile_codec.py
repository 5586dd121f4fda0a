"""The HFile codec's parts: Hadoop VInts and protobuf varints, data block entries with tags and
MVCC versions (which HBase can write and Hudi never does), GZ as Java writes it."""

from __future__ import annotations

import gzip as stdlib_gzip
import struct

import pytest

from upsertlake.errors import HFileError
from upsertlake.hfile.blocks import gzip
from upsertlake.hfile.data_block import decode_entries
from upsertlake.hfile.encoding import read_varint, read_vlong, signed64, varint, vint

# WritableUtils.writeVInt of these values, as Hadoop writes them
HADOOP_VINTS = {
    0: "00", 127: "7f", -112: "90", 128: "8f80", 255: "8fff", 256: "8e0100", -113: "8770", -129: "8780",
    2**31 - 1: "8c7fffffff", -(2**31): "847fffffff",
}


@pytest.mark.parametrize("number,encoded", HADOOP_VINTS.items())
def test_hadoop_vint(number: int, encoded: str) -> None:
    assert vint(number).hex() == encoded
    assert read_vlong(bytes.fromhex(encoded) + b"rest", 0, "t") == (number, len(encoded) // 2)


def test_protobuf_varint() -> None:
    for number in (0, 1, 127, 128, 300, 2**32, 2**63 - 1):
        assert read_varint(varint(number), 0, "t") == (number, len(varint(number)))
    assert varint(300).hex() == "ac02"
    assert varint(-1).hex() == "ff" * 9 + "01"  # a Java long -1 as uint64: ten bytes
    assert signed64(read_varint(varint(-1), 0, "t")[0]) == -1
    with pytest.raises(HFileError, match="varint is cut short"):
        read_varint(b"\x80\x80", 0, "t")
    with pytest.raises(HFileError, match="runs past the end"):
        read_vlong(b"\x8c\x01", 0, "t")


def entry(row: bytes, value: bytes, *, family: bytes = b"", qualifier: bytes = b"", tags: bytes | None = None,
          mvcc: bytes | None = b"\x00") -> bytes:
    """One HBase KeyValue as HBase's writer lays it out."""
    key = struct.pack(">H", len(row)) + row + bytes([len(family)]) + family + qualifier + struct.pack(">q", 7) + b"\x04"
    out = struct.pack(">II", len(key), len(value)) + key + value
    if tags is not None:
        out += struct.pack(">H", len(tags)) + tags
    return out + (mvcc or b"")


def test_entries_of_every_shape_decode_the_same() -> None:
    """Rows with a family and qualifier, tags, MVCC versions of several bytes, or no MVCC at all:
    each block decodes to its rows and values (the fast path where it applies, entry by entry
    elsewhere)."""
    rows = [(b"a", b"1"), (b"bb", b""), (b"c" * 300, b"v" * 1000)]
    shapes = [
        ({}, True, False),
        ({"mvcc": None}, False, False),
        ({"family": b"f", "qualifier": b"q"}, True, False),
        ({"tags": b"\x01\x02\x03"}, True, True),
        ({"tags": b""}, True, True),
        ({"mvcc": bytes.fromhex("8e0100")}, True, False),  # MVCC 256, a three-byte VLong
    ]
    for kwargs, mvcc, tags in shapes:
        payload = b"".join(entry(r, v, **kwargs) for r, v in rows)
        block = decode_entries(payload, mvcc, tags, "t")
        assert [(block.key(i), block.value(i)) for i in range(len(block))] == rows, kwargs
        table = block.table()
        assert table.column("key").to_pylist() == [r for r, _ in rows]
        assert table.column("value").to_pylist() == [v for _, v in rows]
        assert block.search(b"bb") == 1 and block.search(b"b") == 1 and block.search(b"d") == 3


def test_java_gzip() -> None:
    """GZ payloads are one gzip member with Java's header (no name or time, OS 255) and deflate at
    level 6; any gzip reader reads them."""
    payload = b"hudi-key-000000001" * 500
    data = gzip(payload)
    assert data[:10] == bytes.fromhex("1f8b08000000000000ff")
    assert stdlib_gzip.decompress(data) == payload
    assert struct.unpack("<II", data[-8:])[1] == len(payload)

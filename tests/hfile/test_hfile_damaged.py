"""Damaged and unsupported HFiles are refused with an HFileError (a CorruptTableError) that names
the file and what is wrong: truncation, a bad magic, a trailer, index or block that contradicts
the file, a damaged gzip stream, a codec or feature Hudi never writes."""

from __future__ import annotations

import dataclasses
import os

import pytest

from upsertlake.errors import CorruptTableError, HFileError
from upsertlake.hfile import HFileReader, write_hfile
from upsertlake.hfile import file_info as info
from upsertlake.hfile.blocks import HEADER_SIZE
from upsertlake.hfile.trailer import TRAILER_SIZE, Compression, encode_trailer

ENTRIES = [(f"key-{i:05d}", f"value-{i}".encode() * 3) for i in range(2000)]


def hfile(codec: str = "NONE", **file_info: bytes) -> bytes:
    return write_hfile(ENTRIES, block_size=4096, compression=codec, file_creation_time=0, file_info=file_info)


def refused(data: bytes, match: str, read=lambda r: r.read()) -> None:
    with pytest.raises(HFileError, match=match) as caught:
        read(HFileReader(data, "t.hfile"))
    assert str(caught.value).startswith("t.hfile")


def with_trailer(data: bytes, **fields) -> bytes:
    trailer = dataclasses.replace(HFileReader(data).trailer, **fields)
    return data[:-TRAILER_SIZE] + encode_trailer(trailer)


def patched(data: bytes, at: int, new: bytes) -> bytes:
    return data[:at] + new + data[at + len(new):]


def test_an_hfile_error_is_a_corrupt_table_error() -> None:
    assert issubclass(HFileError, CorruptTableError)


@pytest.mark.parametrize("size", [0, 10, 4095])
def test_shorter_than_a_trailer(size: int) -> None:
    refused(hfile()[:size], rf"{size} bytes, shorter than the 4096-byte trailer \(truncated\?\)")


def test_truncated_at_the_end_or_cut_at_the_front() -> None:
    data = hfile()
    refused(data[:-1], r"no trailer magic at .* not an HFile, or truncated")
    refused(data[:len(data) // 2], r"no trailer magic")
    refused(data[5000:], r"bad trailer: load-on-open offset \d+ outside the file's")


def test_not_an_hfile() -> None:
    refused(os.urandom(10_000), r"no trailer magic .* not an HFile")
    refused(b"PAR1" + bytes(9000) + b"PAR1", r"no trailer magic")


def test_bad_version() -> None:
    data = hfile()
    refused(data[:-4] + (2).to_bytes(4, "big"), r"HFile version 2\.0; only version 3 is read")


@pytest.mark.parametrize("fields,match", [
    ({"load_on_open_offset": 10**9}, r"bad trailer: load-on-open offset 1000000000 outside"),
    ({"file_info_offset": 3}, r"bad trailer: file info offset 3 outside the load-on-open section"),
    ({"data_index_levels": 0}, r"bad trailer: 0 data index levels"),
    ({"last_data_block_offset": 10**8}, r"bad trailer: data blocks from 0 to 100000000 do not lie before"),
    ({"data_index_count": 0}, r"bad trailer: 2000 entries in 0 indexed data blocks"),
    ({"data_index_count": 10_000}, r"the root index holds fewer than the trailer's 10000 entries"),
    ({"compression": Compression.LZ4}, r"LZ4 compression; Hudi writes and reads NONE and GZ only"),
])
def test_a_trailer_that_contradicts_the_file(fields: dict, match: str) -> None:
    refused(with_trailer(hfile(), **fields), match)


def test_a_trailer_that_misplaces_the_file_info() -> None:
    data = hfile()
    t = HFileReader(data).trailer
    refused(with_trailer(data, file_info_offset=t.file_info_offset - 1),
            rf"bad trailer: the file info is at {t.file_info_offset}, the trailer says {t.file_info_offset - 1}")


def test_bad_block_magic() -> None:
    data = hfile()
    refused(patched(data, 0, b"XXXXXXXX"), r"t\.hfile: block at 0: bad block magic b'XXXXXXXX'",
            lambda r: r.get("key-00000"))
    load_on_open = HFileReader(data).trailer.load_on_open_offset
    refused(patched(data, load_on_open, b"DATABLK*"),
            rf"block at {load_on_open}: a DATA block where a ROOT_INDEX block belongs")
    refused(patched(data, 0, b"DATABLKE"), r"an encoded data block \(HBase data block encoding\)")


def test_damaged_gzip_payload() -> None:
    data = hfile("GZ")
    refused(patched(data, HEADER_SIZE + 12, b"\xde\xad\xbe\xef" * 4), r"block at 0: DATA block: the gzip payload is",
            lambda r: r.get("key-00000"))


def test_block_sizes_that_disagree() -> None:
    data = hfile()
    size = int.from_bytes(data[12:16], "big")
    refused(patched(data, 12, (size + 1).to_bytes(4, "big")),
            rf"DATA block: the payload is {size} bytes where the header says {size + 1}", lambda r: r.get("key-00000"))
    refused(patched(data, 29, (10**6).to_bytes(4, "big")), r"DATA block sizes disagree", lambda r: r.get("key-00000"))
    refused(patched(data, 8, (10**7).to_bytes(4, "big")), r"the DATA block \(\d+ bytes\) runs past the bytes there are",
            lambda r: r.get("key-00000"))


def test_entries_that_overrun_their_block() -> None:
    data = hfile()
    refused(patched(data, HEADER_SIZE + 4, (10**5).to_bytes(4, "big")),  # the first entry's value length
            r"block at 0: the entry at 0 \(21-byte key, 100000-byte value\) runs past the block's \d+ bytes",
            lambda r: r.get("key-00000"))
    refused(patched(data, HEADER_SIZE + 8, (500).to_bytes(2, "big")),  # its row length
            r"the entry at 0 has a 500-byte row in a 21-byte key", lambda r: r.get("key-00000"))


def test_damaged_file_info() -> None:
    data = hfile()
    at = HFileReader(data).trailer.file_info_offset + HEADER_SIZE
    refused(patched(data, at, b"JUNK"), r"the file info block does not start with b'PBUF' \(found b'JUNK'\)")


def test_mvcc_timestamps_are_refused() -> None:
    refused(hfile(**{info.MAX_MEMSTORE_TS_KEY: (7).to_bytes(8, "big")}), r"MVCC timestamps, which Hudi never writes")


def test_a_file_that_reads_short() -> None:
    """A random-access file that returns fewer bytes than asked (cut short under the reader)."""
    data = hfile()

    class Short:
        def size(self) -> int:
            return len(data)

        def read_at(self, nbytes: int, offset: int) -> bytes:
            return data[offset:offset + nbytes][:-1]

    with pytest.raises(HFileError, match=r"t\.hfile: \d+ bytes at \d+ asked, \d+ read \(truncated\?\)"):
        HFileReader(Short(), "t.hfile")

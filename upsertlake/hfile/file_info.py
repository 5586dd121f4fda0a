"""The file info block: named byte strings about the file, as a protobuf map after the magic PBUF.

HBase keeps its vitals there (last key, average key and value length, creation time, MVCC
settings); Hudi adds its own: the Avro schema of the values, the key range and the bloom filter's
type (the bloom filter itself is a meta block) (docs/DESIGN.md §10).
"""

from __future__ import annotations

from collections.abc import Iterable

from upsertlake.errors import HFileError
from upsertlake.hfile.encoding import bytes_field, parse_message, read_varint, varint

PB_MAGIC = b"PBUF"

# HBase's keys
LAST_KEY = "hfile.LASTKEY"
AVG_KEY_LEN = "hfile.AVG_KEY_LEN"
AVG_VALUE_LEN = "hfile.AVG_VALUE_LEN"
CREATE_TIME_TS = "hfile.CREATE_TIME_TS"
MAX_TAGS_LEN = "hfile.MAX_TAGS_LEN"
KEY_VALUE_VERSION = "KEY_VALUE_VERSION"
MAX_MEMSTORE_TS_KEY = "MAX_MEMSTORE_TS_KEY"

# Hudi's keys (HoodieAvroHFileWriter) and the meta block its bloom filter is kept in
SCHEMA = "schema"
MIN_RECORD_KEY = "minRecordKey"
MAX_RECORD_KEY = "maxRecordKey"
BLOOM_FILTER_TYPE_CODE = "bloomFilterTypeCode"
BLOOM_FILTER_BLOCK = "bloomFilter"


def parse_file_info(payload: bytes | memoryview, where: str) -> dict[str, bytes]:
    """The entries of a file info block payload, in file order."""
    if bytes(payload[:4]) != PB_MAGIC:
        raise HFileError(f"{where}: the file info block does not start with {PB_MAGIC!r} "
                         f"(found {bytes(payload[:4])!r})")
    size, pos = read_varint(payload, 4, where)
    if pos + size > len(payload):
        raise HFileError(f"{where}: the file info ({size} bytes) runs past its block")
    info: dict[str, bytes] = {}
    for entry in parse_message(payload[pos:pos + size], where).get(1, []):
        fields = parse_message(entry, where) if isinstance(entry, bytes) else {}
        name, value = fields.get(1, [None])[-1], fields.get(2, [None])[-1]
        if not isinstance(name, bytes) or not isinstance(value, bytes):
            raise HFileError(f"{where}: a file info entry without a name or a value")
        try:
            info[name.decode("utf-8")] = value
        except UnicodeDecodeError:
            raise HFileError(f"{where}: a file info name is not UTF-8: {name!r}") from None
    return info


def encode_file_info(entries: Iterable[tuple[str, bytes]]) -> bytes:
    """A file info block payload holding `entries` in the order given."""
    message = b"".join(
        bytes_field(1, bytes_field(1, name.encode("utf-8")) + bytes_field(2, value)) for name, value in entries
    )
    return PB_MAGIC + varint(len(message)) + message

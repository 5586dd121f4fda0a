"""The two variable-length integer codes an HFile mixes, and the few protobuf messages it holds.

HBase's block indexes write lengths as Hadoop `WritableUtils` VInts (a first byte that is either
the value itself or a count and sign); the trailer and the file info are protobuf messages (base-128
varints, fields tagged by number). Both are hand-written here: the messages are three small ones
(docs/DESIGN.md §10), and protobuf's own library would be a dependency for forty lines.
"""

from __future__ import annotations

from upsertlake.errors import HFileError

_UINT64 = (1 << 64) - 1


# -- Hadoop VInt / VLong ----------------------------------------------------------------------


def read_vlong(buf: bytes | memoryview, pos: int, where: str) -> tuple[int, int]:
    """The Hadoop VLong at `pos` and the position after it."""
    if pos >= len(buf):
        raise HFileError(f"{where}: a variable-length number runs past the end")
    first = buf[pos] - 256 if buf[pos] > 127 else buf[pos]
    if first >= -112:
        return first, pos + 1
    negative = first < -120
    size = (-119 - first) if negative else (-111 - first)  # bytes including the first
    end = pos + size
    if end > len(buf):
        raise HFileError(f"{where}: a variable-length number runs past the end")
    value = int.from_bytes(buf[pos + 1:end], "big")
    return (~value if negative else value), end


def vint(value: int) -> bytes:
    """`value` as a Hadoop VInt (`WritableUtils.writeVInt`), as HBase's and Hudi's index blocks
    write key lengths."""
    if -112 <= value <= 127:
        return (value & 0xFF).to_bytes(1, "big")
    length = -112
    if value < 0:
        value, length = ~value, -120
    size = (value.bit_length() + 7) // 8
    return ((length - size) & 0xFF).to_bytes(1, "big") + value.to_bytes(size, "big")


# -- protobuf ---------------------------------------------------------------------------------


def read_varint(buf: bytes | memoryview, pos: int, where: str) -> tuple[int, int]:
    """The protobuf varint at `pos` (unsigned, up to 64 bits) and the position after it."""
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise HFileError(f"{where}: a protobuf varint is cut short or too long")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def varint(value: int) -> bytes:
    """`value` as a protobuf varint; a negative one as its 64-bit two's complement (ten bytes), as
    Java's protobuf writes a negative `uint64`."""
    value &= _UINT64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def signed64(value: int) -> int:
    """A `uint64` field read back as the Java `long` it was written from."""
    return value - (1 << 64) if value >= 1 << 63 else value


def parse_message(buf: bytes | memoryview, where: str) -> dict[int, list[int | bytes]]:
    """A protobuf message's fields by number: varints as ints, length-delimited fields as bytes
    (fixed-width fields, which none of these messages has, are skipped)."""
    fields: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(buf):
        tag, pos = read_varint(buf, pos, where)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 0:
            value, pos = read_varint(buf, pos, where)
        elif wire == 2:
            size, pos = read_varint(buf, pos, where)
            if pos + size > len(buf):
                raise HFileError(f"{where}: protobuf field {number} runs past the end")
            value, pos = bytes(buf[pos:pos + size]), pos + size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
            continue
        else:
            raise HFileError(f"{where}: protobuf wire type {wire} (field {number}) is not a protobuf message")
        fields.setdefault(number, []).append(value)
    if pos != len(buf):
        raise HFileError(f"{where}: the protobuf message runs past its end")
    return fields


def varint_field(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def bytes_field(number: int, value: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(value)) + value

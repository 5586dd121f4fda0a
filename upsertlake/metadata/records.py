"""The metadata table's records (Avro `HoodieMetadataRecord`) and how two versions of one combine,
as Hudi's HoodieMetadataPayload does.

A record is the dict fastavro gives: `key`, `type` and one payload field by type
(`filesystemMetadata`, `ColumnStatsMetadata`, `recordIndexMetadata`, ...). Values in column
statistics are wrappers, kept as `(wrapper name, {"value": v})` so they encode back to the same
union branch. A deleted record (a delete block's key, an empty payload) is `None`.

The writer schemas are the ones Hudi writes into every HFile and log block header: table version 8
(Hudi 1.0) and version 9 (Hudi 1.1, which adds a value type to column statistics); a reader uses
the schema the file names, so it reads both.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterable, Mapping
from decimal import Decimal
from functools import lru_cache
from importlib import resources
from typing import Any, cast

import fastavro

from upsertlake.errors import CorruptTableError
from upsertlake.metadata.partitions import RecordType
from upsertlake.schema import parsed_avro_schema
from upsertlake.schema.columns import FILE_NAME

Record = dict[str, Any]
MISSING_FILE_INDEX = -1  # RECORD_INDEX_MISSING_FILEINDEX_FALLBACK: a file id without `-<n>`


@lru_cache(maxsize=4)
def writer_schema(table_version: int) -> str:
    """The HoodieMetadataRecord schema JSON Hudi writes for a table version (8 or 9)."""
    name = "HoodieMetadataRecord.v9.avsc" if table_version >= 9 else "HoodieMetadataRecord.v8.avsc"
    return resources.files("upsertlake.metadata").joinpath("avro").joinpath(name).read_text("utf-8")


def decode(values: Iterable[bytes], keys: Iterable[str], schema_json: str, where: str) -> list[Record]:
    """Records from Avro datums (the writer emptied their key field; `keys` put it back). Equal
    datums decode once: the record index's entries of one file group are all alike."""
    schema = parsed_avro_schema(schema_json)
    seen: dict[bytes, Record] = {}
    out = []
    for key, value in zip(keys, values):
        record = seen.get(value)
        if record is None:
            try:
                record = seen[value] = cast(Record, fastavro.schemaless_reader(
                    io.BytesIO(value), schema, None, return_record_name=True, return_record_name_override=True
                ))
            except (EOFError, ValueError, IndexError, TypeError, UnicodeDecodeError) as e:
                raise CorruptTableError(f"{where}: the metadata record of key {key!r} does not decode: {e}") from e
        out.append({**record, "key": key})
    return out


def encode(records: Iterable[Record], schema_json: str) -> list[bytes]:
    """Avro datums of records, their key field emptied as Hudi writes them (the HFile key holds it).
    A record index entry depends on its location alone: each location is encoded once."""
    schema = parsed_avro_schema(schema_json)
    seen: dict[tuple[Any, ...], bytes] = {}
    out = []
    for record in records:
        info = record.get("recordIndexMetadata")
        alike = None if info is None else (record.get(FILE_NAME), *info.values())
        datum = seen.get(alike) if alike is not None else None
        if datum is None:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, schema, {**record, "key": ""})
            datum = buf.getvalue()
            if alike is not None:
                seen[alike] = datum
        out.append(datum)
    return out


# -- combining two versions of a key (HoodieMetadataPayload.preCombine) --------------------------
def combine(older: Record | None, newer: Record | None) -> Record | None:
    """The record a reader sees after `newer` was written over `older` (None: deleted)."""
    if newer is None or older is None:
        return newer
    kind = newer["type"]
    if kind in (RecordType.FILES, RecordType.ALL_PARTITIONS):
        return {**newer, "filesystemMetadata": combine_files(older["filesystemMetadata"], newer["filesystemMetadata"])}
    if kind in (RecordType.COLUMN_STATS, RecordType.PARTITION_STATS):
        return {
            **newer,
            "ColumnStatsMetadata": combine_stats(older["ColumnStatsMetadata"], newer["ColumnStatsMetadata"]),
        }
    return newer


def combine_files(
    older: Mapping[str, dict[str, Any]] | None, newer: Mapping[str, dict[str, Any]] | None
) -> dict[str, dict[str, Any]]:
    """A partition's files (combineFileSystemMetadata): a deletion removes a listed file and is
    kept only for a file not listed before (the older side may be merged later); sizes only grow."""
    out = dict(older or {})
    for name, info in (newer or {}).items():
        before = out.get(name)
        if before is None:
            out[name] = info
        elif info["isDeleted"]:
            if before["isDeleted"]:
                out[name] = info
            else:
                del out[name]
        else:
            out[name] = {"size": max(info["size"], before["size"]), "isDeleted": False}
    return out


def combine_stats(older: Record, newer: Record) -> Record:
    """Column statistics (mergeColumnStatsRecords): a deletion or a tight bound replaces; else the
    range widens and the counts add up."""
    if newer["isDeleted"] or older["isDeleted"] or newer.get("isTightBound"):
        return newer
    merged = dict(newer)
    merged["minValue"] = _bound(older, newer, "minValue", min)
    merged["maxValue"] = _bound(older, newer, "maxValue", max)
    for count in ("valueCount", "nullCount", "totalSize", "totalUncompressedSize"):
        merged[count] = older[count] + newer[count]
    return merged


def _bound(older: Record, newer: Record, field: str, pick: Any) -> Any:
    """The wrapped bound of the two that `pick` (min or max) chooses; a missing one never wins."""
    known = [s for s in (older, newer) if unwrap(s, field) is not None]
    return pick(known, key=lambda s: unwrap(s, field))[field] if known else newer[field]


# -- column statistics values ---------------------------------------------------------------------
_DECIMAL_ORDINAL = 10  # ValueType.DECIMAL (Hudi 1.1): the value is the unscaled big-endian bytes


def unwrap(stats: Record, field: str) -> Any:
    """A column statistic's bound as a comparable Python value (None: unknown)."""
    wrapped = stats.get(field)
    if wrapped is None:
        return None
    value = _value(wrapped)
    value_type = stats.get("valueType")
    if (
        value is not None
        and value_type
        and value_type.get("typeOrdinal") == _DECIMAL_ORDINAL
        and isinstance(value, bytes)
    ):
        scale = int((value_type.get("additionalInfo") or "0,0").split(",")[1])
        return Decimal(int.from_bytes(value, "big", signed=True)).scaleb(-scale)
    return value


def _value(wrapped: Any) -> Any:
    if isinstance(wrapped, tuple):
        return wrapped[1]["value"] if wrapped[1] is not None else None
    return wrapped.get("value") if isinstance(wrapped, dict) else wrapped


# -- record index ---------------------------------------------------------------------------------
def record_location(record: Record) -> tuple[str, str, int]:
    """(data partition, file id, instant epoch millis) of a record index entry
    (getLocationFromRecordIndexInfo): a UUID file id is kept as its two halves and the index
    after its last `-`."""
    info = record["recordIndexMetadata"]
    if info["fileIdEncoding"] == 0:
        bits = ((info["fileIdHighBits"] & (1 << 64) - 1) << 64) | (info["fileIdLowBits"] & (1 << 64) - 1)
        file_id = str(uuid.UUID(int=bits))
        if info["fileIndex"] != MISSING_FILE_INDEX:
            file_id += f"-{info['fileIndex']}"
    else:
        file_id = info["fileId"]
    return info["partitionName"], file_id, info["instantTime"]


def record_index_info(partition: str, file_id: str, instant_millis: int) -> dict[str, Any]:
    """The record index payload of a key stored in `file_id` (createRecordIndexUpdate): a
    `<uuid>-<n>` or bare UUID file id is encoded in bits, any other kept as text."""
    stem, _, index = file_id.rpartition("-")
    try:
        if len(file_id) == 36:
            parsed, file_index = uuid.UUID(file_id), MISSING_FILE_INDEX
        else:
            parsed, file_index = uuid.UUID(stem), int(index)
    except ValueError:
        return {
            "partitionName": partition,
            "fileIdHighBits": -1,
            "fileIdLowBits": -1,
            "fileIndex": -1,
            "fileId": file_id,
            "instantTime": instant_millis,
            "fileIdEncoding": 1,
            "position": None,
        }
    high, low = parsed.int >> 64, parsed.int & (1 << 64) - 1
    return {
        "partitionName": partition,
        "fileIdHighBits": _signed(high),
        "fileIdLowBits": _signed(low),
        "fileIndex": file_index,
        "fileId": "",
        "instantTime": instant_millis,
        "fileIdEncoding": 0,
        "position": None,
    }


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value

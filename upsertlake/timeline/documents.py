"""Hudi's Avro timeline documents (cleaner plan, clean / rollback / savepoint / restore metadata,
clustering plan), written as Hudi's `TimelineMetadataUtils` does: an Avro object container file
holding one record. The schemas are Hudi's (`hudi-common/src/main/avro`), kept as package data
with their named sub-records inlined so each file stands alone.
"""

from __future__ import annotations

import io
import json
from functools import cache
from importlib import resources
from typing import Any, cast

import fastavro

from upsertlake.errors import CorruptTableError


@cache
def schema(name: str) -> Any:
    """The parsed Avro schema `upsertlake/timeline/avro/<name>.avsc`."""
    text = resources.files("upsertlake.timeline").joinpath("avro").joinpath(f"{name}.avsc").read_text("utf-8")
    return fastavro.parse_schema(json.loads(text))


def encode(name: str, record: dict[str, Any]) -> bytes:
    """One record as an Avro container file (what Hudi's readers of these instants expect)."""
    out = io.BytesIO()
    fastavro.writer(out, schema(name), [record])
    return out.getvalue()


def decode(data: bytes, source: str = "timeline document") -> dict[str, Any]:
    """The single record of an Avro container file."""
    try:
        records = list(fastavro.reader(io.BytesIO(data)))
    except (ValueError, EOFError, StopIteration) as exc:
        raise CorruptTableError(f"cannot parse {source}: {exc}") from exc
    if len(records) != 1:
        raise CorruptTableError(f"{source} holds {len(records)} records, expected one")
    return cast("dict[str, Any]", records[0])

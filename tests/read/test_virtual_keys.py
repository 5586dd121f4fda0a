"""Merge-on-read tables with `hoodie.populate.meta.fields=false` (Hudi's "virtual keys"): no
`_hoodie_*` column in the base files or the log records, so the slices merge by the key the key
generator makes of the key fields, as Hudi's readers do.

upsertlake does not write such tables, so the test makes one: a merge-on-read table written here
(updates and deletes in log files, Avro and parquet data blocks), its meta columns then stripped
from every base file and data block and the property turned off. Read, it must be the original
snapshot without the meta columns, and what Apache Hudi's reader (hudi-rs) reads of it."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from upsertlake import create_table, open_table
from upsertlake.config.properties_file import write_properties
from upsertlake.logfile import DataBlock, LogFileName, append_blocks, data_block, read_blocks
from upsertlake.schema import META_COLUMNS

from helpers import hudi_read

SMALL = {"hoodie.parquet.max.file.size": 4000, "hoodie.parquet.small.file.limit": 0,
         "hoodie.copyonwrite.record.size.estimate": 400, "hoodie.index.bloom.num_entries": 100}


def _strip_schema(schema_json: str) -> str:
    doc = json.loads(schema_json)
    doc["fields"] = [f for f in doc["fields"] if f["name"] not in META_COLUMNS]
    return json.dumps(doc)


def strip_meta_fields(root: Path) -> None:
    """Rewrite every base file and log data block without meta columns; the property off."""
    for f in root.rglob("*"):
        if ".hoodie" in f.parts or not f.is_file():
            continue
        if f.suffix == ".parquet":
            table = pq.read_table(f)
            pq.write_table(table.drop_columns([c for c in META_COLUMNS if c in table.column_names]), f)
        elif LogFileName.parse(f.name) is not None:
            blocks = read_blocks(f.read_bytes(), f.name)
            rewritten = [
                data_block(b.instant, b.records.drop_columns([c for c in META_COLUMNS if c in b.records.column_names]),
                           _strip_schema(b.schema_json), parquet=b.block_type.name == "PARQUET_DATA")
                if isinstance(b, DataBlock) else b
                for b in blocks
            ]
            f.write_bytes(append_blocks(rewritten))
    table = open_table(root)
    write_properties(table.storage, {"hoodie.populate.meta.fields": "false"})


@pytest.mark.parametrize("block_format", ["avro", "parquet"])
@pytest.mark.parametrize("keys", [["id"], ["id", "sub"]], ids=["simple", "complex"])
def test_a_mor_table_without_meta_fields_merges_by_the_key_generators_keys(
    tmp_path: Path, block_format: str, keys: list[str]
) -> None:
    root = tmp_path / "t"
    create_table(root, "t", keys, "ts", "p", table_type="MERGE_ON_READ",
                 options={"hoodie.logfile.data.block.format": block_format})
    table = open_table(root, SMALL)

    def rows(ids: list[int], ts: int) -> pa.Table:
        return pa.table({"id": [f"k{i:03d}" for i in ids], "sub": [i % 2 for i in ids], "ts": [ts] * len(ids),
                         "p": [f"p{i % 2}" for i in ids], "v": [i * 100 + ts for i in ids]})

    table.upsert(rows(list(range(40)), 1))
    table.upsert(rows([1, 2, 3, 30], 2))  # updates: log files
    table.upsert(rows([2], 0))  # an older ordering value: loses to the stored one
    table.delete(pa.table({"id": ["k005", "k031"], "sub": [1, 1], "p": ["p1", "p1"]}))
    table.upsert(rows([5], 3))  # deleted, then written again
    expected = open_table(root).read().drop_columns(list(META_COLUMNS))
    assert table.scan().plan.slices  # log files to merge
    strip_meta_fields(root)
    stripped = open_table(root)
    assert not stripped.table_config.populate_meta_fields
    assert not any(c in pq.read_schema(f).names for c in META_COLUMNS for f in root.rglob("*.parquet"))
    got = stripped.read()
    assert got.column_names == expected.column_names == ["id", "sub", "ts", "p", "v"]
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == sorted(expected.to_pylist(), key=lambda r: r["id"])
    theirs = hudi_read(root)  # Apache Hudi's reader (hudi-rs) reads the stripped table alike
    assert sorted(theirs.to_pylist(), key=lambda r: r["id"]) == sorted(got.to_pylist(), key=lambda r: r["id"])
    values = dict(zip(got["id"].to_pylist(), got["v"].to_pylist()))
    assert (values["k002"], values["k005"], values["k030"]) == (202, 503, 3002) and "k031" not in values
    # Filters, batches and counts go through the same merge.
    scan = stripped.scan(columns=["id", "v"], filters=[("v", ">=", 3000)])
    assert sorted(pa.Table.from_batches(scan.to_batches(), scan.schema).to_pylist(), key=lambda r: r["id"]) == [
        {"id": "k030", "v": 3002}, {"id": "k032", "v": 3201}, {"id": "k033", "v": 3301}, {"id": "k034", "v": 3401},
        {"id": "k035", "v": 3501}, {"id": "k036", "v": 3601}, {"id": "k037", "v": 3701}, {"id": "k038", "v": 3801},
        {"id": "k039", "v": 3901},
    ]
    assert stripped.scan().count() == expected.num_rows
    assert stripped.scan(filters=pc.field("id") == "k005").to_arrow()["v"].to_pylist() == [503]

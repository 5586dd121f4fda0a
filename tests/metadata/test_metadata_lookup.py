"""Point lookups in the metadata table's HFile log blocks: a lookup gives exactly what reading the
blocks whole gives (later blocks overwrite, delete blocks delete, rolled-back blocks do not count),
and decodes only the HFile blocks its keys fall in."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

import upsertlake
from upsertlake.hfile import reader as hfile_reader
from upsertlake.logfile.blocks import HFileBlock
from upsertlake.logfile.names import LogFileName
from upsertlake.logfile.reader import read_blocks
from upsertlake.logfile.writer import append_blocks, delete_block, encode_block, hfile_block, rollback_block
from upsertlake.metadata import MetadataTable
from upsertlake.metadata import keys as mkeys
from upsertlake.metadata.compaction import _renamed
from upsertlake.metadata.partitions import RECORD_INDEX
from upsertlake.metadata.records import Record, decode, encode, record_index_info, record_location, writer_schema
from upsertlake.schema.columns import DELETED_KEY, DELETED_PARTITION
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline

RECORD_INDEX_ON = {
    "hoodie.write.table.version": "8",
    "hoodie.metadata.enable": "true",
    "hoodie.metadata.record.index.enable": "true",
    "hoodie.index.type": "RECORD_INDEX",
}
F1, F2, F9 = (f"0000000{i}-0000-0000-0000-000000000000-0" for i in (1, 2, 9))


def rows(ids: range) -> pa.Table:
    return pa.table({
        "id": [f"id-{i:05d}" for i in ids],
        "part": ["p"] * len(ids),
        "ts": pa.array([1] * len(ids), pa.int64()),
    })


def test_a_lookup_in_log_blocks_gives_what_reading_them_whole_gives(tmp_path: Path) -> None:
    """A log file of file group 0 after the table's own: new keys, some of them and some stored
    keys overwritten by a later block, some deleted by a delete block, and a block its rollback
    voids. Looked up by key (HFile point lookups), every key gives exactly its last live record,
    the one a scan of the whole partition gives; deleted, voided-only and absent keys give none."""
    t = upsertlake.create_table(tmp_path, "t", record_key="id", precombine_field="ts", partition_fields="part",
                                options=RECORD_INDEX_ON)
    t.insert(rows(range(1)))  # the record index is built (base files), the next keys go to its log blocks
    t.insert(rows(range(1, 600)))
    table = MetadataTable.open(Timeline.load(Storage(tmp_path)))
    assert table is not None
    slices = table.slices(RECORD_INDEX)
    group = slices[0]
    (own_log,) = group.logs
    stored = [k for k in (f"id-{i:05d}" for i in range(600)) if mkeys.file_group_index([k], len(slices))[0] == 0]
    fresh = [k for k in (f"new-{i:05d}" for i in range(3000)) if mkeys.file_group_index([k], len(slices))[0] == 0]
    assert len(stored) > 20 and len(fresh) > 100
    before = table.lookup(RECORD_INDEX, stored)
    assert sorted(before) == stored
    template = before[stored[0]]

    def entries(keys: list[str], file_id: str) -> pa.Table:
        records: list[Record] = [
            {**template, "key": k, "recordIndexMetadata": record_index_info("p", file_id, 1)} for k in sorted(keys)
        ]
        return pa.table({"key": pa.array([k.encode() for k in sorted(keys)], pa.binary()),
                         "value": pa.array(encode(records, schema), pa.binary())})

    schema = writer_schema(8)
    instant = LogFileName.parse(own_log.rpartition("/")[2]).instant  # type: ignore[union-attr]
    voided = "20200101000000000"
    added, only_voided = fresh[:60], fresh[60:70]
    overwritten, deleted = fresh[40:50] + stored[:5], fresh[50:55] + stored[5:8]
    gone = pa.table({DELETED_KEY: deleted, DELETED_PARTITION: ["p"] * len(deleted)})
    log = append_blocks([
        hfile_block(instant, entries(added, F1), schema),
        hfile_block(instant, entries(overwritten, F2), json.dumps(json.loads(schema), indent=1)),  # its text differs
        delete_block(instant, gone),
        hfile_block(voided, entries(only_voided + stored[10:12], F9), schema),
        rollback_block(instant, voided),
    ])
    name = replace(LogFileName.parse(own_log.rpartition("/")[2]), version=2).format()  # type: ignore[type-var]
    table.storage.write_bytes(f"{RECORD_INDEX}/{name}", log)
    reread = MetadataTable.open(Timeline.load(Storage(tmp_path)))
    assert reread is not None
    reread = MetadataTable(reread.storage, reread.timeline, reread.valid | {voided}, reread.partitions)
    assert reread.slices(RECORD_INDEX)[0].logs == (own_log, f"{RECORD_INDEX}/{name}")

    absent = [*fresh[70:80], "id-99999"]
    wanted = stored + fresh[:80] + absent
    found = reread.lookup(RECORD_INDEX, wanted)
    where = {k: record_location(r)[1] for k, r in found.items()}
    expected = {k: record_location(before[k])[1] for k in stored}
    expected.update({k: F1 for k in added})
    expected.update({k: F2 for k in overwritten})
    for k in deleted:
        del expected[k]
    assert where == expected  # only_voided and absent keys: none; stored[10:12] where they were
    whole = reread.scan(RECORD_INDEX)
    assert found == {k: whole[k] for k in wanted if k in whole}
    assert all(found[k]["key"] == k for k in found)

    # What a compaction writes of the group (its stored entries, renamed under each block's schema
    # text: two here) is what the scan reads of it, each record naming the new file.
    stored_entries, schemas = reread.stored_entries(reread.slices(RECORD_INDEX)[0])
    assert len(schemas) == 2
    values = _renamed(stored_entries.column("value"), stored_entries.column("schema"), schemas, schema, "new.hfile")
    keys = [k.decode() for k in stored_entries.column("key").to_pylist()]
    renamed = dict(zip(keys, decode(values.to_pylist(), keys, schema, "new.hfile")))
    in_group = {k: r for k, r in whole.items() if mkeys.file_group_index([k], len(slices))[0] == 0}
    assert renamed == {k: {**r, "_hoodie_file_name": "new.hfile"} for k, r in in_group.items()}


def test_a_point_lookup_decodes_only_the_hfile_blocks_its_keys_fall_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """An HFile log block of many HFile blocks (64 KB each, GZ) read back from its log file bytes:
    keys of two of its blocks, and keys it does not hold that sort before its first key or into
    those blocks, decode those two blocks alone, and give exactly the values a whole read gives."""
    keys = [f"key-{i:06d}".encode() for i in range(6000)]
    values = [bytes([i % 251]) * 40 + b"%d" % i for i in range(6000)]
    block = hfile_block("001", pa.table({"key": keys, "value": values}), writer_schema(8))
    (read,) = read_blocks(encode_block(block), "log")
    assert isinstance(read, HFileBlock) and isinstance(read.content, memoryview)  # the log file's bytes, not a copy
    assert bytes(read.content) == block.content

    decoded: list[bytes] = []
    real = hfile_reader.decode_entries

    def counting(payload, mvcc, tags, where):  # type: ignore[no-untyped-def]
        entries = real(payload, mvcc, tags, where)
        decoded.append(entries.key(0))
        return entries

    monkeypatch.setattr(hfile_reader, "decode_entries", counting)
    reader = read.reader()
    refs = sorted({reader.locate(k).offset for k in keys})  # type: ignore[union-attr]
    assert len(refs) == 7
    second = [k for k in keys if reader.locate(k).offset == refs[1]]  # type: ignore[union-attr]
    fifth = [k for k in keys if reader.locate(k).offset == refs[4]]  # type: ignore[union-attr]
    not_held = [b"a", second[0] + b"\x00", fifth[-1] + b"\x00"]  # before the first key, or in those blocks
    wanted = second[::7] + fifth[-3:] + not_held
    found = reader.get_many(wanted)
    assert sorted(decoded) == [second[0], fifth[0]]
    whole = dict(zip(keys, values))
    assert found == {k: whole[k] for k in sorted(wanted) if k in whole}
    decoded.clear()
    few = [second[3], fifth[-1], fifth[-1] + b"\x00"]  # a binary search each, not a hash of the blocks
    assert read.reader().get_many(few) == {k: whole[k] for k in few[:2]} and sorted(decoded) == [second[0], fifth[0]]
    decoded.clear()
    assert read.reader().read().column("key").to_pylist() == keys
    assert len(decoded) == len(refs)

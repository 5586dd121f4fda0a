"""Apache Hudi 1.1.1 itself (the Hudi reference, tests/hudi_reference) reads exactly what we write
at table version 9 and what our upgrades leave, at every instant and incrementally, and goes on
writing those tables; we read its writes exactly."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import create_table, open_table, upgrade_table

from helpers import unzip_hudi_table
from ordering_batches import FIRST, SECOND, THIRD, after_third, expected, ordered_batch, stored

pytestmark = pytest.mark.hudi

COLUMNS = ["_hoodie_commit_time", "_hoodie_record_key", "_hoodie_partition_path", "id", "ts", "city", "fare"]


def batch(rows: list[tuple[str, int, str, float]]) -> pa.Table:
    return pa.table({"id": [r[0] for r in rows], "ts": [r[1] for r in rows], "city": [r[2] for r in rows],
                     "fare": [r[3] for r in rows]})


def rows(t: pa.Table, columns: list[str]) -> list[tuple]:
    return sorted(tuple(r[c] for c in columns) for r in t.select(columns).to_pylist())


def assert_hudi_reads_ours(hudi, path: Path, columns: list[str] = COLUMNS) -> None:
    """Hudi's snapshot, time travel to every completed instant and incremental reads from before
    all and from every instant equal ours."""
    table = open_table(path)
    assert rows(hudi.snapshot(path), columns) == rows(table.read(), columns), "snapshot"
    shown = [i for i in table.timeline() if i.is_completed]
    for i in shown:
        assert rows(hudi.as_of(path, i.time), columns) == rows(table.read(as_of=i.time), columns), f"as of {i.time}"
    for begin in ["19700101000000000", *(i.completion or i.time for i in shown[:-1])]:
        assert rows(hudi.incremental(path, begin), columns) == rows(table.read_incremental(begin), columns), \
            f"incremental from {begin}"


@pytest.mark.parametrize("kind", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_hudi_1_1_reads_the_version_9_tables_we_write_and_writes_on(tmp_path: Path, hudi_references, kind: str) -> None:
    hudi = hudi_references.for_table_version(9)
    path = tmp_path / "t"
    table = create_table(path, "t", record_key="id", precombine_field="ts", partition_fields="city", table_type=kind,
                         options={"hoodie.write.table.version": 9})
    table.upsert(batch([("a", 1, "sf", 1.0), ("b", 1, "nyc", 2.0), ("c", 1, "sf", 3.0)]))
    table.upsert(batch([("a", 2, "sf", 10.0), ("d", 1, "la", 4.0), ("c", 0, "sf", 99.0)]))  # c's smaller ts loses
    table.delete(batch([("b", 0, "nyc", 0.0)]).select(["id", "city"]))
    if kind == "MERGE_ON_READ":
        table.compact()
        table.upsert(batch([("d", 5, "la", 44.0)]))
    table.insert(batch([("e", 1, "nyc", 5.0)]))
    assert_hudi_reads_ours(hudi, path)
    # Hudi 1.1 writes on (its writer keeps version 9 and makes its metadata table); we read it
    hudi.write(path, batch([("c", 7, "sf", 70.0), ("f", 1, "nyc", 6.0)]), {
        "hoodie.table.name": "t", "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts", "hoodie.datasource.write.partitionpath.field": "city",
        "hoodie.datasource.write.table.type": kind, "hoodie.datasource.write.operation": "upsert"})
    assert open_table(path).table_config.table_version == 9
    assert rows(open_table(path).read(), ["id", "ts", "fare"]) == [
        ("a", 2, 10.0),
        ("c", 7, 70.0),
        ("d", 5 if kind == "MERGE_ON_READ" else 1, 44.0 if kind == "MERGE_ON_READ" else 4.0),
        ("e", 1, 5.0),
        ("f", 1, 6.0),
    ]
    assert rows(open_table(path).read(), COLUMNS) == rows(hudi.snapshot(path), COLUMNS)


def test_hudi_1_1_reads_the_tables_our_upgrades_leave(tmp_path: Path, hudi_references) -> None:
    """6 -> 9 of a table we wrote, 8 -> 9 of one Hudi 1.0 wrote: Hudi 1.1 reads each exactly, before
    and after a write of ours on the upgraded table."""
    hudi = hudi_references.for_table_version(9)
    ours = tmp_path / "from6"
    t = create_table(ours, "from6", record_key="id", precombine_field="ts", partition_fields="city")
    t.upsert(batch([("a", 1, "sf", 1.0), ("b", 1, "nyc", 2.0)]))
    t.upsert(batch([("a", 2, "sf", 10.0), ("c", 1, "la", 3.0)]))
    upgrade_table(ours, 9)
    assert_hudi_reads_ours(hudi, ours)
    open_table(ours).upsert(batch([("b", 3, "nyc", 20.0)]))
    assert_hudi_reads_ours(hudi, ours)

    theirs = unzip_hudi_table("v8_simplekeygen_nonhivestyle", tmp_path)
    upgrade_table(theirs, 9)
    columns = ["_hoodie_commit_time", "_hoodie_record_key", "id", "name", "longField"]
    assert_hudi_reads_ours(hudi, theirs, columns)
    stored = open_table(theirs).read()
    update = stored.drop_columns([c for c in stored.column_names if c.startswith("_hoodie")]).slice(0, 1)
    open_table(theirs).upsert(update.set_column(update.schema.get_field_index("name"), "name", pa.array(["Zoe"])))
    assert_hudi_reads_ours(hudi, theirs, columns)


# Hudi's options for the tables ordered by (ts, seq) (tests/ordering_batches.py)
ORDERED_BY_TS_SEQ = {
    "hoodie.table.name": "t",
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.precombine.field": "ts,seq",
    "hoodie.datasource.write.partitionpath.field": "p",
    "hoodie.datasource.write.operation": "upsert",
    "hoodie.metadata.enable": "false",
}


def test_several_ordering_fields_decide_as_in_hudi_1_1(tmp_path: Path, hudi_references) -> None:
    """The same two batches (in-batch duplicates and stored records decided by ts, then seq) given
    to Hudi 1.1 and to us end in the same rows; Hudi reads our table so, and our second batch on
    the table Hudi wrote the first into ends so too, and Hudi reads that table after our write
    rewrote its hoodie.properties."""
    hudi = hudi_references.for_table_version(9)
    options = ORDERED_BY_TS_SEQ
    theirs, ours, mixed = tmp_path / "theirs", tmp_path / "ours", tmp_path / "mixed"
    for rows_ in (FIRST, SECOND):
        hudi.write(theirs, ordered_batch(rows_), options)
    hudi.write(mixed, ordered_batch(FIRST), options)
    table = create_table(
        ours,
        "t",
        record_key="id",
        precombine_field="ts,seq",
        partition_fields="p",
        options={"hoodie.write.table.version": 9},
    )
    for rows_ in (FIRST, SECOND):
        table.upsert(ordered_batch(rows_))
    assert open_table(mixed).table_config.ordering_fields == ("ts", "seq")
    open_table(mixed).upsert(ordered_batch(SECOND))
    columns = ["id", "p", "ts", "seq"]
    assert rows(hudi.snapshot(theirs), columns) == stored(ours) == stored(mixed) == expected(False)
    assert rows(hudi.snapshot(ours), columns) == rows(hudi.snapshot(mixed), columns) == expected(False)


def test_merge_on_read_tables_ordered_by_several_fields_cross_over(tmp_path: Path, hudi_references) -> None:
    """A merge-on-read table ordered by (ts, seq): Hudi 1.1 writes the first two batches (the
    second into log files), we read it as Hudi does and write the third and `_hoodie_is_deleted`
    deletes into its logs (delete blocks carrying the tuples as Hudi's ArrayWrapper), and Hudi
    reads that as we do, and after our compaction too; the reverse on a table we write."""
    hudi = hudi_references.for_table_version(9)
    options = {
        **ORDERED_BY_TS_SEQ,
        "hoodie.datasource.write.table.type": "MERGE_ON_READ",
        "hoodie.index.type": "SIMPLE",
        "hoodie.parquet.small.file.limit": "0",
        "hoodie.compact.inline": "false",
    }
    columns = ["id", "p", "ts", "seq"]
    deletes = ordered_batch([("a", 1, 5, "x"), ("b", 1, 5, "x"), ("e", 1, 4, "x")])
    deletes = deletes.append_column("_hoodie_is_deleted", pa.array([True, True, True]))
    gone = {("b", "x"), ("e", "x")}  # a's (1, 5) is older than its (1, 6): a late delete
    final = [r for r in after_third(False) if r[:2] not in gone]

    theirs = tmp_path / "theirs"
    for rows_ in (FIRST, SECOND):
        hudi.write(theirs, ordered_batch(rows_), options)
    assert any(theirs.glob("x/.*.log.*")), "Hudi's second batch went to log files"
    assert open_table(theirs).table_config.ordering_fields == ("ts", "seq")
    assert stored(theirs) == rows(hudi.snapshot(theirs), columns) == expected(False)
    open_table(theirs).upsert(ordered_batch(THIRD))
    open_table(theirs).upsert(deletes)
    assert stored(theirs) == final
    assert_hudi_reads_ours(hudi, theirs, columns)
    # (Hudi 1.1.1's run_compaction procedure fails on several ordering fields: "Can't find
    # ordering fields `ts,seq`"); we compact, Hudi reads the compacted table as we do
    open_table(theirs).compact()
    assert rows(hudi.snapshot(theirs), columns) == stored(theirs) == final
    assert_hudi_reads_ours(hudi, theirs, columns)

    ours = tmp_path / "ours"
    table = create_table(ours, "t", record_key="id", precombine_field="ts,seq", partition_fields="p",
                         table_type="MERGE_ON_READ",
                         options={"hoodie.write.table.version": 9, "hoodie.parquet.small.file.limit": 0})
    for batch_ in (ordered_batch(FIRST), ordered_batch(SECOND)):
        table.upsert(batch_)
    assert_hudi_reads_ours(hudi, ours, columns)
    hudi.write(ours, ordered_batch(THIRD), options)
    hudi.write(ours, deletes, options)
    assert rows(hudi.snapshot(ours), columns) == stored(ours) == final

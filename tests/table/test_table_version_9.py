"""Table version 9 (Apache Hudi 1.1): the 25 tables Hudi 1.1.1 wrote for hudi-rs's tests
(tests/hudi_tables/v9, each with the SQL that made it) read exactly as Hudi's reader (hudi-rs, the
`hudi` package) reads them, at every instant and incrementally, through every form of our reads:
`read`, `scan` (Arrow table, batches, the Arrow stream, `count`), `to_pyarrow_dataset`, Spark and
the command line.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import ConfigError, MergeOnReadError, UnsupportedTableError, create_table, open_table, upgrade_table

from helpers import decoded, hudi_read, tree_digest, unzip_hudi_table, unzip_mor_table, unzip_v9_table
from hudi_compare import check_reads
from ordering_batches import FIRST, SECOND, THIRD, after_third, expected, ordered_batch, stored

BEFORE_ALL = "19700101000000000"
COW = [
    "v9_lance_nonpartitioned", "v9_lance_txns_nonpart", "v9_lance_txns_simple", "v9_timebasedkeygen_epochmillis",
    "v9_timebasedkeygen_nonhivestyle", "v9_timebasedkeygen_unixtimestamp", "v9_trips_lance", "v9_txns_complex_meta",
    "v9_txns_complex_nometa", "v9_txns_nonpart_meta", "v9_txns_nonpart_nometa", "v9_txns_simple_meta",
    "v9_txns_simple_nometa", "v9_txns_simple_overwrite",
]
MOR = [
    "v9_lance_nonhivestyle", "v9_nonpartitioned_rollback", "v9_timebasedkeygen_nonhivestyle", "v9_trips_lance",
    "v9_txns_complex_meta", "v9_txns_complex_nometa", "v9_txns_nonpart_meta", "v9_txns_nonpart_nometa",
    "v9_txns_simple_meta", "v9_txns_simple_nometa", "v9_txns_simple_overwrite",
]
TABLES = [("cow", n) for n in COW] + [("mor", n) for n in MOR]


def rows(t: pa.Table) -> list[str]:
    """The rows as sorted text: a Hudi table may hold a key twice (these do), so rows are compared
    whole, duplicates counted."""
    return sorted(map(repr, t.to_pylist()))


def assert_same(ours: pa.Table, theirs: pa.Table, what: str, as_of: bool = False) -> None:
    """Same columns, types and rows. Time travel (`as_of`): hudi-rs gives the newest schema, we
    (as Hudi's Spark reader) the instant's; a column added later is all null in Hudi's result, and
    one whose type changed since (v9_timebasedkeygen_epochmillis's ts_millis, long then string)
    holds our values in its newer type."""
    if theirs.num_columns == 0:  # hudi-rs returns no batches (and so no schema) for nothing to read
        assert ours.num_rows == 0, f"{what}: Hudi reads nothing, we read {ours.num_rows} rows"
        return
    later = [c for c in theirs.column_names if c not in ours.column_names]
    for c in later:  # time travel: hudi-rs gives the newest columns, we the instant's (nulls then)
        assert theirs.column(c).null_count == theirs.num_rows, f"{what}: {c} added later but not null"
    theirs = theirs.drop_columns(later)
    ours = decoded(ours)  # our meta columns of a value per file come as dictionaries
    assert ours.column_names == theirs.column_names, what
    if as_of:
        ours = ours.cast(theirs.schema)
    assert [str(f.type) for f in ours.schema] == [str(f.type) for f in theirs.schema], what
    assert rows(ours) == rows(theirs), what


def reads(table) -> list[tuple[str, dict[str, str]]]:
    """The snapshot, time travel to every completed instant, and incremental windows from before
    all, from every bound and up to every bound (a bound: a completed instant's requested or
    completion time, both of which Hudi 1.x takes)."""
    shown = [i for i in table.timeline() if i.is_completed]
    bounds = sorted({t for i in shown for t in (i.time, i.completion) if t})
    out = [("snapshot", {})] + [(f"as of {i.time}", {"as_of": i.time}) for i in shown]
    out += [(f"incremental ({b}, ]", {"begin": b}) for b in [BEFORE_ALL, *bounds]]
    out += [(f"incremental (, {e}]", {"begin": BEFORE_ALL, "end": e}) for e in bounds]
    return out


def our_scan(table, spec: dict[str, str]):
    return table.scan(as_of=spec.get("as_of"), begin=spec.get("begin"), end=spec.get("end"))


@pytest.mark.parametrize(("kind", "name"), TABLES, ids=[f"{k}-{n}" for k, n in TABLES])
def test_hudi_1_1_tables_read_as_hudi_reads_them(tmp_path: Path, kind: str, name: str) -> None:
    path = unzip_v9_table(kind, name, tmp_path)
    table = open_table(path)
    assert table.table_config.table_version == 9
    lance = table.table_config.base_file_format == "LANCE"
    for what, spec in reads(table):
        theirs = hudi_read(path, **spec)
        as_of = "as_of" in spec
        if "begin" in spec:
            assert_same(table.read_incremental(spec["begin"], spec.get("end")), theirs, what)
        else:
            assert_same(table.read(as_of=spec.get("as_of")), theirs, what, as_of)
        scan = our_scan(table, spec)
        assert_same(scan.to_arrow(), theirs, f"{what}: scan().to_arrow()", as_of)
        assert_same(scan.to_batches().read_all(), theirs, f"{what}: scan().to_batches()", as_of)
        assert_same(pa.RecordBatchReader.from_stream(scan).read_all(), theirs, f"{what}: the Arrow stream", as_of)
        assert scan.count() == theirs.num_rows, f"{what}: count()"
        if "begin" in spec:
            continue
        merged = any(planned.log_files for planned in scan.plan_files())
        if merged:
            with pytest.raises(MergeOnReadError, match="have log files"):
                table.to_pyarrow_dataset(as_of=spec.get("as_of"))
        elif lance:
            with pytest.raises(UnsupportedTableError, match="Lance files, which pyarrow's datasets do not read"):
                table.to_pyarrow_dataset(as_of=spec.get("as_of"))
        else:
            dataset = table.to_pyarrow_dataset(as_of=spec.get("as_of"))
            assert_same(dataset.to_table(), theirs, f"{what}: dataset", as_of)


def test_lance_base_files_without_pylance_name_the_extra(tmp_path: Path, monkeypatch) -> None:
    """Without the Lance library, reading Lance base files fails by naming the extra to install;
    the table's other reads (its timeline, its schema) still work."""
    import sys

    path = unzip_v9_table("cow", "v9_lance_nonpartitioned", tmp_path)
    monkeypatch.setitem(sys.modules, "lance", None)  # what an environment without pylance imports
    monkeypatch.setitem(sys.modules, "lance.file", None)
    table = open_table(path)
    assert len([i for i in table.timeline() if i.is_completed]) == 5
    assert "updated_at" in table.schema().names
    with pytest.raises(UnsupportedTableError, match=r"pip install 'upsertlake\[lance\]' \(the pylance package\)"):
        table.read()


def spark_and_cli_reads(table) -> list[tuple[str, dict[str, str]]]:
    """A sample of `reads` for Spark and the command line, which plan as `read` does and differ in
    how they read files: the snapshot, time travel to the middle instant, and an incremental read
    up to it."""
    shown = [i.time for i in table.timeline() if i.is_completed]
    middle = shown[len(shown) // 2]
    return [("snapshot", {}), (f"as of {middle}", {"as_of": middle}),
            (f"incremental (, {middle}]", {"begin": BEFORE_ALL, "end": middle})]


def test_hudi_1_1_tables_read_through_spark_as_hudi_reads_them(tmp_path: Path, spark) -> None:
    import upsertlake.spark as uls

    for kind, name in TABLES:
        path = unzip_v9_table(kind, name, tmp_path / kind)
        table = open_table(path)
        for what, spec in spark_and_cli_reads(table):
            ours = uls.read(spark, str(path), **spec).toArrow()
            assert_same(ours, hudi_read(path, **spec), f"{kind}/{name} {what}: Spark", "as_of" in spec)


def test_hudi_1_1_tables_read_through_the_command_line_as_hudi_reads_them(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from upsertlake.cli import main

    for kind, name in TABLES:
        path = unzip_v9_table(kind, name, tmp_path / kind)
        table = open_table(path)
        for i, (what, spec) in enumerate(spark_and_cli_reads(table)):
            out = tmp_path / f"{kind}-{name}-{i}.parquet"
            when = (["--as-of", spec["as_of"]] if "as_of" in spec else
                    ["--since", spec["begin"], *(["--until", spec["end"]] if "end" in spec else [])] if "begin" in spec
                    else [])
            assert main(["read", str(path), *when, "--output", str(out)]) == 0
            theirs = hudi_read(path, **spec)
            ours = pq.read_table(out)
            assert_same(ours, theirs, f"{kind}/{name} {what}: upsertlake read", "as_of" in spec)


# -- writing version 9 ---------------------------------------------------------------------------


def properties(path: Path) -> dict[str, str]:
    from upsertlake.config.java_properties import parse_java_properties

    return parse_java_properties((path / ".hoodie" / "hoodie.properties").read_text("latin-1"))


# What Apache Hudi 1.1.1's Spark writer puts in a new table's hoodie.properties (seen by hand:
# a datasource write with the metadata table disabled) that says how to read it; we write the same.
HUDI_1_1_NEW_TABLE = {
    "hoodie.table.version": "9", "hoodie.timeline.layout.version": "2", "hoodie.table.initial.version": "9",
    "hoodie.timeline.path": "timeline", "hoodie.timeline.history.path": "history", "hoodie.table.format": "native",
    "hoodie.table.ordering.fields": "ts", "hoodie.record.merge.mode": "EVENT_TIME_ORDERING",
    "hoodie.table.keygenerator.type": "SIMPLE", "hoodie.table.partition.fields": "city",
    "hoodie.table.recordkey.fields": "id",
}
DROPPED_AT_9 = ("hoodie.table.precombine.field", "hoodie.record.merge.strategy.id", "hoodie.compaction.payload.class",
                "hoodie.table.keygenerator.class")


@pytest.mark.parametrize("kind", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("how", ["hoodie.write.table.version", "hoodie.table.version"])
def test_a_new_table_at_version_9_carries_hudi_1_1s_properties(tmp_path: Path, kind: str, how: str) -> None:
    create_table(tmp_path, "t", record_key="id", precombine_field="ts", partition_fields="city", table_type=kind,
                 options={how: 9})
    props = properties(tmp_path)
    assert {k: props.get(k) for k in HUDI_1_1_NEW_TABLE} == HUDI_1_1_NEW_TABLE
    assert props["hoodie.table.type"] == kind
    assert [k for k in DROPPED_AT_9 if k in props] == []
    assert (tmp_path / ".hoodie" / "timeline" / "history").is_dir()
    table = open_table(tmp_path)
    config = table.table_config
    assert (config.table_version, config.ordering_fields, config.precombine_field) == (9, ("ts",), "ts")


def test_several_ordering_fields_are_kept_in_order(tmp_path: Path) -> None:
    """Hudi 1.1's ordering fields, several of them: given as a list, a comma-separated string or
    Hudi's key, stored in order under hoodie.table.ordering.fields (hoodie.table.precombine.field
    up to version 8)."""
    schema = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("seq", pa.int32())])
    create_table(
        tmp_path / "a",
        "t",
        record_key="id",
        precombine_field=["ts", "seq"],
        schema=schema,
        options={"hoodie.write.table.version": 9},
    )
    create_table(
        tmp_path / "b", "t", record_key="id", precombine_field="ts,seq", options={"hoodie.write.table.version": 8}
    )
    assert properties(tmp_path / "a")["hoodie.table.ordering.fields"] == "ts,seq"
    assert properties(tmp_path / "b")["hoodie.table.precombine.field"] == "ts,seq"
    assert open_table(tmp_path / "a").table_config.ordering_fields == ("ts", "seq")
    # Hudi's key among the write options names the same fields; another order is a conflict
    open_table(tmp_path / "a", {"hoodie.table.ordering.fields": "ts,seq"})
    with pytest.raises(ConfigError, match=r"hoodie.table.ordering.fields='ts,seq'"):
        open_table(tmp_path / "a", {"hoodie.datasource.write.precombine.field": "seq,ts"})


# -- upgrading and downgrading -------------------------------------------------------------------


def upgraded_properties_diff(before: dict[str, str], after: dict[str, str]) -> dict[str, tuple]:
    """Every property the upgrade changed: key -> (before, after), None for absent."""
    return {
        k: (before.get(k), after.get(k))
        for k in sorted({*before, *after} - {"hoodie.table.checksum"})
        if before.get(k) != after.get(k)
    }


def unzip_v8(name: str, tmp_path: Path) -> Path:
    return unzip_mor_table(name, tmp_path) if name.startswith("mor_") else unzip_hudi_table(name, tmp_path)


@pytest.mark.parametrize(
    "name",
    [
        "v8_simplekeygen_nonhivestyle",
        "v8_complexkeygen_hivestyle",
        "v8_nonpartitioned",
        "v8_empty",
        "mor_v8_trips_8i3u1d",
    ],
)
def test_hudi_written_v8_tables_upgrade_to_9_as_hudi_1_1_upgrades_them(tmp_path: Path, name: str) -> None:
    """8 -> 9 changes hoodie.properties as Hudi 1.1.1's writer did when it upgraded a version 8
    table by hand (EightToNineUpgradeHandler): the precombine field becomes the ordering fields,
    the merge strategy id goes, the payload class is kept as the legacy payload class only. The
    timeline and the files stay; reads are the same, ours and Hudi's, and writes go on."""
    path = unzip_v8(name, tmp_path)
    before_props, before = properties(path), open_table(path).read()
    instants = sorted(p.name for p in (path / ".hoodie" / "timeline").iterdir())
    result = upgrade_table(path, 9)
    assert (result.from_version, result.to_version, result.instants_moved) == (8, 9, 0)
    after = properties(path)
    expected = {
        "hoodie.table.version": ("8", "9"),
        "hoodie.record.merge.strategy.id": (before_props["hoodie.record.merge.strategy.id"], None),
        "hoodie.compaction.payload.class": (before_props["hoodie.compaction.payload.class"], None),
        "hoodie.table.legacy.payload.class": (None, before_props["hoodie.compaction.payload.class"]),
    }
    if "hoodie.table.precombine.field" in before_props:
        field = before_props["hoodie.table.precombine.field"]
        expected |= {"hoodie.table.precombine.field": (field, None), "hoodie.table.ordering.fields": (None, field)}
    if "hoodie.table.metadata.partitions" in before_props:  # the metadata table goes, as on every write
        expected |= {
            "hoodie.table.metadata.partitions": (before_props["hoodie.table.metadata.partitions"], None),
            "hoodie.table.metadata.partitions.inflight": ("", None),
        }
    changed = upgraded_properties_diff(before_props, after)
    # beside Hudi's changes, only what the table implied already is spelled out
    spelled = {k: v for k, v in changed.items() if k not in expected}
    assert spelled == {
        k: v
        for k, v in {
            "hoodie.table.timeline.timezone": (None, "LOCAL"),
            "hoodie.populate.meta.fields": (None, "true"),
        }.items()
        if k in spelled
    }
    assert {k: v for k, v in changed.items() if k in expected} == expected
    assert sorted(p.name for p in (path / ".hoodie" / "timeline").iterdir()) == instants
    if (path / ".hoodie" / ".index_defs" / "index.json").exists():  # each definition has its version now
        import json

        defs = json.loads((path / ".hoodie" / ".index_defs" / "index.json").read_text())["indexDefinitions"]
        assert defs and all(d["version"] for d in defs.values())
    table = open_table(path)
    assert rows(table.read()) == rows(before)
    check_reads(table, path, windows=table.table_config.populate_meta_fields)
    if before.num_rows:
        data = before.drop_columns([c for c in before.column_names if c.startswith("_hoodie")]).slice(0, 1)
        table.upsert(data)
        assert properties(path)["hoodie.table.version"] == "9"
        check_reads(open_table(path), path)


@pytest.mark.parametrize(
    "name",
    [
        "v6_simplekeygen_nonhivestyle",
        "v6_complexkeygen_hivestyle",
        "v6_simplekeygen_nonhivestyle_overwritetable",
        "v6_empty",
    ],
)
def test_hudi_written_v6_tables_upgrade_to_9_and_read_the_same(tmp_path: Path, name: str) -> None:
    """6 -> 9 as Hudi 1.1.1's writer upgraded a version 6 table by hand: the timeline moved to
    layout 2, initial version 6, the key generator class kept beside its type, the merge mode
    from the payload class, which is kept as the legacy payload class; the ordering fields."""
    path = unzip_hudi_table(name, tmp_path)
    before_props, before = properties(path), open_table(path).read()
    result = upgrade_table(path, 9)
    assert (result.from_version, result.to_version) == (6, 9)
    after = properties(path)
    assert (
        after["hoodie.table.version"],
        after["hoodie.timeline.layout.version"],
        after["hoodie.table.initial.version"],
    ) == ("9", "2", "6")
    assert after["hoodie.table.keygenerator.class"] == before_props["hoodie.table.keygenerator.class"]
    assert after["hoodie.table.keygenerator.type"] in ("SIMPLE", "COMPLEX", "NON_PARTITION")
    field = before_props.get("hoodie.table.precombine.field")
    assert after.get("hoodie.table.ordering.fields") == field and "hoodie.table.precombine.field" not in after
    mode = "EVENT_TIME_ORDERING" if field else "COMMIT_TIME_ORDERING"
    payload = {
        "EVENT_TIME_ORDERING": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
        "COMMIT_TIME_ORDERING": "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload",
    }[mode]
    assert (after["hoodie.record.merge.mode"], after["hoodie.table.legacy.payload.class"]) == (
        mode,
        before_props.get("hoodie.compaction.payload.class", payload),
    )
    assert [k for k in ("hoodie.record.merge.strategy.id", "hoodie.compaction.payload.class") if k in after] == []
    table = open_table(path)
    assert rows(table.read()) == rows(before)
    check_reads(table, path)


def test_a_write_asking_for_version_9_upgrades_the_table_first_as_hudis_writer_does(tmp_path: Path, caplog) -> None:
    """hoodie.write.table.version=9 on a version 6 or 8 table: the first write upgrades it, then
    writes (Hudi 1.x's writer with hoodie.write.auto.upgrade, its default); with auto upgrade off
    the write goes at the table's version, warned. Opening for reads changes nothing; a lower
    version than the table's is refused."""
    import logging

    batch = pa.table({"id": ["a", "b"], "ts": [1, 1], "city": ["sf", "nyc"]})
    for version in (6, 8):
        path = tmp_path / f"v{version}"
        create_table(
            path,
            "t",
            record_key="id",
            precombine_field="ts",
            partition_fields="city",
            options={"hoodie.write.table.version": version},
        ).upsert(batch)
        table = open_table(path, {"hoodie.write.table.version": 9})
        assert properties(path)["hoodie.table.version"] == str(version)  # not upgraded by opening
        assert table.read().num_rows == 2
        assert properties(path)["hoodie.table.version"] == str(version)
        table.upsert(pa.table({"id": ["a"], "ts": [2], "city": ["sf"]}))
        assert properties(path)["hoodie.table.version"] == "9" and table.table_config.table_version == 9
        assert sorted(zip(table.read()["id"].to_pylist(), table.read()["ts"].to_pylist())) == [("a", 2), ("b", 1)]
        check_reads(open_table(path), path)
    path = tmp_path / "off"
    create_table(path, "t", record_key="id", precombine_field="ts", options={"hoodie.write.table.version": 8}).upsert(
        batch
    )
    with caplog.at_level(logging.WARNING):
        open_table(path, {"hoodie.write.table.version": 9, "hoodie.write.auto.upgrade": False}).upsert(batch)
    assert properties(path)["hoodie.table.version"] == "8"
    assert "hoodie.write.auto.upgrade=false: writing table 't' at its version 8" in caplog.text
    with pytest.raises(ConfigError, match=r"hoodie.write.table.version=8 but the table is at version 9"):
        open_table(tmp_path / "v8", {"hoodie.write.table.version": 8})


def test_version_9_goes_back_to_8_only_where_8_says_the_same(tmp_path: Path) -> None:
    """9 -> 8 (Hudi's NineToEightDowngradeHandler) restores what 8 -> 9 changed: a round trip gives
    the version 8 properties back, byte for byte in meaning. A table ordering by several fields
    (Hudi 1.0 compares one, 0.x too) is refused by name, the table untouched, as is a downgrade to
    a version upsertlake does not write."""
    path = unzip_hudi_table("v8_simplekeygen_nonhivestyle", tmp_path)
    at_8 = properties(path)
    upgrade_table(path, 9)
    result = upgrade_table(path, 8)
    assert (result.from_version, result.to_version) == (9, 8)
    assert upgraded_properties_diff(at_8, properties(path)) == {
        "hoodie.table.timeline.timezone": (None, "LOCAL"),
        "hoodie.populate.meta.fields": (None, "true"),
    }
    check_reads(open_table(path), path)

    several = tmp_path / "several"
    create_table(several, "t", record_key="id", precombine_field="ts,seq", options={"hoodie.write.table.version": 9})
    before = tree_digest(several)
    with pytest.raises(
        ConfigError, match=r"not safe: it orders records by 2 fields \(ts, seq\), Hudi 1.0 compares one"
    ):
        upgrade_table(several, 8)
    with pytest.raises(ConfigError, match=r"it orders records by 2 fields \(ts, seq\), Hudi 0.x compares one"):
        upgrade_table(several, 6)
    with pytest.raises(ConfigError, match=r"cannot upgrade to table version 5"):
        upgrade_table(several, 5)
    assert tree_digest(several) == before


def test_cli_upgrades_to_9_and_downgrades_to_8(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    create_table(tmp_path, "t", record_key="id", precombine_field="ts").upsert(pa.table({"id": [1], "ts": [1]}))
    run = [sys.executable, "-m", "upsertlake.cli", "upgrade", str(tmp_path)]
    p = subprocess.run([*run, "--to", "9", "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {
        "from_version": 6,
        "to_version": 9,
        "rolled_back": [],
        "instants_moved": 1,
        "old_files_deleted": 3,
        "archived_moved": 0,
    }
    p = subprocess.run([*run, "--to", "8"], capture_output=True, text=True)
    assert (p.returncode, p.stdout.strip()) == (0, "downgraded from table version 9 to 8")
    assert properties(tmp_path)["hoodie.table.precombine.field"] == "ts"


# -- writing the tables Hudi 1.1 wrote -------------------------------------------------------------


def txn(table: pa.Table, key: str, **changes: object) -> pa.Table:
    """The stored row of `key` (data columns only) with `changes`."""
    import pyarrow.compute as pc

    row = table.filter(pc.equal(table["_hoodie_record_key"], key))
    row = row.drop_columns([c for c in row.column_names if c.startswith("_hoodie")]).slice(0, 1)
    for name, value in changes.items():
        row = row.set_column(row.schema.get_field_index(name), name, pa.array([value], row.schema.field(name).type))
    return row


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("cow", "v9_txns_simple_meta"),
        ("mor", "v9_txns_simple_meta"),
        ("mor", "v9_txns_nonpart_nometa"),
        ("cow", "v9_txns_complex_meta"),
    ],
)
def test_writes_and_services_on_hudi_1_1_tables_read_as_hudi_reads_them(tmp_path: Path, kind: str, name: str) -> None:
    """Upsert, insert, delete and the services on tables Hudi 1.1 wrote: the metadata table is
    kept with the partitions we maintain (files, column_stats, partition_stats, record_index), the
    index definitions too; the table stays at version 9 and hudi-rs reads what we read."""
    path = unzip_v9_table(kind, name, tmp_path)
    kept = {"files", "column_stats", "partition_stats", "record_index"}
    listed = set(filter(None, properties(path).get("hoodie.table.metadata.partitions", "").split(",")))
    table = open_table(path, {"hoodie.clean.automatic": False})  # time travel to Hudi's instants stays whole
    stored = table.read()
    keys = sorted(stored["_hoodie_record_key"].to_pylist())
    table.upsert(txn(stored, keys[0], txn_ts=1_900_000_000_000, currency="XXX"))
    table.insert(txn(stored, keys[1], txn_id="TXN-900", txn_ts=1, currency="NEW"))
    table.delete(txn(stored, keys[2]))
    table.upsert(txn(stored, keys[3], txn_ts=1, currency="LOSES"))  # a smaller ordering value than stored
    props = properties(path)
    assert props["hoodie.table.version"] == "9"
    assert set(filter(None, props.get("hoodie.table.metadata.partitions", "").split(","))) == listed & kept
    assert (path / ".hoodie" / "metadata").exists() == bool(listed & kept)
    if "hoodie.table.index.defs.path" in props:
        assert (path / props["hoodie.table.index.defs.path"]).is_file()
    if kind == "mor":
        assert table.compact() is not None
    table.cluster()
    check_reads(open_table(path), path)
    table.clean(retained=1)
    now = open_table(path).read()
    by_key = {r["_hoodie_record_key"]: r for r in now.to_pylist()}
    assert by_key[keys[0]]["currency"] == "XXX" and keys[2] not in by_key
    assert (
        by_key[keys[3]]["currency"]
        == stored.filter(pa.compute.equal(stored["_hoodie_record_key"], keys[3]))["currency"][0].as_py()
    )
    assert [r["currency"] for r in now.to_pylist() if r["txn_id"] == "TXN-900"] == ["NEW"]
    assert now.num_rows == stored.num_rows
    assert_same(now, hudi_read(path), "after the clean")


def test_spark_the_command_line_and_a_stream_batch_write_a_hudi_1_1_table(tmp_path: Path, spark) -> None:
    import pyarrow.parquet as pq

    import upsertlake.spark as uls
    from upsertlake.cli import main

    path = unzip_v9_table("mor", "v9_txns_simple_nometa", tmp_path)
    stored = open_table(path).read()
    uls.upsert(
        spark.createDataFrame(txn(stored, "TXN-001", txn_ts=1_900_000_000_000, currency="SPK").to_pandas()), str(path)
    )
    pq.write_table(txn(stored, "TXN-003", txn_ts=1_900_000_000_000, currency="CLI"), tmp_path / "in.parquet")
    assert main(["upsert", str(path), str(tmp_path / "in.parquet"), "--no-progress"]) == 0
    frame = spark.createDataFrame(txn(stored, "TXN-007", txn_ts=1_900_000_000_000, currency="STR").to_pandas())
    assert uls.upsert(frame, str(path), batch_id=7) is not None
    assert uls.upsert(frame, str(path), batch_id=7) is None  # the same micro-batch again: skipped
    now = open_table(path).read()
    currencies = dict(zip(now["_hoodie_record_key"].to_pylist(), now["currency"].to_pylist()))
    assert [currencies[k] for k in ("TXN-001", "TXN-003", "TXN-007")] == ["SPK", "CLI", "STR"]
    assert properties(path)["hoodie.table.version"] == "9"
    assert_same(now, hudi_read(path), "after Spark, the CLI and a stream batch")


# -- several ordering fields ---------------------------------------------------------------------


@pytest.mark.parametrize("index", ["SIMPLE", "BLOOM", "GLOBAL_SIMPLE"])
def test_several_ordering_fields_are_compared_in_order(tmp_path: Path, index: str) -> None:
    """hoodie.table.ordering.fields=ts,seq on a copy-on-write table: in-batch duplicates and stored
    records are decided by ts, then by seq on a tie (as Hudi 1.1 compares them), in every index;
    a moved key under a global index moves when it wins. (hudi-rs 0.5 refuses several ordering
    fields; Apache Hudi 1.1 itself reads and writes them: tests/hudi/test_table_version_9.py.)"""
    table = create_table(
        tmp_path,
        "t",
        record_key="id",
        precombine_field=["ts", "seq"],
        partition_fields="p",
        options={"hoodie.write.table.version": 9, "hoodie.index.type": index},
    )
    table.upsert(ordered_batch(FIRST))
    table.upsert(ordered_batch(SECOND))
    assert stored(tmp_path) == expected(index.startswith("GLOBAL"))


def test_spark_compares_several_ordering_fields_in_order(tmp_path: Path, spark) -> None:
    import upsertlake.spark as uls

    # merge-on-read: the second batch goes to log files, which the global index's tagging merges
    for kind, index in [("COPY_ON_WRITE", "SIMPLE"), ("COPY_ON_WRITE", "GLOBAL_SIMPLE"),
                        ("COPY_ON_WRITE", "GLOBAL_BLOOM"), ("MERGE_ON_READ", "GLOBAL_SIMPLE")]:
        path = tmp_path / kind / index
        options = {
            "hoodie.datasource.write.table.type": kind,
            "hoodie.parquet.small.file.limit": "0",
            "hoodie.table.name": "t",
            "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.table.ordering.fields": "ts,seq",
            "hoodie.datasource.write.partitionpath.field": "p",
            "hoodie.write.table.version": "9",
            "hoodie.index.type": index,
        }
        for rows_ in (FIRST, SECOND):
            uls.upsert(spark.createDataFrame(ordered_batch(rows_).to_pandas()), str(path), **options)
        assert stored(path) == expected(index.startswith("GLOBAL")), index
        if kind == "MERGE_ON_READ":
            uls.upsert(spark.createDataFrame(ordered_batch(THIRD).to_pandas()), str(path), **options)
            assert stored(path) == after_third(index.startswith("GLOBAL")), index
        assert properties(path)["hoodie.table.ordering.fields"] == "ts,seq"


@pytest.mark.parametrize("index", ["SIMPLE", "BLOOM", "GLOBAL_SIMPLE", "BUCKET"])
def test_merge_on_read_tables_compare_several_ordering_fields_in_order(tmp_path: Path, index: str) -> None:
    """hoodie.table.ordering.fields=ts,seq on a merge-on-read table: the logs' records merge by
    (ts, seq) as copy-on-write compares them, at every read (snapshot, time travel, incremental),
    a late record (smaller tuple) is dropped, a `_hoodie_is_deleted` record deletes only with a
    tuple at least the stored one, delete() always; compaction writes what the snapshot reads."""
    table = create_table(
        tmp_path, "t", record_key="id", precombine_field=["ts", "seq"], partition_fields="p",
        table_type="MERGE_ON_READ", options={"hoodie.write.table.version": 9, "hoodie.index.type": index,
                                             "hoodie.parquet.small.file.limit": 0},  # updates go to logs
    )
    table.upsert(ordered_batch(FIRST))
    table.upsert(ordered_batch(SECOND))
    assert stored(tmp_path) == expected(index.startswith("GLOBAL"))
    assert any(tmp_path.glob("x/.*.log.*")), "the second batch went to log files"
    first, _ = (i for i in table.timeline() if i.is_completed)
    assert sorted((r["id"], r["ts"], r["seq"]) for r in table.read(as_of=first.time).to_pylist()) == [
        ("a", 1, 5), ("b", 1, 5), ("c", 2, 0), ("d", 1, 1), ("e", 1, 3)]
    # the second write's records, merged among themselves (its late b and c too, as with one field)
    assert sorted((r["id"], r["ts"], r["seq"]) for r in table.read_incremental(first.completion).to_pylist()) == [
        ("a", 1, 6), ("b", 1, 4), ("c", 1, 9), ("d", 2, 0), ("f", 0, 1)]
    # tagging reads the logs' tuples: under a global index, a's (1, 5) loses to the logged (1, 6)
    # and stays in x (dropped as late there); d's (2, 1) beats (2, 0) and moves to y
    table.upsert(ordered_batch(THIRD))
    assert stored(tmp_path) == after_third(index.startswith("GLOBAL"))
    deletes = ordered_batch([("a", 1, 5, "x"), ("b", 1, 5, "x"), ("e", 1, 4, "x")])
    table.upsert(deletes.append_column("_hoodie_is_deleted", pa.array([True, True, True])))
    table.delete(ordered_batch([("c", 0, 0, "x")]))
    # a: (1, 5) < stored (1, 6), a late delete; b: equal, deletes; e: (1, 4) > (1, 3); c: delete()
    gone = {("b", "x"), ("c", "x"), ("e", "x")}
    assert stored(tmp_path) == [r for r in after_third(index.startswith("GLOBAL")) if r[:2] not in gone]
    before = stored(tmp_path)
    table.compact()
    assert stored(tmp_path) == before
    assert open_table(tmp_path).timeline()[-1].action == "commit"


def test_lance_tables_on_an_object_store_read_as_on_disk(tmp_path: Path, s3_server, s3_table: str) -> None:
    """A Lance table on the S3 test server: each Lance file fetched through the table's storage
    reads as the local copy does (pylance opens paths, so the file goes through a temporary copy)."""
    local = unzip_v9_table("mor", "v9_lance_nonhivestyle", tmp_path)
    bucket, prefix = s3_table.removeprefix("s3://").split("/", 1)
    for f in local.rglob("*"):
        if f.is_file():
            s3_server.client.put_object(Bucket=bucket, Key=f"{prefix}/{f.relative_to(local)}", Body=f.read_bytes())
    remote = open_table(s3_table, storage_options=s3_server.options)
    for as_of in [None, *[i.time for i in remote.timeline() if i.is_completed][:2]]:
        assert rows(remote.read(as_of=as_of)) == rows(open_table(local).read(as_of=as_of))
    assert rows(remote.read()) == rows(hudi_read(local))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            "hoodie.table.format=iceberg",
            "hoodie.table.format=iceberg: the table keeps its timeline in another table format",
        ),
        ("hoodie.table.base.file.format=ORC", "hoodie.table.base.file.format=ORC: upsertlake reads parquet and Lance"),
        ("hoodie.table.version=10", "table version 10 is not supported"),
    ],
)
def test_what_version_9_tables_may_say_that_we_do_not_read_is_refused_untouched(
    tmp_path: Path, change: str, message: str
) -> None:
    from conftest import tree_digest

    path = unzip_v9_table("cow", "v9_txns_simple_nometa", tmp_path)
    props = path / ".hoodie" / "hoodie.properties"
    key = change.split("=")[0]
    lines = [line for line in props.read_text("latin-1").splitlines() if not line.startswith(key + "=")]
    props.write_text("\n".join([*lines, change]) + "\n", "latin-1")
    before = tree_digest(path)
    with pytest.raises(UnsupportedTableError, match=message):
        open_table(path).read()
    assert tree_digest(path) == before


def test_lance_tables_are_read_only_here(tmp_path: Path) -> None:
    from conftest import tree_digest

    path = unzip_v9_table("cow", "v9_lance_nonpartitioned", tmp_path)
    table = open_table(path)
    before = tree_digest(path)
    data = txn(table.read(), "1", score=0.5)
    with pytest.raises(
        UnsupportedTableError, match=r"hoodie.table.base.file.format=LANCE: this table is read-only here"
    ):
        table.upsert(data)
    assert tree_digest(path) == before

"""Record keys and partition paths match what Hudi's key generators wrote into real tables."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from upsertlake.config.table_config import TableConfig
from upsertlake.errors import SchemaError
from upsertlake.layout.keygen import KeyGenerator
from upsertlake.storage import Storage


@pytest.mark.parametrize(
    "name", ["v6_simplekeygen_nonhivestyle", "v6_complexkeygen_hivestyle", "v6_nonpartitioned"]
)
def test_keys_and_paths_equal_hudis(hudi_table, name: str) -> None:
    root = hudi_table(name)
    keygen = KeyGenerator(TableConfig.load(Storage(root)))
    files = sorted(root.rglob("*.parquet"))
    assert files
    for f in files:
        data = pq.read_table(f)
        assert keygen.record_keys(data).to_pylist() == data.column("_hoodie_record_key").to_pylist()
        assert keygen.partition_paths(data).to_pylist() == data.column("_hoodie_partition_path").to_pylist()


def _keygen(keys, parts=(), hive=False, urlencode=False) -> KeyGenerator:
    return KeyGenerator(
        TableConfig("t", tuple(keys), tuple(parts), hive_style_partitioning=hive, urlencode_partitions=urlencode)
    )


def test_partition_paths() -> None:
    batch = pa.table({"id": [1, 2, 3], "city": ["sf", None, "new york/x"], "day": ["d1", "", "d3"]})
    assert _keygen(["id"], ["city"]).partition_paths(batch).to_pylist() == [
        "sf",
        "__HIVE_DEFAULT_PARTITION__",
        "new york/x",
    ]
    assert _keygen(["id"], ["city", "day"], hive=True, urlencode=True).partition_paths(batch).to_pylist() == [
        "city=sf/day=d1",
        "city=__HIVE_DEFAULT_PARTITION__/day=__HIVE_DEFAULT_PARTITION__",
        "city=new+york%2Fx/day=d3",
    ]
    kg = _keygen(["id"], ["city", "day"], hive=True, urlencode=True)
    assert kg.partition_values("city=new+york%2Fx/day=__HIVE_DEFAULT_PARTITION__") == {
        "city": "new york/x",
        "day": None,
    }


def test_record_keys() -> None:
    batch = pa.table({"id": [1, 2], "name": ["a", None], "f": [1.0, 2.5]})
    assert _keygen(["id"], ["name"]).record_keys(batch).to_pylist() == ["1", "2"]
    assert _keygen(["id", "name"]).record_keys(batch).to_pylist() == ["id:1,name:a", "id:2,name:__null__"]
    assert _keygen(["f"], ["name"]).record_keys(batch).to_pylist() == ["1.0", "2.5"]


def test_null_and_missing_keys_are_errors() -> None:
    with pytest.raises(SchemaError, match="record key field 'id' is null or empty in 1 row"):
        _keygen(["id"], ["p"]).record_keys(pa.table({"id": ["a", None], "p": [1, 1]}))
    with pytest.raises(SchemaError, match="record key field 'uuid' is missing"):
        _keygen(["uuid"], ["p"]).record_keys(pa.table({"id": ["a"]}))
    with pytest.raises(SchemaError, match="all null or empty in 1 row"):
        _keygen(["a", "b"]).record_keys(pa.table({"a": [None, "x"], "b": ["", None]}))


def _stored_keys(table) -> list[str]:
    return sorted(table.read(columns=["_hoodie_record_key"]).column(0).to_pylist())


@pytest.mark.parametrize("version, named", [(6, False), (8, False), (9, True)])
def test_a_single_complex_key_field_is_spelled_as_the_hudi_of_the_tables_version_spells_it(
    tmp_path, version: int, named: bool
) -> None:
    """Hudi 0.14.1 to 1.0.2 (versions 6 and 8) wrote a complex key generator's one key field as
    the bare value, Hudi 1.1 (version 9) as `field:value`; an upsert finds the keys either way."""
    from upsertlake import create_table

    table = create_table(tmp_path / "t", "t", "id", "ts", ["p", "q"], options={"hoodie.write.table.version": version})
    batch = pa.table({"id": ["a", "b"], "ts": [1, 1], "p": ["x", "x"], "q": ["1", "1"]})
    table.upsert(batch)
    table.upsert(batch.set_column(1, "ts", pa.array([2, 2])))
    assert _stored_keys(table) == (["id:a", "id:b"] if named else ["a", "b"])
    assert table.read(columns=["id", "ts"]).sort_by("id").to_pylist() == [{"id": "a", "ts": 2}, {"id": "b", "ts": 2}]


def test_the_stored_spelling_of_a_single_complex_key_field_outlives_the_version(tmp_path) -> None:
    """A table whose stored keys say `id:value` keeps that spelling at a version whose Hudi wrote
    the bare value (here: written at 9, downgraded to 8), so its upserts find every key."""
    from upsertlake import create_table, open_table, upgrade_table

    path = tmp_path / "t"
    table = create_table(path, "t", "id", "ts", ["p", "q"], options={"hoodie.write.table.version": 9})
    table.upsert(pa.table({"id": ["a", "b"], "ts": [1, 1], "p": ["x", "x"], "q": ["1", "1"]}))
    upgrade_table(path, 8)
    table = open_table(path)
    table.upsert(pa.table({"id": ["b", "c"], "ts": [2, 2], "p": ["x", "x"], "q": ["1", "1"]}))
    assert _stored_keys(table) == ["id:a", "id:b", "id:c"]
    assert table.read(columns=["id", "ts"]).sort_by("id").to_pylist() == [
        {"id": "a", "ts": 1}, {"id": "b", "ts": 2}, {"id": "c", "ts": 2}]

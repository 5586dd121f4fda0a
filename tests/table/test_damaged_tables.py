"""A damaged table is never made worse: damaged or disagreeing properties refuse every write and
leave every byte as it was (`tree_digest`); reads proceed."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import CorruptTableError, create_table, open_table
from upsertlake.config.java_properties import parse_java_properties

from helpers import tree_digest

KEYS = ["id", "ts", "v", "p"]


def batch(ids=("a", "b", "c"), ts=None, p=("x", "y", "x")) -> pa.Table:
    ts = ts or [1] * len(ids)
    return pa.table({"id": list(ids), "ts": list(ts), "v": [f"v{i}" for i in ids], "p": list(p)})


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A partitioned table with two commits."""
    t = create_table(tmp_path / "t", "t", record_key="id", precombine_field="ts", partition_fields="p")
    t.upsert(batch())
    t.upsert(batch(ids=("a", "d"), ts=(2, 1), p=("x", "y")))
    return tmp_path / "t"


def properties(root: Path) -> Path:
    return root / ".hoodie/hoodie.properties"


def edit(root: Path, keep) -> None:
    """Rewrite hoodie.properties keeping the lines `keep(line)` accepts, bytes as they were."""
    path = properties(root)
    path.write_text(
        "".join(line for line in path.read_text("latin-1").splitlines(keepends=True) if keep(line)), "latin-1"
    )


def hive_table(tmp_path: Path) -> Path:
    """A hive-style table partitioned by `p` holding `batch()`; returns its folder."""
    create_table(tmp_path / "t", "t", record_key="id", precombine_field="ts", partition_fields="p",
                 hive_style_partitioning=True).upsert(batch())
    return tmp_path / "t"


def rename_partition_field(root: Path) -> str:
    """Rename the partition field p to v in hoodie.properties (the checksum still matches); returns the text."""
    text = properties(root).read_text("latin-1").replace("partition.fields=p\n", "partition.fields=v\n")
    properties(root).write_text(text, "latin-1")
    return text


def snapshot(root: Path) -> list[dict]:
    return sorted(open_table(root).read(columns=KEYS).to_pylist(), key=lambda r: r["id"])


def assert_refused(root: Path, culprit: str, call) -> None:
    before = tree_digest(root)
    with pytest.raises(CorruptTableError, match=re.escape(culprit)) as info:
        call()
    assert f"upsertlake doctor {root}" in str(info.value)
    assert tree_digest(root) == before


def test_half_cut_properties_refuse_the_upsert_and_change_nothing(root: Path) -> None:
    """The reported case: the second half of hoodie.properties cut away."""
    rows = snapshot(root)
    path = properties(root)
    lines = path.read_text("latin-1").splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if line.startswith("hoodie.table.timeline.timezone"))
    path.write_text("".join(lines[:cut]), "latin-1")
    lost = {"hoodie.table.partition.fields", "hoodie.table.precombine.field", "hoodie.table.timeline.timezone",
            "hoodie.table.create.schema", "hoodie.table.checksum"}
    assert lost.isdisjoint(parse_java_properties(path.read_text("latin-1")))

    table = open_table(root)  # opening and reading proceed
    assert snapshot(root) == rows
    assert sorted(table.read(columns=["id"], filters=[("p", "=", "y")]).column("id").to_pylist()) == ["b", "d"]
    assert_refused(root, f"{path} is damaged (lacks hoodie.table.checksum)",
                   lambda: table.upsert(batch(ids=("e",), p=("x",))))
    assert not (root / ".hoodie_partition_metadata").exists()
    assert snapshot(root) == rows


@pytest.mark.parametrize("service", ["clean", "archive", "rollback", "savepoint", "cluster"])
def test_damaged_properties_refuse_table_services(root: Path, service: str) -> None:
    edit(root, lambda line: not line.startswith("hoodie.table.checksum"))
    table = open_table(root)
    assert_refused(root, f"{properties(root)} is damaged", getattr(table, service))


def first_commit(root: Path) -> str:
    """The oldest completed commit's file name: the example the write guard names (the commits
    tell the partitions; the whole table is listed only when none names one)."""
    return min(p.name for p in (root / ".hoodie").glob("*.commit"))


def test_lost_partition_fields_with_a_valid_checksum_are_caught_by_the_data(root: Path) -> None:
    """Hudi's checksum covers only database and table name: a lost line passes it."""
    edit(root, lambda line: not line.startswith("hoodie.table.partition.fields"))
    table = open_table(root)
    assert table.table_config.damage is None and table.table_config.partition_fields == ()
    assert_refused(
        root, f"{properties(root)} disagrees with the table: it names no partition fields, "
        f"but commit {first_commit(root)} holds partition 'x' (depth 1)",
        lambda: table.upsert(batch(ids=("e",), p=("x",))),
    )


def test_without_a_commit_naming_a_partition_the_data_folders_tell(tmp_path: Path) -> None:
    """The write guard learns the partitions from the commits; a table whose commits name none
    (here: none yet, and a partition folder another writer left) is listed instead."""
    root = tmp_path / "t"
    create_table(root, "t", record_key="id", precombine_field="ts", partition_fields="p")
    (root / "x").mkdir()
    (root / "x/.hoodie_partition_metadata").write_text(
        "#partition metadata\ncommitTime=20240101000000000\npartitionDepth=1\n"
    )
    edit(root, lambda line: not line.startswith("hoodie.table.partition.fields"))
    assert_refused(root, "it names no partition fields, but a data folder holds partition 'x' (depth 1)",
                   lambda: open_table(root).upsert(batch(ids=("e",), p=("x",))))


def test_partition_field_names_that_disagree_with_hive_folders(tmp_path: Path) -> None:
    root = hive_table(tmp_path)
    # a lost keygen line and the partition field renamed: both keys still look plausible
    rename_partition_field(root)
    assert_refused(root, f"it names partition fields ['v'], but commit {first_commit(root)} holds partition 'p=x' "
                         "(fields ['p'])",
                   lambda: open_table(root).upsert(batch(ids=("e",), p=("x",))))


def test_nonpartitioned_keygen_on_partitioned_data(root: Path) -> None:
    text = properties(root).read_text("latin-1").replace("SimpleKeyGenerator", "NonpartitionedKeyGenerator")
    properties(root).write_text(text, "latin-1")
    assert_refused(root, "key generator NonpartitionedKeyGenerator does not go with partition fields ['p']",
                   lambda: open_table(root).upsert(batch()))


def test_a_backup_that_agrees_with_the_table_is_used(root: Path) -> None:
    backup = root / ".hoodie/hoodie.properties.backup"
    backup.write_bytes(properties(root).read_bytes())
    edit(root, lambda line: not line.startswith(("hoodie.table.checksum", "hoodie.table.partition.fields")))
    table = open_table(root)
    assert table.table_config.partition_fields == ("p",)
    table.upsert(batch(ids=("e",), p=("y",)))
    assert [r["id"] for r in snapshot(root) if r["p"] == "y"] == ["b", "d", "e"]


def test_a_backup_that_disagrees_with_the_table_is_refused(root: Path) -> None:
    backup = root / ".hoodie/hoodie.properties.backup"
    backup.write_text(properties(root).read_text("latin-1").replace("hoodie.table.partition.fields=p\n", ""), "latin-1")
    edit(root, lambda line: not line.startswith("hoodie.table.checksum"))
    assert_refused(root, f"{backup} disagrees with the table", lambda: open_table(root).upsert(batch()))


def test_a_corrupt_older_commit_names_the_file_what_it_breaks_and_the_doctor(root: Path) -> None:
    table = open_table(root)
    table.upsert(batch(ids=("f",), p=("x",)))
    rows = snapshot(root)
    first, second, _ = sorted((root / ".hoodie").glob("*.commit"))
    first.write_bytes(first.read_bytes()[:50])
    assert snapshot(root) == rows  # snapshot reads still work
    assert open_table(root).read(as_of=second.stem).num_rows == 4
    before = tree_digest(root)
    with pytest.raises(CorruptTableError) as info:
        open_table(root).upsert(batch(ids=("z",), p=("x",)))
    message = str(info.value)
    assert message.startswith(f"cannot parse {first}: ")
    assert "Every write and table service is refused" in message
    assert "put back a good copy of it" in message
    assert message.endswith(f"run `upsertlake doctor {root}`")
    assert tree_digest(root) == before


def test_reads_of_damaged_properties_do_not_prune_by_what_they_name(root: Path) -> None:
    """A damaged file may name wrong fields; filters still apply row by row, no file is skipped."""
    text = rename_partition_field(root)
    properties(root).write_text("".join(line for line in text.splitlines(keepends=True)
                                        if not line.startswith("hoodie.table.checksum")), "latin-1")
    table = open_table(root)
    assert table.table_config.damage is not None and table.table_config.partition_fields == ("v",)
    assert table.read(columns=["id"], filters=[("v", "=", "vb")]).column("id").to_pylist() == ["b"]


def test_a_lost_hive_style_line_is_caught_by_the_folders(tmp_path: Path) -> None:
    root = hive_table(tmp_path)
    edit(root, lambda line: not line.startswith("hoodie.datasource.write.hive_style_partitioning"))
    assert_refused(root, "hoodie.datasource.write.hive_style_partitioning is false, but commit "
                         f"{first_commit(root)} holds the "
                         "hive-style partition 'p=x'", lambda: open_table(root).upsert(batch(ids=("e",), p=("x",))))


def test_custom_keygen_partition_types_are_not_a_disagreement(tmp_path: Path) -> None:
    from upsertlake.config.table_config import TableConfig
    from upsertlake.services.write_guard import properties_disagreements
    from upsertlake.storage import Storage
    from upsertlake.timeline.active import Timeline

    t = create_table(tmp_path / "t", "t", record_key="id", precombine_field="ts", partition_fields="p",
                     hive_style_partitioning=True)
    t.upsert(batch())
    storage = Storage(tmp_path / "t")
    custom = TableConfig("t", ("id",), ("p:SIMPLE",), ("ts",), hive_style_partitioning=True,
                         keygen_class="org.apache.hudi.keygen.CustomKeyGenerator")
    assert properties_disagreements(storage, custom, Timeline.load(storage)) == []


def test_reads_of_disagreeing_properties_do_not_prune_by_them(tmp_path: Path) -> None:
    """A valid checksum with a wrong partition field: filters apply row by row, no file is skipped."""
    root = hive_table(tmp_path)
    rename_partition_field(root)
    table = open_table(root)
    assert table.table_config.damage is None and table.table_config.partition_fields == ("v",)
    assert table.read(columns=["id"], filters=[("v", "=", "vb")]).column("id").to_pylist() == ["b"]

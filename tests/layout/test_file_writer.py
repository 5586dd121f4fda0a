"""The base file writer's encodings: smaller files that Hudi's reader (hudi-rs) still reads exactly,
with the bloom filter footer of their keys unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from upsertlake import create_table
from upsertlake.layout.bloom_filter import bloom_filter_for_keys
from upsertlake.layout.file_writer import dictionary_columns

from helpers import hudi_read

N = 3000


def batch(ids: np.ndarray, ts: int, riders: int = 700) -> pa.Table:
    """Keys sorted by id; `rider` repeats over the table but not within its first rows."""
    return pa.table(
        {
            "k": pa.array([f"k{i:08d}" for i in ids]),
            "ts": pa.array(np.full(len(ids), ts, dtype=np.int64)),
            "p": pa.array(["a" if i % 2 else "b" for i in ids]),
            "rider": pa.array([f"rider-{i % riders}" for i in ids]),
            "fare": pa.array(ids * 1.5 + ts),
        }
    )


def encodings(path: Path) -> dict[str, set[str]]:
    meta = pq.ParquetFile(path).metadata
    out: dict[str, set[str]] = {}
    for rg in range(meta.num_row_groups):
        for i in range(meta.num_columns):
            column = meta.row_group(rg).column(i)
            out.setdefault(column.path_in_schema, set()).update(column.encodings)
    return out


def test_columns_are_encoded_by_what_they_hold_and_hudi_reads_them(tmp_path: Path) -> None:
    table = create_table(tmp_path, name="t", record_key="k", precombine_field="ts", partition_fields=["p"])
    table.insert(batch(np.arange(N), 1))
    rng = np.random.default_rng(3)
    table.upsert(batch(np.concatenate([rng.choice(N, 300, replace=False), np.arange(N, N + 100)]), 2))

    files = sorted(tmp_path.rglob("*.parquet"))
    latest = set(table.read(columns=["_hoodie_file_name"]).column(0).to_pylist())
    assert len(latest) == 2
    for path in files:
        enc = encodings(path)
        for column in ("_hoodie_record_key", "_hoodie_commit_seqno"):
            assert "DELTA_BYTE_ARRAY" in enc[column] and "RLE_DICTIONARY" not in enc[column], (path, column)
        for column in ("_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_file_name", "rider", "ts"):
            assert "RLE_DICTIONARY" in enc[column], (path, column)
        for column in ("k", "fare"):
            assert enc[column] == {"PLAIN", "RLE"}, (path, column)
        if path.name in latest:  # the footer's filter is the one of the file's keys, in order
            stored = pq.ParquetFile(path).metadata.metadata[b"org.apache.hudi.bloomfilter"].decode()
            keys = pq.read_table(path, columns=["_hoodie_record_key"]).column(0)
            assert stored == bloom_filter_for_keys(keys, 60000, 1e-9, "DYNAMIC_V0", 100000).serialize()
            assert key_range(path) == (min(keys.to_pylist()), max(keys.to_pylist()))

    ours = table.read().sort_by("_hoodie_record_key")
    theirs = hudi_read(tmp_path).sort_by("_hoodie_record_key")
    assert ours.num_rows == N + 100
    assert theirs.to_pylist() == ours.to_pylist()


def test_dictionary_columns_sample_rows_spread_over_the_table() -> None:
    """A column whose first rows are all distinct but which repeats over the table is a
    dictionary column; unique ones (keys, measurements) are not."""
    t = batch(np.arange(20_000), 1, riders=3000)
    assert pa.compute.count_distinct(t.slice(0, 4096).column("rider")).as_py() == 3000
    assert dictionary_columns(t) == ["ts", "p", "rider"]
    assert dictionary_columns(t.slice(0, 10)) == t.column_names  # too few rows to judge


def test_a_rewrite_keeps_the_dictionary_choice_of_the_version_it_replaces(tmp_path: Path) -> None:
    """A file group's new version dictionary-encodes what its previous version did, without
    sampling its rows again; a version of fewer rows than one sample was judged on too few
    (every rider differs among the first 100), so its successor is sampled afresh."""
    table = create_table(tmp_path, name="t", record_key="k", precombine_field="ts")

    def latest() -> dict[str, set[str]]:
        (name,) = set(table.read(columns=["_hoodie_file_name"]).column(0).to_pylist())
        return encodings(next(tmp_path.rglob(name)))

    table.insert(batch(np.arange(100), 1))
    assert latest()["rider"] == {"PLAIN", "RLE"}
    table.upsert(batch(np.arange(100, 5000), 1))  # tops up the small file: sampled afresh
    assert latest()["k"] == latest()["fare"] == {"PLAIN", "RLE"} and "RLE_DICTIONARY" in latest()["rider"]
    unique_riders = batch(np.arange(5000), 2, riders=10**9)
    assert "rider" not in dictionary_columns(unique_riders)  # sampling would now say plain
    table.upsert(unique_riders)
    assert latest()["k"] == latest()["fare"] == {"PLAIN", "RLE"} and "RLE_DICTIONARY" in latest()["rider"]
    assert table.read(columns=["rider"]).column(0).to_pylist() == unique_riders.column("rider").to_pylist()


def test_rewrites_keep_dictionary_columns_exact_with_a_string_ordering_field(tmp_path: Path) -> None:
    """Old files are read with their dictionary columns as dictionaries (here the ordering field
    too); the merge must compare, replace and carry over their values exactly, also when the
    batch adds a column."""
    def rows(ids: list[int], day: str, with_note: bool = False) -> pa.Table:
        data = {
            "k": pa.array([f"k{i:06d}" for i in ids]),
            "day": pa.array([day] * len(ids)),
            "city": pa.array([f"city-{i % 7}" for i in ids]),
        }
        if with_note:
            data["note"] = pa.array([f"n{i}" for i in ids])
        return pa.table(data)

    table = create_table(tmp_path, name="t", record_key="k", precombine_field="day")
    table.insert(rows(list(range(2000)), "2024-05-02"))
    newer, older = list(range(0, 2000, 7)), list(range(3, 2000, 11))
    batch = pa.concat_tables(
        [rows(newer, "2024-05-03", True), rows(older, "2024-05-01", True), rows([5000], "2024-05-01", True)]
    )
    table.upsert(batch.filter(pa.compute.invert(pa.compute.is_in(batch["k"], value_set=pa.array(["k000077"])))))

    got = {
        r["k"]: (r["day"], r["city"], r["note"]) for r in table.read(columns=["k", "day", "city", "note"]).to_pylist()
    }
    want = {f"k{i:06d}": ("2024-05-02", f"city-{i % 7}", None) for i in range(2000)}
    want.update({f"k{i:06d}": ("2024-05-03", f"city-{i % 7}", f"n{i}") for i in newer if i != 77})
    want["k005000"] = ("2024-05-01", "city-2", "n5000")
    assert got == want
    ours = table.read().sort_by("_hoodie_record_key")
    assert hudi_read(tmp_path).sort_by("_hoodie_record_key").to_pylist() == ours.to_pylist()
    names = set(ours.column("_hoodie_file_name").to_pylist())
    assert len(names) == 1 and all(name.endswith(".parquet") for name in names)


def key_range(path: Path) -> tuple[str, str]:
    meta = pq.read_metadata(path).metadata
    return meta[b"hoodie_min_record_key"].decode(), meta[b"hoodie_max_record_key"].decode()


def test_rewritten_footers_hold_the_key_range_of_the_new_version(tmp_path: Path) -> None:
    """A rewrite that keeps every old row widens the old footer's range by the inserted keys
    (no pass over the old keys); one that deletes rows measures its keys again."""
    table = create_table(tmp_path, name="t", record_key="k", precombine_field="ts")
    rows = lambda ids, ts, deleted=False: pa.table(  # noqa: E731
        {"k": [f"k{i:02d}" for i in ids], "ts": [ts] * len(ids), "_hoodie_is_deleted": [deleted] * len(ids)}
    )
    table.upsert(rows(range(10, 20), 1))

    def latest() -> Path:
        (name,) = set(table.read(columns=["_hoodie_file_name"]).column(0).to_pylist())
        return next(tmp_path.rglob(name))

    assert key_range(latest()) == ("k10", "k19")
    table.upsert(pa.concat_tables([rows([5, 25], 2), rows([12], 3)]))  # inserts either side, an update
    assert key_range(latest()) == ("k05", "k25")
    table.upsert(rows([5, 25], 4, deleted=True))  # the ends deleted: the range shrinks back
    assert key_range(latest()) == ("k10", "k19")
    table.upsert(rows([7], 5))  # an insert below, nothing deleted
    assert key_range(latest()) == ("k07", "k19")
    assert sorted(table.read(columns=["k"]).column(0).to_pylist()) == [f"k{i:02d}" for i in [7, *range(10, 20)]]

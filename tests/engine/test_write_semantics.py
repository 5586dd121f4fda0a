"""The write semantics, one rule per test, with the exact rows each write must leave behind.

Tables are tiny: `id` is the record key, `ts` the precombine field, `v` a payload and `p` the
partition field (when partitioned). `snap` reads a snapshot as sorted (id, ts, v[, p]) tuples, so
duplicates show up as repeated tuples.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from upsertlake import SchemaError, create_table, open_table
from upsertlake.timeline.instant import State

from helpers import hudi_read, record_bytes

GLOBAL_INDEXES = ["GLOBAL_SIMPLE", "GLOBAL_BLOOM", "GLOBAL_INMEMORY"]
ALL_INDEXES = ["SIMPLE", "BLOOM", "INMEMORY", *GLOBAL_INDEXES]


def batch(*records: tuple, partitioned: bool = True, deleted: bool = False) -> pa.Table:
    """Records as (id, ts, v, p[, is_deleted]) tuples (no p when not partitioned)."""
    cols: dict[str, list] = {"id": [], "ts": [], "v": []}
    if partitioned:
        cols["p"] = []
    if deleted:
        cols["_hoodie_is_deleted"] = []
    for rec in records:
        cols["id"].append(rec[0])
        cols["ts"].append(rec[1])
        cols["v"].append(rec[2])
        i = 3
        if partitioned:
            cols["p"].append(rec[i])
            i += 1
        if deleted:
            cols["_hoodie_is_deleted"].append(rec[i] if len(rec) > i else False)
    schema = pa.schema(
        [("id", pa.string()), ("ts", pa.int64()), ("v", pa.string())]
        + ([("p", pa.string())] if partitioned else [])
        + ([("_hoodie_is_deleted", pa.bool_())] if deleted else [])
    )
    return pa.table(cols, schema=schema)


def snap(table, partitioned: bool = True) -> list[tuple]:
    cols = ["id", "ts", "v", "p"] if partitioned else ["id", "ts", "v"]
    data = table.read(cols) if hasattr(table, "read") else table.select(cols)
    return sorted(tuple(r[c] for c in cols) for r in data.to_pylist())


def hudi_snap(path: Path, partitioned: bool = True) -> list[tuple]:
    data = hudi_read(path)
    if data.num_rows == 0:
        return []
    return snap(data, partitioned)


def new_table(tmp_path: Path, partitioned: bool = True, **options: object):
    return create_table(
        tmp_path / "t",
        "t",
        record_key="id",
        precombine_field="ts",
        partition_fields="p" if partitioned else None,
        options=options or None,
    )


def parquet_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.parquet") if ".hoodie" not in p.parts)


# -- upsert: dedup of the batch ----------------------------------------------------------------
@pytest.mark.parametrize("index", ["SIMPLE", "BLOOM", "INMEMORY"])
def test_upsert_dedups_batch_by_key_and_partition(tmp_path: Path, index: str) -> None:
    t = new_table(tmp_path, **{"hoodie.index.type": index})
    r = t.upsert(
        batch(
            ("a", 1, "a1", "x"),
            ("a", 3, "a3", "x"),
            ("a", 2, "a2", "x"),
            ("a", 3, "a3-later", "x"),  # a tie: the later record wins
            ("a", 0, "a0-y", "y"),  # the same key in another partition is another record
            ("b", 7, "b7", "x"),
            ("b", 6, "b6", "x"),
        )
    )
    assert (r.num_inserts, r.num_updates, r.num_deletes) == (3, 0, 0)
    expected = [("a", 0, "a0-y", "y"), ("a", 3, "a3-later", "x"), ("b", 7, "b7", "x")]
    assert snap(t) == expected
    assert hudi_snap(t.path) == expected


@pytest.mark.parametrize("index", GLOBAL_INDEXES)
def test_global_index_dedups_batch_by_key_alone(tmp_path: Path, index: str) -> None:
    t = new_table(tmp_path, **{"hoodie.index.type": index})
    t.upsert(
        batch(
            ("a", 1, "a1", "x"),
            ("a", 2, "a2", "y"),
            ("a", 2, "a2-later", "x"),  # tie: the later one, in partition x
            ("b", 5, "b5", "y"),
            ("b", 4, "b4", "x"),
        )
    )
    assert snap(t) == [("a", 2, "a2-later", "x"), ("b", 5, "b5", "y")]


def test_null_precombine_value_is_refused(tmp_path: Path) -> None:
    """Hudi refuses a null ordering value; so do we (it once silently lost the dedup)."""
    t = new_table(tmp_path, partitioned=False)
    with pytest.raises(SchemaError, match="precombine field 'ts' is null in 3 of 4 row"):
        t.upsert(
            batch(
                ("a", 1, "a1"), ("a", None, "anull"), ("b", None, "b-first"), ("b", None, "b-last"), partitioned=False
            )
        )
    assert t.timeline() == []


# -- upsert: merge with the stored record ------------------------------------------------------
@pytest.mark.parametrize("index", ALL_INDEXES)
def test_event_time_ordering_keeps_larger_stored_record(tmp_path: Path, index: str) -> None:
    t = new_table(tmp_path, **{"hoodie.index.type": index})
    t.upsert(batch(("a", 5, "a5", "x"), ("b", 5, "b5", "x"), ("c", 5, "c5", "y")))
    r = t.upsert(
        batch(
            ("a", 3, "a3", "x"),  # older than stored: the stored record stays
            ("b", 5, "b5-new", "x"),  # a tie with the stored record: the incoming one wins
            ("c", 9, "c9", "y"),  # newer: replaces
            ("d", 1, "d1", "y"),  # new key
        )
    )
    assert (r.num_inserts, r.num_updates, r.num_deletes) == (1, 2, 0)
    expected = [("a", 5, "a5", "x"), ("b", 5, "b5-new", "x"), ("c", 9, "c9", "y"), ("d", 1, "d1", "y")]
    assert snap(t) == expected
    assert hudi_snap(t.path) == expected


@pytest.mark.parametrize("where", ["table", "call"])
def test_commit_time_ordering_always_takes_incoming(tmp_path: Path, where: str) -> None:
    mode = {"hoodie.record.merge.mode": "COMMIT_TIME_ORDERING"}
    t = new_table(tmp_path, **(mode if where == "table" else {}))
    t.upsert(batch(("a", 5, "a5", "x"), ("b", 5, "b5", "x")))
    r = t.upsert(
        batch(("a", 3, "a3", "x"), ("a", 1, "a1", "x"), ("b", 9, "b9", "x")), mode if where == "call" else None
    )
    # the batch is still deduplicated by precombine (a3 beats a1), then the incoming record wins
    assert (r.num_inserts, r.num_updates) == (0, 2)
    assert snap(t) == [("a", 3, "a3", "x"), ("b", 9, "b9", "x")]


@pytest.mark.parametrize("mode", ["EVENT_TIME_ORDERING", "COMMIT_TIME_ORDERING"])
def test_is_deleted_rows_compete_by_precombine(tmp_path: Path, mode: str) -> None:
    t = new_table(tmp_path, **{"hoodie.record.merge.mode": mode})
    t.upsert(batch(("a", 5, "a5", "x"), ("b", 5, "b5", "x"), ("c", 5, "c5", "x")))
    r = t.upsert(
        batch(
            ("a", 3, "a-del", "x", True),  # older delete: loses to the stored record (event time)
            ("b", 6, "b-del", "x", True),  # newer delete: removes b
            ("z", 1, "z-del", "x", True),  # delete of a key that is not stored: nothing
            ("d", 2, "d2", "x", False),  # in the batch, d2 beats the older delete of d
            ("d", 1, "d-del", "x", True),
            ("e", 1, "e1", "x", False),  # ... and the newer delete of e beats e1: nothing
            ("e", 2, "e-del", "x", True),
            ("c", 7, "c-del", "x", True),  # within the batch the delete of c (7) beats c6
            ("c", 6, "c6", "x", False),
            deleted=True,
        )
    )
    if mode == "EVENT_TIME_ORDERING":
        expected = [("a", 5, "a5", "x"), ("d", 2, "d2", "x")]
        assert (r.num_inserts, r.num_updates, r.num_deletes) == (1, 0, 2)
    else:
        expected = [("d", 2, "d2", "x")]
        assert (r.num_inserts, r.num_updates, r.num_deletes) == (1, 0, 3)
    assert snap(t) == expected
    assert hudi_snap(t.path) == expected


@pytest.mark.parametrize("index", ALL_INDEXES)
def test_delete_removes_keys_whatever_their_precombine(tmp_path: Path, index: str) -> None:
    t = new_table(tmp_path, **{"hoodie.index.type": index})
    t.upsert(batch(("a", 9, "a9", "x"), ("b", 9, "b9", "x"), ("c", 9, "c9", "y")))
    r = t.delete(
        pa.table(
            {
                "id": ["a", "c", "nope", "a"],
                "ts": [0, 0, 0, 0],  # older than stored: delete() does not care
                "p": ["x", "y", "x", "x"],
            }
        )
    )
    assert (r.operation, r.num_inserts, r.num_updates, r.num_deletes) == ("delete", 0, 0, 2)
    assert snap(t) == [("b", 9, "b9", "x")]
    assert hudi_snap(t.path) == [("b", 9, "b9", "x")]
    # a delete of keys that are not in the table changes nothing
    r = t.delete(pa.table({"id": ["a", "zz"], "p": ["x", "x"]}))
    assert r.num_deletes == 0
    assert snap(t) == [("b", 9, "b9", "x")]


@pytest.mark.parametrize("index", ["SIMPLE", "BLOOM", "INMEMORY"])
def test_delete_in_wrong_partition_is_nothing(tmp_path: Path, index: str) -> None:
    t = new_table(tmp_path, **{"hoodie.index.type": index})
    t.upsert(batch(("a", 1, "a1", "x")))
    assert t.delete(pa.table({"id": ["a"], "p": ["y"]})).num_deletes == 0
    assert snap(t) == [("a", 1, "a1", "x")]


@pytest.mark.parametrize("index", GLOBAL_INDEXES)
def test_global_delete_needs_only_the_key(tmp_path: Path, index: str) -> None:
    t = new_table(tmp_path, **{"hoodie.index.type": index})
    t.upsert(batch(("a", 1, "a1", "x"), ("b", 1, "b1", "y")))
    r = t.delete(pa.table({"id": ["b", "q"]}))
    assert r.num_deletes == 1
    assert snap(t) == [("a", 1, "a1", "x")]


# -- insert and bulk insert --------------------------------------------------------------------
@pytest.mark.parametrize("operation", ["insert", "bulk_insert"])
@pytest.mark.parametrize("index", ["SIMPLE", "GLOBAL_SIMPLE", "INMEMORY"])
def test_insert_skips_the_index_and_creates_duplicates(tmp_path: Path, operation: str, index: str) -> None:
    t = new_table(tmp_path, **{"hoodie.index.type": index})
    t.upsert(batch(("a", 5, "a5", "x")))
    r = getattr(t, operation)(batch(("a", 1, "a1", "x"), ("b", 1, "b1", "x"), ("b", 2, "b2", "x")))
    assert (r.operation, r.num_inserts, r.num_updates, r.num_deletes) == (operation, 3, 0, 0)
    expected = [("a", 1, "a1", "x"), ("a", 5, "a5", "x"), ("b", 1, "b1", "x"), ("b", 2, "b2", "x")]
    assert snap(t) == expected
    assert hudi_snap(t.path) == expected


@pytest.mark.parametrize("operation", ["insert", "bulk_insert"])
def test_combine_before_insert_dedups_the_batch(tmp_path: Path, operation: str) -> None:
    t = new_table(tmp_path)
    t.upsert(batch(("a", 5, "a5", "x")))
    r = getattr(t, operation)(
        batch(("a", 1, "a1", "x"), ("b", 1, "b1", "x"), ("b", 2, "b2", "x"), ("b", 2, "b2-later", "x")),
        {"hoodie.combine.before.insert": "true"},
    )
    assert r.num_inserts == 2
    # the batch is deduplicated; the stored `a` is not looked up, so it is duplicated
    assert snap(t) == [("a", 1, "a1", "x"), ("a", 5, "a5", "x"), ("b", 2, "b2-later", "x")]


def test_upsert_after_insert_duplicates_merges_each_stored_copy(tmp_path: Path) -> None:
    t = new_table(tmp_path, partitioned=False)
    t.insert(batch(("a", 5, "a5"), ("a", 1, "a1"), ("b", 1, "b1"), ("b", 2, "b2"), partitioned=False))
    # event time: each stored copy is merged with the incoming record on its own
    t.upsert(batch(("a", 3, "a3"), ("b", 7, "b7"), partitioned=False))
    assert snap(t, False) == [("a", 3, "a3"), ("a", 5, "a5"), ("b", 7, "b7"), ("b", 7, "b7")]
    # a delete removes every copy
    t.delete(pa.table({"id": ["a", "b"]}))
    assert snap(t, False) == []


def _file_keys(path: Path) -> list[str]:
    return pq.read_table(path, columns=["_hoodie_record_key"]).column(0).to_pylist()


def _written_files(t, result) -> list[Path]:
    return [Path(t.path) / f for f in result.files_written]


def test_bulk_insert_splits_by_max_file_size_and_never_packs_small_files(tmp_path: Path) -> None:
    t = new_table(tmp_path, partitioned=False)
    t.upsert(batch(("seed", 0, "s"), partitioned=False))
    first = parquet_files(Path(t.path))
    assert len(first) == 1
    keys = [f"k{i:02d}" for i in range(10)]
    data = batch(*[(k, 1, k) for k in keys], partitioned=False)
    # room for 3.5 records as written: 3 per file; the record size estimate plays no part
    max_size = int(3.5 * record_bytes(new_table(tmp_path / "probe", partitioned=False), data))
    r = t.bulk_insert(data, {"hoodie.parquet.max.file.size": max_size, "hoodie.copyonwrite.record.size.estimate": 1})
    assert len(r.files_written) == 4
    assert sorted(len(_file_keys(p)) for p in _written_files(t, r)) == [1, 3, 3, 3]
    # the small file of the first commit was not touched (no new version of it)
    assert set(parquet_files(Path(t.path))) == set(first) | set(_written_files(t, r))
    assert snap(t, False) == sorted([("seed", 0, "s")] + [(k, 1, k) for k in keys])


@pytest.mark.parametrize("mode", ["NONE", "GLOBAL_SORT", "PARTITION_SORT"])
def test_bulk_insert_sort_modes(tmp_path: Path, mode: str) -> None:
    t = new_table(tmp_path)
    keys = ["k3", "k7", "k1", "k9", "k0", "k5", "k2", "k8", "k4", "k6"]
    data = batch(*[(k, 1, k, "x" if int(k[1]) % 2 else "y") for k in keys])
    max_size = int(2.5 * record_bytes(new_table(tmp_path / "probe"), data))  # 2 records a file
    r = t.bulk_insert(data, {"hoodie.bulkinsert.sort.mode": mode, "hoodie.parquet.max.file.size": max_size})
    files = {}
    for p in _written_files(t, r):
        files.setdefault(p.parent.name, []).append(_file_keys(p))
    assert sorted(files) == ["x", "y"]
    for partition, contents in files.items():
        in_input_order = [k for k in keys if (int(k[1]) % 2 == 1) == (partition == "x")]
        chunks = [in_input_order[i : i + 2] for i in range(0, len(in_input_order), 2)]
        if mode == "NONE":
            # records go into files in the order they came
            assert sorted(contents) == sorted(chunks)
        else:
            # sorted by (partition, key): each file holds a contiguous, sorted run of keys
            run = sorted(in_input_order)
            assert sorted(contents) == [run[i : i + 2] for i in range(0, len(run), 2)]
    assert snap(t) == sorted((k, 1, k, "x" if int(k[1]) % 2 else "y") for k in keys)


# -- rewrites: carried-over rows, emptied file groups, partition moves -------------------------
def test_carried_over_rows_keep_commit_time_and_seqno(tmp_path: Path) -> None:
    t = new_table(tmp_path)
    first = t.upsert(batch(("a", 1, "a1", "x"), ("b", 1, "b1", "x"), ("c", 1, "c1", "x")))
    cols = [
        "id",
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    ]
    before = {r["id"]: r for r in t.read(cols).to_pylist()}
    second = t.upsert(batch(("b", 2, "b2", "x"), ("d", 1, "d1", "x")))
    after = {r["id"]: r for r in t.read(cols).to_pylist()}
    new_name = Path(second.files_written[0]).name
    assert len(second.files_written) == 1  # the small file took the insert too
    for key in ("a", "c"):
        assert after[key]["_hoodie_commit_time"] == first.instant_time
        assert {k: v for k, v in after[key].items() if k != "_hoodie_file_name"} == {
            k: v for k, v in before[key].items() if k != "_hoodie_file_name"
        }
        assert after[key]["_hoodie_file_name"] == new_name
    for key in ("b", "d"):
        assert after[key]["_hoodie_commit_time"] == second.instant_time
        assert after[key]["_hoodie_commit_seqno"].startswith(second.instant_time + "_")
        assert after[key]["_hoodie_file_name"] == new_name
    # a file name column is right in the file itself too, and Hudi's reader agrees
    assert set(pq.read_table(Path(t.path) / second.files_written[0]).column("_hoodie_file_name").to_pylist()) == {
        new_name
    }
    hudi = {r["id"]: r for r in hudi_read(t.path).select(cols).to_pylist()}
    assert hudi == after


@pytest.mark.parametrize("how", ["delete", "is_deleted"])
def test_file_group_whose_last_record_is_deleted_gets_an_empty_version(tmp_path: Path, how: str) -> None:
    t = new_table(tmp_path)
    t.upsert(batch(("a", 1, "a1", "x"), ("b", 1, "b1", "y")))
    (old_y,) = [p for p in parquet_files(Path(t.path)) if p.parent.name == "y"]
    if how == "delete":
        r = t.delete(pa.table({"id": ["b"], "p": ["y"]}))
    else:
        r = t.upsert(batch(("b", 2, "gone", "y", True), deleted=True))
    assert r.num_deletes == 1
    (new_y,) = _written_files(t, r)
    file_id = old_y.name.split("_")[0]
    assert new_y.parent.name == "y" and new_y.name.split("_")[0] == file_id
    assert new_y.name.endswith(f"_{r.instant_time}.parquet")
    assert pq.read_table(new_y).num_rows == 0
    assert old_y.exists()  # the cleaner's business, not the writer's
    assert snap(t) == [("a", 1, "a1", "x")]
    assert hudi_snap(t.path) == [("a", 1, "a1", "x")]
    # time travel still sees the old version
    assert snap(t.read(["id", "ts", "v", "p"], as_of=t.timeline()[0].time)) == [
        ("a", 1, "a1", "x"),
        ("b", 1, "b1", "y"),
    ]


@pytest.mark.parametrize("index", GLOBAL_INDEXES)
def test_global_index_moves_a_key_to_its_new_partition(tmp_path: Path, index: str) -> None:
    t = new_table(tmp_path, **{"hoodie.index.type": index})
    t.upsert(batch(("a", 1, "a1", "x"), ("b", 1, "b1", "x")))
    r = t.upsert(batch(("a", 2, "a2", "y")))
    assert (r.num_inserts, r.num_deletes) == (1, 1)
    expected = [("a", 2, "a2", "y"), ("b", 1, "b1", "x")]
    assert snap(t) == expected
    assert hudi_snap(t.path) == expected
    # moving the only record of a partition leaves an empty file group behind
    r = t.upsert(batch(("a", 3, "a3", "x")))
    assert snap(t) == [("a", 3, "a3", "x"), ("b", 1, "b1", "x")]
    assert [pq.read_table(p).num_rows for p in _written_files(t, r) if p.parent.name == "y"] == [0]
    assert hudi_snap(t.path) == [("a", 3, "a3", "x"), ("b", 1, "b1", "x")]


@pytest.mark.parametrize("index", GLOBAL_INDEXES)
def test_global_index_move_follows_the_merge_mode(tmp_path: Path, index: str) -> None:
    t = new_table(tmp_path, **{"hoodie.index.type": index})
    t.upsert(batch(("a", 5, "a5", "x"), deleted=True))
    # event time: an older record for another partition loses to the stored one, which stays put
    t.upsert(batch(("a", 3, "a3", "y"), deleted=True))
    assert snap(t) == [("a", 5, "a5", "x")]
    # an older delete loses too
    t.upsert(batch(("a", 4, "a-del", "y", True), deleted=True))
    assert snap(t) == [("a", 5, "a5", "x")]
    # commit time: the incoming record always wins, so the key moves
    t.upsert(batch(("a", 3, "a3", "y"), deleted=True), {"hoodie.record.merge.mode": "COMMIT_TIME_ORDERING"})
    assert snap(t) == [("a", 3, "a3", "y")]
    # a newer delete arriving for another partition removes the key where it lives
    t.upsert(batch(("a", 9, "a-del", "x", True), deleted=True))
    assert snap(t) == []
    assert hudi_snap(t.path) == []


def test_non_global_index_keeps_a_key_per_partition(tmp_path: Path) -> None:
    t = new_table(tmp_path)
    t.upsert(batch(("a", 1, "a1", "x")))
    t.upsert(batch(("a", 2, "a2", "y")))
    assert snap(t) == [("a", 1, "a1", "x"), ("a", 2, "a2", "y")]


# -- the result object and the write client ----------------------------------------------------
def test_result_object(tmp_path: Path) -> None:
    t = new_table(tmp_path)
    r = t.upsert(batch(("a", 1, "a1", "x"), ("b", 1, "b1", "y")))
    assert r.operation == "upsert" and r.committed
    assert len(r.instant_time) == 17 and r.instant_time.isdigit()
    assert (r.num_inserts, r.num_updates, r.num_deletes) == (2, 0, 0)
    assert len(r.files_written) == 2
    for f in r.files_written:
        assert (Path(t.path) / f).is_file() and f.endswith(f"_{r.instant_time}.parquet")
    assert set(r.stage_seconds) == {"dedup", "tag", "profile", "write", "commit"}
    assert all(isinstance(s, float) and s >= 0 for s in r.stage_seconds.values())
    assert [i.time for i in t.timeline()] == [r.instant_time]
    r2 = t.upsert(batch(("a", 2, "a2", "x"), ("c", 1, "c1", "x"), ("b", 2, "b-del", "y", True), deleted=True))
    assert r2.instant_time > r.instant_time
    assert (r2.num_inserts, r2.num_updates, r2.num_deletes) == (1, 1, 1)


def test_write_client_nothing_visible_before_commit(tmp_path: Path) -> None:
    t = new_table(tmp_path)
    t.upsert(batch(("a", 1, "a1", "x")))
    c = t.write_client()
    i = c.start_commit()
    assert [(x.time, x.state) for x in t.timeline()][-1] == (i, State.REQUESTED)
    s = c.upsert(batch(("a", 2, "a2", "x"), ("b", 1, "b1", "y")), i)
    assert s.instant_time == i and not s.committed
    assert all((Path(t.path) / f).is_file() for f in s.files_written)  # written, but not visible
    assert snap(t) == [("a", 1, "a1", "x")]
    assert snap(open_table(t.path)) == [("a", 1, "a1", "x")]
    assert hudi_snap(t.path) == [("a", 1, "a1", "x")]
    done = c.commit(i, s)
    assert done.committed and done.instant_time == i
    assert snap(t) == [("a", 2, "a2", "x"), ("b", 1, "b1", "y")]
    assert hudi_snap(t.path) == [("a", 2, "a2", "x"), ("b", 1, "b1", "y")]
    assert not (Path(t.path) / ".hoodie" / ".temp" / i).exists()


def test_next_write_rolls_back_an_abandoned_instant(tmp_path: Path) -> None:
    t = new_table(tmp_path)
    t.upsert(batch(("a", 1, "a1", "x")))
    c = t.write_client()
    i = c.start_commit()
    s = c.upsert(batch(("a", 2, "a2", "x"), ("b", 1, "b1", "y")), i)
    staged = Path(t.path) / ".hoodie" / ".temp" / f"{i}.staging"  # as a Spark driver stages a small batch
    staged.mkdir(parents=True)
    (staged / "tagged.arrow").write_bytes(b"records")
    # the writer goes away without committing (its heartbeat stops); another writer comes along
    c.writes.get(i).heartbeat.stop()
    t2 = open_table(t.path)
    r = t2.upsert(batch(("c", 1, "c1", "x")))
    assert all(not (Path(t.path) / f).exists() for f in s.files_written)
    assert not staged.exists()
    assert not any(p.name.startswith(i) for p in (Path(t.path) / ".hoodie").iterdir())
    assert [x.time for x in t2.timeline()][-1] == r.instant_time
    assert snap(t2) == [("a", 1, "a1", "x"), ("c", 1, "c1", "x")]
    assert hudi_snap(t.path) == [("a", 1, "a1", "x"), ("c", 1, "c1", "x")]


@pytest.mark.parametrize("index", ["SIMPLE", "GLOBAL_SIMPLE"])
def test_delete_on_a_table_without_commits_is_nothing(tmp_path: Path, index: str) -> None:
    t = new_table(tmp_path, **{"hoodie.index.type": index})
    r = t.delete(pa.table({"id": ["a"], "p": ["x"]}))
    assert (r.num_inserts, r.num_updates, r.num_deletes, r.files_written) == (0, 0, 0, ())
    assert t.read().num_rows == 0
    t.upsert(batch(("a", 1, "a1", "x")))
    assert snap(t) == [("a", 1, "a1", "x")]
    assert hudi_snap(t.path) == [("a", 1, "a1", "x")]

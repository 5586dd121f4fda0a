"""merge_slice: a slice's base records and log blocks merged by key as Hudi's file
group reader does, by hand on exact tables, on the Hudi-written fixtures against the `hudi` reader,
and on random event sequences written as log files of one slice, against the `hudi` reader and
Hudi's fold (`UPSERTLAKE_SLICE_SEEDS=N` for more sequences)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from upsertlake.config.enums import MergeMode
from upsertlake.logfile import Block, read_blocks, rollback_block
from upsertlake.logfile.blocks import DataBlock, DeleteBlock
from upsertlake.logfile.merge import merge_counted, merge_slice

from helpers import hudi_read, unzip_mor_table

KEY = "_hoodie_record_key"
EVENT, COMMIT = MergeMode.EVENT_TIME, MergeMode.COMMIT_TIME
SCHEMA = pa.schema([(KEY, pa.string()), ("ts", pa.int64()), ("v", pa.string())])


def records(instant: str, rows: list[tuple], schema: pa.Schema = SCHEMA) -> DataBlock:
    return DataBlock(instant, "{}", pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema=schema), {})


def deletes(instant: str, keys: list[str], ordering: list[int | None] | None = None) -> DeleteBlock:
    """Delete keys; no ordering list: Hudi's plain deletes (IntWrapper(0)); None in it: natural too."""
    natural = [True] * len(keys) if ordering is None else [o is None for o in ordering]
    values = pa.array(ordering or [None] * len(keys), pa.int64() if ordering else pa.null())
    table = pa.table(
        {"record_key": keys, "partition_path": [""] * len(keys), "ordering_value": values, "natural_order": natural}
    )
    return DeleteBlock(instant, table, {})


BASE = pa.Table.from_pylist(
    [{KEY: "a", "ts": 5, "v": "a0"}, {KEY: "b", "ts": 5, "v": "b0"}, {KEY: "c", "ts": 5, "v": "c0"}], schema=SCHEMA
)
ALL = lambda _: True  # noqa: E731


def merged(blocks: list[Block], mode: MergeMode = EVENT, base: pa.Table | None = BASE, valid=ALL, **kw) -> list[tuple]:
    out = merge_slice(base, blocks, KEY, "ts", mode, valid, **kw)
    return [tuple(r.values()) for r in out.to_pylist()]


def test_event_time_the_larger_ordering_value_wins_and_ties_go_to_the_later_write() -> None:
    blocks = [records("1", [("a", 4, "a1"), ("b", 5, "b1"), ("c", 6, "c1"), ("d", 1, "d1")])]
    assert merged(blocks) == [("a", 5, "a0"), ("b", 5, "b1"), ("c", 6, "c1"), ("d", 1, "d1")]
    # log against log: a smaller later value loses to a larger earlier one, a tie goes to the later
    blocks += [records("2", [("c", 5, "c2"), ("d", 1, "d2")])]
    assert merged(blocks) == [("a", 5, "a0"), ("b", 5, "b1"), ("c", 6, "c1"), ("d", 1, "d2")]


def test_commit_time_the_later_write_wins() -> None:
    blocks = [records("1", [("a", 4, "a1"), ("c", 6, "c1")]), records("2", [("c", 1, "c2")])]
    assert merged(blocks, COMMIT) == [("a", 4, "a1"), ("b", 5, "b0"), ("c", 1, "c2")]


def test_a_plain_delete_wins_whatever_the_ordering_and_a_later_record_brings_the_key_back() -> None:
    blocks = [records("1", [("a", 9, "a1")]), deletes("2", ["a", "b", "zz"]), records("3", [("b", 6, "b3")])]
    assert merged(blocks) == [("b", 6, "b3"), ("c", 5, "c0")]
    assert merged(blocks, COMMIT) == [("b", 6, "b3"), ("c", 5, "c0")]


def test_after_a_plain_delete_the_base_record_competes_with_the_logs_winner() -> None:
    """Hudi merges the log first (the plain delete clears the log's earlier records) and then the
    base record with the log's winner (FileGroupRecordBuffer.hasNextBaseRecord): a record written
    after the delete with a smaller ordering value than the base record's leaves the base record,
    as hudi-rs reads it (tests/engine/test_merge_on_read_model.py); a delete that is the log's last word deletes."""
    blocks = [
        records("1", [("a", 9, "a1")]),
        deletes("2", ["a", "b", "zz"]),
        records("3", [("a", 8, "a3"), ("b", 1, "b3")]),
    ]
    assert merged(blocks) == [("a", 8, "a3"), ("b", 5, "b0"), ("c", 5, "c0")]  # a: the log's a1 cleared
    assert merged(blocks, COMMIT) == [("a", 8, "a3"), ("b", 1, "b3"), ("c", 5, "c0")]
    assert merged(blocks, base=None) == [("a", 8, "a3"), ("b", 1, "b3")]  # a log-only group: no base record


def test_a_delete_with_an_ordering_value_competes_by_event_time() -> None:
    blocks = [deletes("1", ["a", "b", "c"], [4, 5, None])]
    assert merged(blocks) == [("a", 5, "a0")]  # 4 < 5 keeps a; a tie deletes b; None is a plain delete
    assert merged(blocks, COMMIT) == []
    # after a delete of ordering 7, a record must reach 7 to come back
    later = [*blocks, deletes("2", ["a"], [7]), records("3", [("a", 6, "a3"), ("b", 6, "b3")])]
    assert merged(later) == [("b", 6, "b3")]
    assert merged([*later, records("4", [("a", 7, "a4")])]) == [("a", 7, "a4"), ("b", 6, "b3")]


def test_after_a_plain_delete_a_delete_with_an_ordering_value_leaves_it_and_a_record_replaces_it() -> None:
    """Hudi 1.x (deltaMergeDeleteRecord keeps a commit-time delete) and hudi-rs: once a plain
    delete is a key's state, a delete block's delete with an ordering value leaves it (it must not
    bring the base record back by losing to it), while a record, a `_hoodie_is_deleted` one too,
    replaces it and then competes with the base record (upsert a at 9, delete() it,
    upsert a `_hoodie_is_deleted` row of a at 8 read as (9, v1))."""
    schema = SCHEMA.append(pa.field("_hoodie_is_deleted", pa.bool_()))
    base = pa.Table.from_pylist(
        [{KEY: k, "ts": 9, "v": f"{k}0", "_hoodie_is_deleted": False} for k in "abcd"], schema=schema)
    blocks = [deletes("1", list("abcd")), deletes("2", list("ab"), [8, 10]),
              records("3", [("c", 8, "c3", True), ("d", 10, "d3", True)], schema)]
    assert merged(blocks, base=base) == [("c", 9, "c0", False)]  # c's record at 8 loses to the base's 9
    assert merged([*blocks, records("4", [("a", 1, "a4", False)], schema)], base=base) == [
        ("a", 9, "a0", False), ("c", 9, "c0", False)]
    assert merged([*blocks, records("4", [("b", 9, "b4", False)], schema)], base=base) == [
        ("b", 9, "b4", False), ("c", 9, "c0", False)]
    assert merged(blocks, base=None) == []
    # before the plain delete, the ordered ones compete as ever
    assert merged([deletes("1", ["a", "b"], [8, 10]), deletes("2", ["c"])], base=base) == [
        ("a", 9, "a0", False), ("d", 9, "d0", False)]


def test_is_deleted_records_delete_when_they_win() -> None:
    schema = SCHEMA.append(pa.field("_hoodie_is_deleted", pa.bool_()))
    blocks = [records("1", [("a", 6, "x", True), ("b", 4, "x", True), ("c", 5, "c1", False)], schema)]
    assert merged(blocks) == [("b", 5, "b0"), ("c", 5, "c1")]
    assert merged(blocks, COMMIT) == [("c", 5, "c1")]
    assert merged([*blocks, records("2", [("a", 6, "a2", None)], schema)]) == [
        ("a", 6, "a2"),
        ("b", 5, "b0"),
        ("c", 5, "c1"),
    ]


def test_only_valid_instants_count_and_rollback_blocks_void_their_target() -> None:
    blocks = [records("1", [("a", 9, "a1")]), records("2", [("b", 9, "b2")]), deletes("3", ["c"])]
    assert merged(blocks, valid={"1"}) == [("a", 9, "a1"), ("b", 5, "b0"), ("c", 5, "c0")]
    assert merged(blocks, valid=lambda i: i != "1") == [("a", 5, "a0"), ("b", 9, "b2")]
    # a rollback voids its target's blocks wherever they sit, before or after it in the log
    voided = [rollback_block("4", "1"), *blocks, rollback_block("5", "3")]
    assert merged(voided) == [("a", 5, "a0"), ("b", 9, "b2"), ("c", 5, "c0")]
    assert merged([*blocks[:1], rollback_block("6", "1")], base=None) == []


def test_base_order_is_kept_and_log_only_keys_follow_in_log_order() -> None:
    blocks = [
        records("1", [("z", 1, "z1"), ("b", 9, "b1"), ("m", 1, "m1")]),
        records("2", [("e", 1, "e2"), ("z", 2, "z2")]),
    ]
    assert merged(blocks) == [
        ("a", 5, "a0"),
        ("b", 9, "b1"),
        ("c", 5, "c0"),
        ("z", 2, "z2"),
        ("m", 1, "m1"),
        ("e", 1, "e2"),
    ]


def test_duplicate_keys_in_one_block_fold_in_row_order() -> None:
    blocks = [records("1", [("a", 7, "first"), ("a", 7, "second"), ("a", 6, "third")])]
    assert merged(blocks) == [("a", 7, "second"), ("b", 5, "b0"), ("c", 5, "c0")]
    assert merged(blocks, COMMIT) == [("a", 6, "third"), ("b", 5, "b0"), ("c", 5, "c0")]


def test_log_blocks_with_other_columns_are_read_in_the_base_schema() -> None:
    wider = pa.schema([(KEY, pa.string()), ("ts", pa.int32()), ("extra", pa.float64())])
    blocks = [records("1", [("a", 9, 1.5), ("n", 1, 2.5)], wider)]
    assert merged(blocks) == [("a", 9, None), ("b", 5, "b0"), ("c", 5, "c0"), ("n", 1, None)]
    out = merge_slice(BASE, blocks, KEY, "ts", EVENT, ALL)
    assert out.schema == SCHEMA


def test_a_log_only_file_group_takes_the_last_data_blocks_schema_or_the_one_given() -> None:
    blocks = [records("1", [("a", 1, "a1"), ("b", 1, "b1")]), deletes("2", ["a"])]
    assert merged(blocks, base=None) == [("b", 1, "b1")]
    narrow = pa.schema([(KEY, pa.string()), ("v", pa.string())])
    assert merged(blocks, base=None, schema=narrow) == [("b", "b1")]
    assert merge_slice(None, [deletes("1", ["a"])], KEY, "ts", EVENT, ALL).num_rows == 0
    assert merged([], base=BASE) == [("a", 5, "a0"), ("b", 5, "b0"), ("c", 5, "c0")]


def test_without_an_ordering_field_event_time_keeps_the_later_write() -> None:
    out = merge_slice(BASE, [records("1", [("a", 1, "a1")])], KEY, None, EVENT, ALL)
    assert out.column("v").to_pylist() == ["a1", "b0", "c0"]


# ---- the Hudi-written fixtures, slice by slice, against the `hudi` reader ---------------------------


def snapshot_by_slices(table: Path, as_of: str, completed: list[str], mode: str) -> list[dict]:
    """Each file group's latest slice as of `as_of` (base file of the latest instant <= as_of,
    log files of later instants <= as_of), merged; `completed`: the completed instants."""
    valid = {i for i in completed if i <= as_of}
    out = []
    for part in sorted(p for p in table.iterdir() if p.is_dir() and p.name != ".hoodie"):
        for file_id in sorted({f.name.split("_")[0] for f in part.glob("*.parquet")}):
            bases = sorted(
                (f for f in part.glob(f"{file_id}_*.parquet") if f.stem.rsplit("_", 1)[1] <= as_of),
                key=lambda f: f.stem.rsplit("_", 1)[1],
            )
            base_instant = bases[-1].stem.rsplit("_", 1)[1]
            blocks = [b for f in sorted(part.glob(f".{file_id}_*.log.*")) for b in read_blocks(f.read_bytes())]
            blocks = [b for b in blocks if getattr(b, "instant", "") > base_instant]
            out += merge_slice(pq.read_table(bases[-1]), blocks, KEY, "ts", mode, valid).to_pylist()
    return out


V8_INSTANTS = [
    "20251220210108078",
    "20251220210123755",
    "20251220210125441",
    "20251220210127080",
    "20251220210128625",
    "20251220210129235",
    "20251220210130911",
]


@pytest.mark.parametrize("as_of", V8_INSTANTS)
def test_the_v8_fixture_merges_as_the_hudi_reader_reads_it(tmp_path: Path, as_of: str) -> None:
    table = unzip_mor_table("mor_v8_trips_8i3u1d", tmp_path)
    columns = ["_hoodie_commit_time", "_hoodie_commit_seqno", KEY, "ts", "rider", "driver", "fare", "city"]

    def view(rows: list[dict]) -> list[dict]:
        return sorted(({c: r[c] for c in columns} for r in rows), key=lambda r: r[KEY])

    ours = view(snapshot_by_slices(table, as_of, V8_INSTANTS, EVENT))
    assert ours == view(hudi_read(table, as_of=as_of).to_pylist())
    riders = {r["rider"]: r["fare"] for r in ours}
    expected = {"20251220210108078": 8, "20251220210125441": 7, "20251220210127080": 7, "20251220210128625": 6}
    assert len(riders) == expected.get(as_of, len(riders))
    if as_of >= "20251220210128625":
        assert "rider-J" not in riders and "rider-F" not in riders and riders["rider-A"] == 0.0


def test_the_v6_fixture_merges_by_commit_time_as_the_hudi_reader_reads_it(tmp_path: Path) -> None:
    table = unzip_mor_table("mor_v6_trips_8i1u", tmp_path)
    instants = ["20250331030642808", "20250331030645735"]
    ours = snapshot_by_slices(table, instants[-1], instants, COMMIT)
    hudi = hudi_read(table).to_pylist()
    columns = ["_hoodie_commit_time", KEY, "ts", "rider", "fare"]
    assert sorted(({c: r[c] for c in columns} for r in ours), key=lambda r: r[KEY]) == sorted(
        ({c: r[c] for c in columns} for r in hudi), key=lambda r: r[KEY]
    )
    assert {r["rider"]: r["fare"] for r in ours}["rider-D"] == 25.0


def test_base_records_marked_deleted_are_not_read() -> None:
    schema = SCHEMA.append(pa.field("_hoodie_is_deleted", pa.bool_()))
    base = pa.Table.from_pylist(
        [
            {KEY: "a", "ts": 5, "v": "a0", "_hoodie_is_deleted": True},
            {KEY: "b", "ts": 5, "v": "b0", "_hoodie_is_deleted": None},
        ],
        schema=schema,
    )
    assert merged([], base=base) == [("b", 5, "b0", None)]
    assert merged([records("1", [("c", 1, "c1")])], base=base) == [("b", 5, "b0", None), ("c", 1, "c1", None)]
    # a base record marked deleted is a delete of its ordering value (Hudi's writers never leave one)
    assert merged([records("1", [("a", 4, "a1")])], base=base) == [("b", 5, "b0", None)]
    assert merged([records("1", [("a", 6, "a1")])], base=base) == [("a", 6, "a1", None), ("b", 5, "b0", None)]


@pytest.mark.parametrize("mode", [EVENT, COMMIT])
@pytest.mark.parametrize("seed", range(6))
def test_merge_counts_are_the_set_definitions_compaction_reports(mode: str, seed: int) -> None:
    """merge_counted's counts (compaction's write stat: distinct log keys, base keys written,
    keys only the log holds that were written) agree with their definitions over key sets, on
    random slices with updates, inserts, deletes of both kinds and base rows that win."""
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(12)]
    base = pa.Table.from_pylist([{KEY: k, "ts": rng.randint(0, 5), "v": f"{k}0"} for k in keys[:6]], schema=SCHEMA)
    blocks: list[Block] = []
    for n in range(1, 5):
        chosen = rng.sample(keys, 5)
        if rng.random() < 0.3:
            blocks.append(deletes(str(n), chosen[:2], [None, rng.randint(0, 5)]))
        blocks.append(records(str(n), [(k, rng.randint(0, 5), f"{k}{n}") for k in chosen]))
    out = merge_counted(base, blocks, KEY, "ts", mode, ALL)
    log_keys = {k for b in blocks for k in (b.records if isinstance(b, DataBlock) else b.keys).column(0).to_pylist()}
    base_keys, written = set(base[KEY].to_pylist()), out.records[KEY].to_pylist()
    assert out.log_keys == len(log_keys)
    assert out.updates == len(log_keys & base_keys & set(written))
    assert out.added.to_pylist() == [k for k in written if k in log_keys and k not in base_keys]
    assert out.records.equals(merge_slice(base, blocks, KEY, "ts", mode, ALL))
    # a read's merge (unordered): the same records and counts; base rows that stay keep their
    # order, the log's winners follow, the keys only the log holds last
    loose = merge_counted(base, blocks, KEY, "ts", mode, ALL, ordered=False)
    assert (loose.log_keys, loose.updates, loose.added.to_pylist()) == (
        out.log_keys,
        out.updates,
        out.added.to_pylist(),
    )
    assert sorted(loose.records.to_pylist(), key=str) == sorted(out.records.to_pylist(), key=str)
    stays = [k for k in written if k in base_keys and out.records.slice(written.index(k), 1)["v"][0].as_py() == f"{k}0"]
    assert loose.records[KEY].to_pylist()[: len(stays)] == stays


@pytest.mark.parametrize("ordering_type", [pa.int8(), pa.uint32(), pa.int64(), pa.uint64(), pa.float64(),
                                           pa.timestamp("us"), pa.date32(), pa.string()])
@pytest.mark.parametrize("seed", range(3))
def test_event_time_winners_are_the_largest_value_then_the_latest_write_for_every_ordering_type(
    ordering_type: pa.DataType, seed: int
) -> None:
    """The winner per key is its event with the largest ordering value, the latest of equals,
    whichever way the merge ranks them (integral types in one linear pass, others by sorting)."""
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(30)]
    schema = pa.schema([(KEY, pa.string()), ("ts", ordering_type), ("v", pa.string())])
    number = pa.int32() if pa.types.is_date32(ordering_type) else pa.int64()
    value = (lambda x: f"{x:02d}") if pa.types.is_string(ordering_type) else (lambda x: pa.scalar(x, number))
    table = lambda rows: pa.Table.from_pylist(  # noqa: E731
        [{KEY: k, "ts": pa.scalar(value(t)).cast(ordering_type).as_py(), "v": v} for k, t, v in rows], schema=schema)
    base_rows = [(k, rng.randint(0, 4), f"{k}-base") for k in keys[:20]]
    events = {k: [(t, 0, v)] for k, t, v in base_rows}
    blocks: list[Block] = []
    for n in range(1, 5):
        rows = [(k, rng.randint(0, 4), f"{k}-{n}") for k in rng.sample(keys, 12)]
        blocks.append(DataBlock(str(n), "{}", table(rows), {}))
        for k, t, v in rows:
            events.setdefault(k, []).append((t, n, v))
    out = merge_slice(table(base_rows), blocks, KEY, "ts", EVENT, ALL)
    assert {r[KEY]: r["v"] for r in out.to_pylist()} == {k: max(e)[2] for k, e in events.items()}


# ---- random event sequences in one slice, against the `hudi` reader --------------------------------
# Event kinds: R a record, X a record with `_hoodie_is_deleted` (both in data blocks), D a delete
# block's delete with an ordering value, N one without (delete()).


def hudi_event_time(base: int | None, events: list[tuple[str, int]]) -> int | None:
    """A key's ts after its base record (None: none) and log events, as Hudi 1.x's file group
    reader merges by event time (None: deleted): the rule merge_slice implements, written as the
    fold Hudi runs (FileGroupRecordBuffer, BufferedRecordMergerFactory)."""
    state: tuple[str, int] | None = None
    for kind, ts in events:
        if kind == "N":
            state = ("N", 0)
        elif kind == "D":
            if state is None or (state[0] != "N" and ts >= state[1]):
                state = ("D", ts)
        elif state is None or state[0] == "N" or ts >= state[1]:
            state = (kind, ts)
    if state is None or (state[0] != "N" and base is not None and state[1] < base):
        return base
    return state[1] if state[0] == "R" else None


def crafted_slice(path: Path, base: dict[str, int], steps: list[tuple[str, dict[str, int]]]) -> None:
    """A version 6 merge-on-read table of one file group: `base` (key -> ts) upserted, then one
    deltacommit per step, its log file holding one block of the step's kind, written as Hudi's
    writers write them (the `_hoodie_is_deleted` rows in a data block, as a writer that does not
    turn them into deletes leaves them)."""
    from datetime import datetime, timedelta, timezone

    from upsertlake import create_table
    from upsertlake.logfile import append_blocks, data_block, delete_block, with_meta_fields
    from upsertlake.schema import arrow_to_avro, avro_schema_json

    data = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.string()), ("_hoodie_is_deleted", pa.bool_())])
    table = create_table(path, "t", record_key="id", precombine_field="ts", table_type="MERGE_ON_READ",
                         options={"hoodie.write.table.version": 6})
    rows = [{"id": k, "ts": t, "v": f"{k}-base", "_hoodie_is_deleted": False} for k, t in {**base, "zz": 0}.items()]
    table.upsert(pa.Table.from_pylist(rows, schema=data))
    table.upsert(pa.Table.from_pylist(rows[-1:], schema=data))  # a deltacommit to copy
    hoodie = path / ".hoodie"
    template = sorted(hoodie.glob("*.deltacommit"))[-1]
    commit = json.loads(template.read_text())
    (stat,) = commit["partitionToWriteStats"][""]
    base_instant, file_id = stat["prevCommit"], stat["fileId"]
    schema_json = avro_schema_json(with_meta_fields(arrow_to_avro(data, "t")))
    start = datetime.strptime(template.name[:14], "%Y%m%d%H%M%S").replace(tzinfo=timezone.utc)
    for n, (kind, keyed) in enumerate(steps, start=2):
        instant = (start + timedelta(seconds=n)).strftime("%Y%m%d%H%M%S") + "000"
        if kind in "RX":
            records = pa.Table.from_pylist([
                {"_hoodie_commit_time": instant, "_hoodie_commit_seqno": f"{instant}_0_{i}", "_hoodie_record_key": k,
                 "_hoodie_partition_path": "", "_hoodie_file_name": file_id, "id": k, "ts": t, "v": f"{k}-{n}",
                 "_hoodie_is_deleted": kind == "X"} for i, (k, t) in enumerate(keyed.items())])
            block = data_block(instant, records, schema_json)
        else:
            block = delete_block(instant, pa.table({
                "record_key": list(keyed), "partition_path": [""] * len(keyed),
                "ordering_value": pa.array(list(keyed.values()), pa.int64()),
                "natural_order": [kind == "N"] * len(keyed)}), schema_json)
        name = f".{file_id}_{base_instant}.log.{n}_1-0-1"
        (path / name).write_bytes(append_blocks([block]))
        stat.update(path=name, logFiles=[name], logVersion=n)
        for suffix in (".deltacommit.requested", ".deltacommit.inflight"):
            (hoodie / f"{instant}{suffix}").write_bytes(b"")
        (hoodie / f"{instant}.deltacommit").write_text(json.dumps(commit))


SLICE_SEEDS = int(os.environ.get("UPSERTLAKE_SLICE_SEEDS", "24"))  # more by hand: the env var


@pytest.mark.parametrize("seed", range(SLICE_SEEDS))
def test_random_event_sequences_in_a_slice_merge_as_the_hudi_reader_merges_them(tmp_path: Path, seed: int) -> None:
    """Random sequences of records, `_hoodie_is_deleted` records, deletes with and without an
    ordering value over a slice's keys (some in its base file, some not): our snapshot, the
    `hudi` reader's and Hudi 1.x's fold (`hudi_event_time`) agree key by key."""
    from upsertlake import open_table

    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(10)]
    base = {k: rng.randint(1, 5) for k in keys[:6]}
    events: dict[str, list[tuple[str, int]]] = {k: [] for k in keys}
    steps = []
    for _ in range(rng.randint(2, 6)):
        kind = rng.choice("RRXDN")
        keyed = {k: rng.randint(1, 6) for k in rng.sample(keys, 5)}
        steps.append((kind, keyed))
        for k, t in keyed.items():
            events[k].append((kind, t))
    path = tmp_path / "t"
    crafted_slice(path, base, steps)
    expected = {k: t for k in keys if (t := hudi_event_time(base.get(k), events[k])) is not None}
    theirs = hudi_read(path)
    ours = open_table(path).read()
    assert {k: t for k, t in zip(theirs["id"].to_pylist(), theirs["ts"].to_pylist()) if k != "zz"} == expected, steps
    assert {k: t for k, t in zip(ours["id"].to_pylist(), ours["ts"].to_pylist()) if k != "zz"} == expected, steps


# ---- several ordering fields (Hudi 1.1's hoodie.table.ordering.fields) -----------------------------

TUPLE = pa.schema([(KEY, pa.string()), ("ts", pa.int64()), ("seq", pa.int32()), ("v", pa.string())])
TUPLE_BASE = pa.Table.from_pylist(
    [{KEY: "a", "ts": 5, "seq": 5, "v": "a0"}, {KEY: "b", "ts": 5, "seq": 5, "v": "b0"},
     {KEY: "c", "ts": 5, "seq": 5, "v": "c0"}], schema=TUPLE,
)


def tuple_deletes(instant: str, keys: list[str], values: list[tuple | None]) -> DeleteBlock:
    """Deletes with several fields' ordering values (a struct, as the delete block reads Hudi
    1.1's ArrayWrapper); None: a natural delete."""
    ordering = pa.StructArray.from_arrays(
        [pa.array([v and v[0] for v in values], pa.int64()), pa.array([v and v[1] for v in values], pa.int32())],
        names=["0", "1"], mask=pa.array([v is None for v in values]),
    )
    table = pa.table({"record_key": keys, "partition_path": [""] * len(keys), "ordering_value": ordering,
                      "natural_order": [v is None for v in values]})
    return DeleteBlock(instant, table, {})


def by_tuple(blocks: list[Block], base: pa.Table | None = TUPLE_BASE, mode: MergeMode = EVENT) -> list[tuple]:
    return [tuple(r.values()) for r in merge_slice(base, blocks, KEY, ("ts", "seq"), mode, ALL).to_pylist()]


def test_several_ordering_fields_a_tie_on_the_first_is_decided_by_the_second() -> None:
    blocks = [records("1", [("a", 5, 6, "a1"), ("b", 5, 4, "b1"), ("c", 4, 9, "c1"), ("d", 1, 1, "d1")], TUPLE)]
    # a: same ts, larger seq wins; b: smaller seq is a late record, dropped; c: smaller ts loses
    # whatever its seq; d: new
    assert by_tuple(blocks) == [("a", 5, 6, "a1"), ("b", 5, 5, "b0"), ("c", 5, 5, "c0"), ("d", 1, 1, "d1")]
    # log against log: an equal tuple goes to the later write, a smaller one loses
    blocks += [records("2", [("a", 5, 6, "a2"), ("d", 1, 0, "d2"), ("d", 0, 7, "d3")], TUPLE)]
    assert by_tuple(blocks) == [("a", 5, 6, "a2"), ("b", 5, 5, "b0"), ("c", 5, 5, "c0"), ("d", 1, 1, "d1")]
    # commit time ignores the fields: the latest write wins
    assert by_tuple(blocks, mode=COMMIT) == [("a", 5, 6, "a2"), ("b", 5, 4, "b1"), ("c", 4, 9, "c1"),
                                             ("d", 0, 7, "d3")]
    # the same decisions as a single field that orders as the tuple does (ts * 100 + seq)
    single = [records(b.instant, [(r[KEY], r["ts"] * 100 + r["seq"], r["v"]) for r in b.records.to_pylist()])
              for b in blocks if isinstance(b, DataBlock)]
    flat = pa.Table.from_pylist([{KEY: k, "ts": 505, "v": f"{k}0"} for k in "abc"], schema=SCHEMA)
    assert [(k, v) for k, _, v in
            (tuple(r.values()) for r in merge_slice(flat, single, KEY, "ts", EVENT, ALL).to_pylist())] == \
        [(r[0], r[3]) for r in by_tuple(blocks)]


def test_several_ordering_fields_deletes_compete_by_their_tuple() -> None:
    blocks = [tuple_deletes("1", ["a", "b", "c"], [(5, 6), (5, 4), None])]
    # a: a larger tuple deletes; b: a smaller one (a tie on ts, smaller seq) is late, the base
    # row stays; c: a natural delete (delete()) wins whatever
    assert by_tuple(blocks) == [("b", 5, 5, "b0")]
    # a record after a delete competes with it by the tuple: equal wins (the later write); after
    # a natural delete it competes with the base row (as with one field: the module's doc)
    blocks += [records("2", [("a", 5, 6, "a2"), ("b", 5, 5, "b2"), ("c", 0, 0, "c2")], TUPLE)]
    assert by_tuple(blocks) == [("a", 5, 6, "a2"), ("b", 5, 5, "b2"), ("c", 5, 5, "c0")]
    # a `_hoodie_is_deleted` record is a delete that merges as a record, by its tuple
    flagged = TUPLE.append(pa.field("_hoodie_is_deleted", pa.bool_()))
    blocks += [records("3", [("a", 5, 5, "x", True), ("b", 5, 6, "x", True)], flagged)]
    assert by_tuple(blocks) == [("a", 5, 6, "a2"), ("c", 5, 5, "c0")]


def test_several_ordering_fields_a_null_sorts_before_any_value_of_its_field() -> None:
    """Hudi 1.1.1 compares ArrayComparable's values as they are (a null one fails the merge); here a
    null orders before any value of its field, as a null single ordering value loses to any."""
    blocks = [records("1", [("a", 5, None, "a1"), ("b", None, 9, "b1"), ("d", None, None, "d1")], TUPLE),
              records("2", [("d", None, 0, "d2")], TUPLE)]
    assert by_tuple(blocks) == [("a", 5, 5, "a0"), ("b", 5, 5, "b0"), ("c", 5, 5, "c0"), ("d", None, 0, "d2")]
    blocks += [records("3", [("d", None, None, "d3")], TUPLE)]
    assert by_tuple(blocks)[-1] == ("d", None, 0, "d2")


def test_several_ordering_fields_deletes_of_other_types_win_as_in_hudi() -> None:
    """A delete whose values are not of the fields' types (Hudi: not isSameClass) wins."""
    strings = pa.StructArray.from_arrays([pa.array(["1"]), pa.array(["1"])], names=["0", "1"])
    table = pa.table({"record_key": ["a"], "partition_path": [""], "ordering_value": strings,
                      "natural_order": [False]})
    assert [r[0] for r in by_tuple([DeleteBlock("1", table, {})])] == ["b", "c"]

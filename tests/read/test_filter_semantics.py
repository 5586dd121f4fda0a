"""What a tuple filter means, pinned against a model of the documentation's words, and `count()` equal to
the rows the same scan returns for every filter.

The semantics (docs/concepts/reading.md, "Filters"): comparisons are Arrow's, IEEE 754 for floats (NaN equals
nothing, itself included, and passes `!=`; -0.0 equals 0.0); `in` holds where some `=` holds (a
NaN or None in the list matches nothing, 0.0 matches -0.0); `not in` where none does; nulls
satisfy no predicate, `!=` and `not in` included, as in SQL. Files, row groups and partitions
are skipped, and counts taken from statistics, only where that gives the same answer."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import upsertlake
from upsertlake.errors import FilterError

POOLS: dict[str, list[Any]] = {
    "i": [None, -1, 0, 1, 2, 7],
    "f": [None, 0.0, -0.0, math.nan, 1.0, -1.5, 2.5],
    "s": [None, "", "a", "b", "ab"],
    "p": [None, "x", "y"],  # the partition column: None goes to __HIVE_DEFAULT_PARTITION__
}
TYPES = {"i": pa.int64(), "f": pa.float64(), "s": pa.string(), "p": pa.string()}
OPS = ["=", "!=", "<", "<=", ">", ">=", "in", "not in"]


def holds(row_value: Any, op: str, value: Any) -> bool:
    """The documented semantics, on one row's value."""
    if row_value is None:
        return False  # nulls satisfy no predicate
    if op in ("in", "not in"):
        found = any(x is not None and row_value == x for x in value)
        return found if op == "in" else not found
    if value is None:
        return False
    return {"=": row_value == value, "!=": row_value != value, "<": row_value < value, "<=": row_value <= value,
            ">": row_value > value, ">=": row_value >= value}[op]  # fmt: skip


rows = st.fixed_dictionaries({c: st.sampled_from(pool) for c, pool in POOLS.items()})
chunks = st.lists(rows, min_size=0, max_size=6)


@st.composite
def predicates(draw: st.DrawFn) -> tuple[str, str, Any]:
    column = draw(st.sampled_from(sorted(POOLS)))
    op = draw(st.sampled_from(OPS))
    pool = POOLS[column] if op in ("=", "!=", "in", "not in") else [v for v in POOLS[column] if v is not None]
    if op in ("in", "not in"):
        return column, op, draw(st.lists(st.sampled_from(pool), max_size=3))
    return column, op, draw(st.sampled_from(pool))


def table_of(tmp_path: Path, n: int, table_type: str, parts: tuple[list[dict], ...]) -> upsertlake.Table:
    t = upsertlake.create_table(tmp_path / f"t{n}", "t", record_key="id", precombine_field="ts", partition_fields="p",
                                table_type=table_type)
    key = 0
    for number, part in enumerate(parts):
        if not part:
            continue
        ids = [f"k{key + i}" for i in range(len(part))] if number < 2 else [f"k{i}" for i in range(len(part))]
        key += len(part)
        batch = pa.table({"id": ids, "ts": [number] * len(part), **{c: pa.array([r[c] for r in part], TYPES[c])
                                                                       for c in POOLS}})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the default partition's warning
            # Two inserts make files of their own; the last batch updates keys of the first (a
            # merge-on-read table gets log files) and inserts others.
            (t.bulk_insert if number < 2 else t.upsert)(batch)
    return t


EXAMPLES = iter(range(10**6))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(table_type=st.sampled_from(["COPY_ON_WRITE", "MERGE_ON_READ"]),
       parts=st.tuples(st.lists(rows, min_size=1, max_size=6), chunks, chunks),
       filters=st.lists(st.lists(predicates(), min_size=1, max_size=2), min_size=6, max_size=6))
def test_filters_return_what_the_readme_says_and_count_agrees(tmp_path: Path, table_type: str, parts: tuple,
                                                              filters: list) -> None:
    t = table_of(tmp_path, next(EXAMPLES), table_type, parts)
    everything = t.read(columns=["id", *POOLS]).to_pylist()
    for conjunction in filters:
        expected = sorted(r["id"] for r in everything if all(holds(r[c], op, v) for c, op, v in conjunction))
        scan = t.scan(columns=["id"], filters=conjunction)
        assert sorted(scan.to_arrow().column("id").to_pylist()) == expected, conjunction
        assert sum(b.num_rows for b in scan.to_batches()) == len(expected), conjunction
        assert scan.count() == len(expected), conjunction


def test_zero_and_minus_zero_are_one_value_for_in_as_for_equals(tmp_path: Path) -> None:
    """The issue's case: `in [0.0]` counted 2 (statistics: every value is 0) and returned 1."""
    t = upsertlake.create_table(tmp_path / "t", "t", record_key="id", precombine_field="ts")
    t.upsert(pa.table({"id": ["a", "b"], "ts": [1, 1], "f": [0.0, -0.0]}))
    for filters in ([("f", "in", [0.0])], [("f", "in", [-0.0])], [("f", "=", 0.0)], [("f", "in", [0])]):
        scan = t.scan(filters=filters)
        assert (scan.count(), scan.to_arrow().num_rows) == (2, 2), filters
    assert t.scan(filters=[("f", "not in", [0.0])]).count() == 0


def test_nulls_pass_neither_not_in_nor_not_equal(tmp_path: Path) -> None:
    t = upsertlake.create_table(tmp_path / "t", "t", record_key="id", precombine_field="ts")
    t.upsert(pa.table({"id": ["a", "b", "c"], "ts": [1, 1, 1], "s": ["x", None, "y"], "f": [1.0, None, math.nan]}))
    for filters, expected in (([("s", "not in", ["x"])], ["c"]), ([("s", "!=", "x")], ["c"]),
                              ([("f", "!=", 1.0)], ["c"]), ([("f", "not in", [1.0, math.nan])], ["c"]),
                              ([("f", "in", [math.nan])], []), ([("f", "=", math.nan)], [])):
        assert sorted(t.read(filters=filters).column("id").to_pylist()) == expected, filters
        assert t.scan(filters=filters).count() == len(expected), filters


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        (
            [("id", "in", "ab")],
            r"'in' takes a list of values, got the str 'ab' in \('id', 'in', 'ab'\): write \('id', 'in', \['ab'\]\)",
        ),
        ([("id", "not in", 5)], r"'not in' takes a list of values, got the int 5"),
        (
            [("id", "=", ["a", "b"])],
            r"'=' compares with one value, got the list \['a', 'b'\] .*: for a list of values use in",
        ),
        ([("id", "<", ("a",))], r"'<' compares with one value, got the tuple"),
        ([("id", "~", "a")], r"unknown filter operator '~' in \('id', '~', 'a'\)"),
        ([("id", "=")], r"a filter must be \(column, op, value\) tuples or an Expression, got \('id', '='\)"),
        ("id = 'a'", r"filters are a list of \(column, op, value\) tuples or a pyarrow Expression, got \"id = 'a'\""),
        ([("ts", ">", "a")], r"filter \('ts', '>', 'a'\) on a int64 column: its value cannot be compared"),
    ],
)  # fmt: skip
def test_malformed_filters_are_refused_naming_what_was_passed(tmp_path: Path, filters: Any, message: str) -> None:
    t = upsertlake.create_table(tmp_path / "t", "t", record_key="id", precombine_field="ts")
    t.upsert(pa.table({"id": ["a", "b"], "ts": [1, 1]}))
    with pytest.raises(FilterError, match=message):
        t.scan(filters=filters)


def test_a_string_for_columns_is_one_column(tmp_path: Path) -> None:
    t = upsertlake.create_table(tmp_path / "t", "t", record_key="id", precombine_field="ts")
    t.upsert(pa.table({"id": ["a"], "ts": [1]}))
    assert t.read(columns="id").to_pylist() == [{"id": "a"}]

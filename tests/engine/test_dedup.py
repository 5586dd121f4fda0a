"""Precombine dedup: largest ordering value wins, ties go to the later record."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from upsertlake.engine.dedup import dedup_indices


def test_largest_wins_ties_go_later_null_loses() -> None:
    keys = pa.array(["a", "b", "a", "a", "b", "c", "c"])
    ts = pa.array([5, 1, 7, 7, None, None, None])
    # a: rows 2 and 3 tie at 7 -> the later (3); b: 1 beats null -> 1; c: all null -> the later (6)
    assert dedup_indices([keys], ts).to_pylist() == [1, 3, 6]


def test_by_key_and_partition() -> None:
    keys = pa.array(["a", "a", "a"])
    parts = pa.array(["p1", "p2", "p1"])
    assert dedup_indices([keys, parts], pa.array([1, 1, 0])).to_pylist() == [0, 1]
    assert dedup_indices([keys], pa.array([1, 1, 0])).to_pylist() == [1]


def test_without_ordering_the_last_wins() -> None:
    assert dedup_indices([pa.array(["x", "y", "x"])], None).to_pylist() == [1, 2]


@given(st.lists(st.tuples(st.sampled_from("abcde"), st.one_of(st.none(), st.integers(0, 3))), max_size=60))
def test_matches_reference(rows: list[tuple[str, int | None]]) -> None:
    winners: dict[str, int] = {}
    for i, (k, ts) in enumerate(rows):
        j = winners.get(k)
        if j is None:
            winners[k] = i
            continue
        old = rows[j][1]
        rank_new = -1 if ts is None else ts
        rank_old = -1 if old is None else old
        if rank_new >= rank_old:
            winners[k] = i
    keys = pa.array([k for k, _ in rows], pa.string())
    ts = pa.array([t for _, t in rows], pa.int64())
    assert dedup_indices([keys], ts).to_pylist() == sorted(winners.values())


@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.sampled_from("abc")),
            st.sampled_from(["p", "q"]),
            st.one_of(st.none(), st.integers(0, 3)),
        ),
        max_size=60,
    )
)
def test_matches_reference_by_key_and_partition_with_null_keys(rows: list[tuple[str | None, str, int | None]]) -> None:
    """Two key columns, null keys (two nulls are the same key), chunked input."""
    winners: dict[tuple[str | None, str], int] = {}
    for i, (k, p, ts) in enumerate(rows):
        j = winners.get((k, p))
        if j is None or (-1 if ts is None else ts) >= (-1 if rows[j][2] is None else rows[j][2]):
            winners[(k, p)] = i
    half = len(rows) // 2
    keys = pa.chunked_array(
        [pa.array([r[0] for r in rows[:half]], pa.string()), pa.array([r[0] for r in rows[half:]], pa.string())]
    )
    parts = pa.array([r[1] for r in rows], pa.string())
    ts = pa.array([r[2] for r in rows], pa.int64())
    assert dedup_indices([keys, parts], ts).to_pylist() == sorted(winners.values())


def test_a_batch_without_duplicates_keeps_every_row() -> None:
    assert dedup_indices([pa.array(["c", "a", "b"])], pa.array([3, 1, 2])).to_pylist() == [0, 1, 2]
    assert dedup_indices([pa.array([], pa.string())], None).to_pylist() == []

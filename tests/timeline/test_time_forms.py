"""Every place a time is taken reads the same forms the same way: time travel's `as_of`,
incremental `begin`/`end`, the command line's `--as-of/--since/--until`, filters on date and
timestamp columns. An instant time, a datetime or date (naive = local time), a pandas Timestamp,
an ISO-8601 string with or without its zone (`Z` too). A zone that cannot be reconciled is refused
by name when the scan is planned, before any row is read; a time before the table's first instant
is an error naming that instant, not an empty read.

The process runs in a zone far from UTC (Asia/Kolkata, +05:30) so that naive = local is told from
naive = UTC."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import upsertlake
from upsertlake.errors import FilterError, InstantTimeError
from upsertlake.timeline.instant_time import parse_instant_time

KOLKATA = timezone(timedelta(hours=5, minutes=30))


@pytest.fixture(autouse=True)
def kolkata(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "upsertlake.cli", *map(str, args)], capture_output=True, text=True)


@pytest.fixture
def two_commits(tmp_path: Path) -> tuple[upsertlake.Table, str, str]:
    """A table whose second commit is in a later second than its first (so a time to the second
    lands between them)."""
    t = upsertlake.create_table(tmp_path / "t", "t", record_key="id", precombine_field="n")
    first = t.upsert(pa.table({"id": ["a"], "n": [1], "v": ["one"]})).instant_time
    time.sleep(max(0.0, 1.05 - (time.time() % 1)))  # into the next second
    second = t.upsert(pa.table({"id": ["a"], "n": [2], "v": ["two"]})).instant_time
    assert second[:14] > first[:14]
    return t, first, second


def test_as_of_takes_every_form_of_the_same_moment(two_commits: tuple[upsertlake.Table, str, str]) -> None:
    t, first, _ = two_commits
    utc = parse_instant_time(first)  # our tables keep instant times in UTC
    local = utc.astimezone(KOLKATA)
    naive_local = local.replace(tzinfo=None)
    second_of = naive_local.replace(microsecond=0)
    forms = [
        first, first[:14],  # instant times, the table's zone; 14 digits name the whole second
        utc, local, naive_local,  # aware in any zone, naive = local
        pd.Timestamp(naive_local), pd.Timestamp(utc), np.datetime64(naive_local),
        second_of.isoformat(sep=" "), second_of.isoformat(),  # ISO without zone: local, the whole second
        utc.replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ"),  # ISO with Z
        local.isoformat(timespec="milliseconds"),  # ISO with its offset, to the millisecond
    ]
    for when in forms:
        assert t.read(columns=["v"], as_of=when).column("v").to_pylist() == ["one"], when
        assert t.read_incremental(begin=when).column("v").to_pylist() == ["two"], when
        assert t.scan(begin=first, end=when).count() == 0, when  # (first, first]: nothing


def test_the_command_line_takes_the_same_forms(two_commits: tuple[upsertlake.Table, str, str]) -> None:
    t, first, _ = two_commits
    local = parse_instant_time(first).astimezone(KOLKATA).replace(microsecond=0, tzinfo=None)
    utc = parse_instant_time(first).replace(microsecond=0)
    for when in (first, local.isoformat(sep=" "), utc.strftime("%Y-%m-%dT%H:%M:%SZ")):
        p = cli("read", t.storage.base, "--as-of", when, "--columns", "v", "--json")
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout) == [{"v": "one"}], when
        p = cli("read", t.storage.base, "--since", when, "--columns", "v", "--json")
        assert json.loads(p.stdout) == [{"v": "two"}], when


def test_a_time_before_the_first_instant_names_it(two_commits: tuple[upsertlake.Table, str, str]) -> None:
    t, first, _ = two_commits
    for when in ("20200101000000", date(2020, 1, 1), "2020-01-01T00:00:00Z"):
        with pytest.raises(InstantTimeError, match=f"before the table's first instant, {first}"):
            t.scan(as_of=when)
    p = cli("read", t.storage.base, "--as-of", "2020-01-01")
    assert p.returncode == 2 and f"before the table's first instant, {first}" in p.stderr


def test_what_is_no_time_is_refused_by_name(two_commits: tuple[upsertlake.Table, str, str]) -> None:
    t, _, _ = two_commits
    for when in ("yesterday", "2026-13-01", 12.5):
        with pytest.raises(InstantTimeError, match=r"is not a time: give an instant time \(yyyyMMddHHmmss\[SSS\]\), "
                                                   r"a datetime or date"):
            t.scan(as_of=when)
    p = cli("read", t.storage.base, "--as-of", "yesterday")
    assert p.returncode == 2 and p.stderr.startswith("error: InstantTimeError: 'yesterday' is not a time")


# -- filters on time columns ------------------------------------------------------------------
def events(tmp_path: Path) -> upsertlake.Table:
    """Rows a, b, c at 1 May, 1 June 06:00, 1 July 2024, in three time columns: a timestamp
    without zone (wall-clock times), one in UTC, and a date."""
    t = upsertlake.create_table(tmp_path / "e", "e", record_key="id", precombine_field="n")
    walls = [datetime(2024, 5, 1), datetime(2024, 6, 1, 6), datetime(2024, 7, 1)]
    t.upsert(pa.table({
        "id": ["a", "b", "c"], "n": [1, 1, 1],
        "wall": pa.array(walls, pa.timestamp("us")),
        "utc": pa.array([w.replace(tzinfo=timezone.utc) for w in walls], pa.timestamp("us", tz="UTC")),
        "day": pa.array([w.date() for w in walls], pa.date32()),
    }))  # fmt: skip
    return t


def ids(t: upsertlake.Table, filters: list) -> list[str]:
    return sorted(t.read(columns=["id"], filters=filters).column("id").to_pylist())


def test_a_timestamp_column_without_zone_compares_wall_clock_times(tmp_path: Path) -> None:
    t = events(tmp_path)
    june = datetime(2024, 6, 1, 6)
    for when in ("2024-06-01 06:00", "2024-06-01T06:00:00", june, pd.Timestamp(june), np.datetime64(june)):
        assert ids(t, [("wall", ">=", when)]) == ["b", "c"], when
        assert ids(t, [("wall", "in", [when])]) == ["b"], when
    assert ids(t, [("wall", ">=", date(2024, 6, 2))]) == ["c"]
    assert ids(t, [("wall", ">=", "2024-06-01")]) == ["b", "c"]
    # A time with a zone: the column's zone is unknown, so it is refused by name when planned.
    for when in ("2024-06-01T06:00:00Z", june.replace(tzinfo=timezone.utc), pd.Timestamp("2024-06-01 06:00", tz="UTC")):
        no_zone = r"on a timestamp\[us\] column: the column's timestamps have no zone and .* is in UTC"
        with pytest.raises(FilterError, match=no_zone):
            t.scan(filters=[("wall", ">=", when)])
    with pytest.raises(FilterError, match="'soon' is not a time"):
        t.scan(filters=[("wall", "<", "soon")])


def test_a_timestamp_column_with_a_zone_converts_every_time_to_it(tmp_path: Path) -> None:
    t = events(tmp_path)
    utc = datetime(2024, 6, 1, 6, tzinfo=timezone.utc)
    naive_local = utc.astimezone(KOLKATA).replace(tzinfo=None)  # naive = local (Kolkata here)
    forms = [
        utc,
        utc.astimezone(KOLKATA),
        naive_local,
        pd.Timestamp(utc),
        "2024-06-01T06:00:00Z",
        "2024-06-01T11:30:00+05:30",
        naive_local.isoformat(),
    ]
    for when in forms:
        assert ids(t, [("utc", ">=", when)]) == ["b", "c"], when
        assert ids(t, [("utc", "=", when)]) == ["b"], when
        assert ids(t, [("utc", "not in", [when])]) == ["a", "c"], when


def test_a_date_column_takes_dates(tmp_path: Path) -> None:
    t = events(tmp_path)
    for when in ("2024-06-01", date(2024, 6, 1), datetime(2024, 6, 1), pd.Timestamp("2024-06-01")):
        assert ids(t, [("day", "=", when)]) == ["b"], when
        assert ids(t, [("day", ">", when)]) == ["c"], when
    with pytest.raises(
        FilterError, match=r"on a date32\[day\] column: datetime.datetime\(2024, 6, 1, 6, 0\) is not a date"
    ):
        t.scan(filters=[("day", "=", datetime(2024, 6, 1, 6))])


def test_the_command_line_where_reads_times_as_the_library_does(tmp_path: Path) -> None:
    t = events(tmp_path)
    for where, expected in (
        ("wall >= '2024-06-01'", ["b", "c"]),
        ("utc >= '2024-06-01T11:30:00+05:30'", ["b", "c"]),
        ("day in ('2024-06-01', '2024-07-01')", ["b", "c"]),
    ):
        p = cli("read", t.storage.base, "--where", where, "--columns", "id", "--json")
        assert p.returncode == 0, p.stderr
        assert sorted(r["id"] for r in json.loads(p.stdout)) == expected == ids(t, [_tuple(where)]), where
    p = cli("read", t.storage.base, "--where", "wall >= '2024-06-01T00:00:00Z'")
    assert p.returncode == 2 and "the column's timestamps have no zone" in p.stderr


def _tuple(where: str) -> tuple:
    from upsertlake.cli.read import parse_where

    [predicate] = parse_where(
        where, pa.schema([("wall", pa.timestamp("us")), ("utc", pa.timestamp("us", "UTC")), ("day", pa.date32())])
    )
    return predicate


def test_an_expression_filter_with_a_zone_the_column_lacks_is_refused_when_planned(tmp_path: Path) -> None:
    import pyarrow.compute as pc

    t = events(tmp_path)
    with pytest.raises(FilterError, match="Cannot compare timestamp with timezone to timestamp without timezone"):
        t.scan(filters=pc.field("wall") >= datetime(2024, 6, 1, tzinfo=timezone.utc))

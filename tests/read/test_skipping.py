"""Data skipping: files ruled out by the column statistics their commit recorded (or, for files
other writers wrote, by their footers) are never opened; row groups inside a file are skipped by
parquet's statistics; a merge-on-read slice is skipped only when its base file and every log file
are ruled out. Proved by destroying what must not be read: the rows still come out exact."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import urllib.request
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from upsertlake import create_table, open_table
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.column_stats import STATS_KEY

from helpers import (
    CLUSTERED_ROWS,
    clustered,
    destroy_all_but,
    file_of,
    hudi_read,
    unzip_hudi_table,
    unzip_mor_table,
)

N = CLUSTERED_ROWS


def days(day: dt.date) -> int:
    return (day - dt.date(1970, 1, 1)).days


def test_a_commit_records_each_files_column_statistics(tmp_path: Path) -> None:
    table = create_table(tmp_path / "t", "t", "id", "ts", "p")
    table.upsert(pa.table({
        "id": ["a", "b", "c"], "ts": [1, 1, 1], "p": ["x", "x", "y"], "v": [2.5, None, float("nan")],
        "day": [dt.date(2024, 1, 2), dt.date(2023, 5, 6), None],
        "at": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)] * 3, pa.timestamp("us", tz="UTC")),
        "price": pa.array([Decimal("1.25"), Decimal("-3.50"), Decimal("0.00")], pa.decimal128(10, 2)),
        "long_text": ["z" * 70, "a" * 80, "m"],
    }))
    timeline = Timeline.load(table.storage)
    (commit,) = timeline.completed_writes()
    meta = timeline.commit_metadata(commit)
    doc = json.loads(meta.extra_metadata[STATS_KEY])
    assert doc["format"] == 1
    by_partition = {path.split("/")[0]: entry for path, entry in doc["files"].items()}
    assert set(doc["files"]) == {s.path for s in meta.write_stats()}
    x, y = by_partition["x"], by_partition["y"]
    assert x == [2, {
        "id": ["string", "a", "b", 0, False], "ts": ["int64", 1, 1, 0, False], "p": ["string", "x", "x", 0, False],
        "v": ["double", 2.5, 2.5, 1, False],
        "day": ["date32[day]", days(dt.date(2023, 5, 6)), days(dt.date(2024, 1, 2)), 0, False],
        "at": ["timestamp[us, tz=UTC]", 1704067200000000, 1704067200000000, 0, False],
        "price": ["decimal128(10, 2)", "-3.50", "1.25", 0, False],
        "long_text": ["string", "a" * 64, None, 0, False],  # a prefix as minimum, no maximum
    }]
    assert y[1]["v"] == ["double", None, None, 0, True]  # NaN is no range, and NaN is there
    assert y[1]["day"] == ["date32[day]", None, None, 1, False]
    # Hudi's reader reads the commit (and ignores the entry): the same rows.
    assert sorted(hudi_read(table.path)["id"].to_pylist()) == ["a", "b", "c"]


def test_filters_on_any_column_skip_the_files_their_statistics_rule_out(tmp_path: Path) -> None:
    table = clustered(tmp_path)
    wanted = {file_of(table, 35), file_of(table, 41)}
    assert len(wanted) == 2
    cases = [
        ([("v", ">=", 35), ("v", "<", 42)], list(range(35, 42))),
        ((pc.field("v") >= 35) & (pc.field("v") < 42), list(range(35, 42))),
        ([("v", "in", [36, 37, 41]), ("p", "=", "a")], [36, 37, 41]),
        ([("id", ">=", "key-0035"), ("id", "<=", "key-0041")], list(range(35, 42))),
        (pc.field("id").isin(["key-0021", "key-0059"]), [21, 59]),
        ([("note", "in", ["n0024", "n0044"])], [24, 44]),
    ]
    for filters, _ in cases:
        assert {bf.path for bf in table.scan(filters=filters).plan.files} == wanted, filters
    # Filters no statistics can decide keep every file.
    for filters in ([("v", "!=", 45)], [("v", "not in", [1, 2])], [("v", ">", None)], pc.field("note").is_null()):
        assert len(table.scan(filters=filters).plan.files) == 10, filters
    destroy_all_but(table, wanted)
    for filters, values in cases:
        assert sorted(table.read(filters=filters)["v"].to_pylist()) == values, filters
        assert table.scan(filters=filters).count() == len(values)
    with pytest.raises(Exception):  # noqa: B017 - the destroyed files are there to be read
        table.read()


def test_nulls_and_nan_never_make_a_file_skipped_wrongly(tmp_path: Path) -> None:
    """A file of nulls holds no value (`=` skips it) but `not in` lets nulls through (Arrow's
    semantics); NaN is in no range, and `!=` lets it through: those files are kept."""
    table = create_table(tmp_path / "t", "t", "id", "ts", "p")
    table.upsert(pa.table({"id": ["a", "b"], "ts": [1, 1], "p": ["nulls", "nulls"],
                           "v": pa.array([None, None], pa.int64()), "f": pa.array([None, None], pa.float64())}))
    table.upsert(pa.table({"id": ["c", "d", "e"], "ts": [1, 1, 1], "p": ["vals"] * 3, "v": [1, 2, None],
                           "f": [1.0, float("nan"), 1.0]}))
    everything = table.read()

    def expected(expression: pc.Expression) -> list[str]:
        return sorted(everything.filter(expression)["id"].to_pylist())

    for filters in ([("v", "=", 2)], [("v", "not in", [1])], [("v", "!=", 1)], [("f", "!=", 1.0)], [("f", "in", [2.0])],
                    [("f", "<", 5.0)], [("f", ">=", 1.0)], [("v", "!=", 7)], [("v", "not in", [7, 8])],
                    pc.field("v").is_null(), pc.field("f") != 1.0, pc.is_nan(pc.field("f")), ~pc.field("v").isin([1])):
        from upsertlake.read.filters import to_expression

        expression = filters if isinstance(filters, pc.Expression) else to_expression(filters)
        assert sorted(table.read(filters=filters)["id"].to_pylist()) == expected(expression), filters
        assert table.scan(filters=filters).count() == len(expected(expression)), filters
    assert {bf.partition_path for bf in table.scan(filters=[("v", "=", 2)]).plan.files} == {"vals"}
    assert {bf.partition_path for bf in table.scan(filters=[("v", "not in", [1])]).plan.files} == {"nulls", "vals"}


def test_row_groups_the_filter_rules_out_are_not_read(tmp_path: Path) -> None:
    """One file of 10 row groups: the column chunks of all but one are destroyed, its footer
    kept; a filter inside that row group reads it alone."""
    data = pa.table({"id": [f"key-{i:04d}" for i in range(N)], "ts": [1] * N, "p": ["a"] * N, "v": list(range(N))})
    table = create_table(tmp_path / "t", "t", "id", "ts", "p")
    table.bulk_insert(data)
    (bf,) = table.scan().plan.files
    path = Path(table.storage.full_path(bf.path))
    table_bytes = pq.read_table(path)
    pq.write_table(table_bytes, path.with_suffix(".tmp"), row_group_size=20)  # same rows, 10 row groups
    rewritten = path.with_suffix(".tmp").read_bytes()
    meta = pq.read_metadata(path.with_suffix(".tmp"))
    assert meta.num_row_groups == 10
    data_bytes = bytearray(rewritten)
    keep = next(g for g in range(10) if meta.row_group(g).column(meta.schema.names.index("v")).statistics.min == 100)
    for g in range(10):
        if g == keep:
            continue
        for c in range(meta.num_columns):
            chunk = meta.row_group(g).column(c)
            start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
            data_bytes[start:start + chunk.total_compressed_size] = bytes(chunk.total_compressed_size)
    path.write_bytes(bytes(data_bytes))
    path.with_suffix(".tmp").unlink()
    with pytest.raises(Exception):  # noqa: B017 - destroyed row groups
        pq.read_table(path)
    table = open_table(tmp_path / "t")  # the file changed size: its recorded statistics no longer count
    assert sorted(table.read(filters=[("v", ">=", 103), ("v", "<", 108)])["v"].to_pylist()) == list(range(103, 108))
    assert table.read(filters=pc.field("id") == "key-0119")["v"].to_pylist() == [119]
    assert table.scan(filters=[("v", ">=", 103), ("v", "<", 108)]).count() == 5


def test_a_mor_slice_is_skipped_only_when_its_base_and_every_log_are(tmp_path: Path) -> None:
    table = clustered(tmp_path, "MERGE_ON_READ")
    g0, g7 = file_of(table, 5), file_of(table, 150)
    table.upsert(pa.table({"id": ["key-0005"], "ts": [2], "p": ["a"], "v": [1000], "note": ["moved"]}))
    table.delete(pa.table({"id": ["key-0150"], "p": ["a"]}))
    scan = table.scan()
    assert sorted(sl.base.path for sl in scan.plan.slices) == sorted([g0, g7])

    def planned(filters):
        s = table.scan(filters=filters)
        return sorted(bf.path for bf in s.plan.files), sorted(sl.base.path for sl in s.plan.slices)

    assert planned([("v", ">=", 1000)]) == ([], [g0])  # the log's update brings key-0005 in
    assert planned([("v", "=", 5)]) == ([], [g0])  # the base file holds 5 (the merge moves it out)
    assert planned([("v", "=", 155)]) == ([], [g7])  # a log of deletes rules nothing in
    assert planned([("v", "=", 165)]) == ([file_of(table, 165)], [])  # g7's log rules nothing in either
    destroy_all_but(table, {g0})  # every other base file (the logs stay readable)
    assert table.read(filters=[("v", ">=", 1000)]).select(["id", "v", "note"]).to_pylist() == [
        {"id": "key-0005", "v": 1000, "note": "moved"}
    ]


def test_logs_other_writers_wrote_keep_their_slices(tmp_path: Path) -> None:
    """Hudi's log files carry no recorded statistics: a filtered read of them merges every slice
    the partitions keep, and returns what Hudi's reader returns, filtered."""
    path = unzip_mor_table("mor_v8_trips_8i3u1d", tmp_path)
    table = open_table(path)
    everything = table.scan()
    for filters in ([("fare", "<", 1.0)], [("fare", ">", 40.0)], pc.field("rider") == "rider-G"):
        scan = table.scan(filters=filters)
        assert len(scan.plan.slices) == len(everything.plan.slices) > 0
        from upsertlake.read.filters import to_expression

        expression = filters if isinstance(filters, pc.Expression) else to_expression(filters)
        theirs = sorted(hudi_read(path).filter(expression)["_hoodie_record_key"].to_pylist())
        assert sorted(scan.to_arrow()["_hoodie_record_key"].to_pylist()) == theirs


@pytest.mark.parametrize("name", ["v6_simplekeygen_nonhivestyle", "v8_complexkeygen_hivestyle",
                                  "v6_simplekeygen_hivestyle_no_metafields"])
def test_files_hudi_wrote_are_skipped_by_their_footers(tmp_path: Path, name: str) -> None:
    path = unzip_hudi_table(name, tmp_path)
    table = open_table(path)
    theirs = hudi_read(path)
    files = table.scan().plan.files
    assert len(files) == 3
    # Each file's rows (byteField partition: names, intField, ...): 10: Alice and Carol, 15000 and
    # 35000, ...; 20: Bob, 25000; 30: Diana, 45000. Ranges keep a file a value falls inside.
    cases = [
        ([("intField", "=", 15000)], {"10"}),
        ([("intField", "=", 25000)], {"10", "20"}),  # inside 10's range (15000..35000), in 20
        ([("decimalField", ">", Decimal("60000"))], {"20", "30"}),
        ([("dateField", ">=", dt.date(2023, 4, 3))], {"10", "30"}),
        ([("timestampField", "<", dt.datetime(2023, 4, 2, tzinfo=dt.timezone.utc))], {"10"}),
        ([("name", "in", ["Bob", "Zed"])], {"10", "20"}),
        (pc.field("longField") > 2_000_000_000, {"20"}),
        (pc.field("intField") > 50_000, set()),
    ]
    from upsertlake.read.filters import to_expression

    key = "_hoodie_record_key" if table.table_config.populate_meta_fields else "id"
    for filters, partitions in cases:
        scan = table.scan(filters=filters)
        assert {bf.partition_path.split("/")[0].split("=")[-1] for bf in scan.plan.files} == partitions, filters
        expression = filters if isinstance(filters, pc.Expression) else to_expression(filters)
        assert sorted(scan.to_arrow()[key].to_pylist()) == sorted(theirs.filter(expression)[key].to_pylist()), filters


def test_planning_a_filtered_scan_of_1000_files_on_s3_takes_fewer_requests_than_files(s3_server) -> None:
    """The commits' recorded statistics skip the files: no footer is read, only the one file
    that holds the rows (counted by the S3 server, in a fresh process: nothing cached)."""
    uri = f"s3://{s3_server.new_bucket()}/t"
    n = 13_000
    data = pa.table({"id": [f"k{i:05d}" for i in range(n)], "ts": [1] * n, "v": list(range(n))})
    table = create_table(uri, "t", "id", "ts", storage_options=s3_server.options)
    written = table.bulk_insert(data, {"hoodie.parquet.max.file.size": 120, "hoodie.index.bloom.num_entries": 10,
                                       "hoodie.bulkinsert.sort.mode": "GLOBAL_SORT"})
    assert len(written.files_written) >= 1000
    code = f"""
import upsertlake
table = upsertlake.open_table({uri!r}, storage_options={s3_server.options!r})
for filters in ([("v", ">=", 6000), ("v", "<", 6003)], [("id", "=", "k12345")]):
    scan = table.scan(filters=filters)
    print(len(scan.plan.files), scan.to_arrow().num_rows, scan.count())
"""
    with urllib.request.urlopen(f"{s3_server.endpoint}/__requests") as reply:
        json.loads(reply.read())  # the counts start here
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    with urllib.request.urlopen(f"{s3_server.endpoint}/__requests") as reply:
        counted = json.loads(reply.read())
    planned = [line.split() for line in out.stdout.splitlines()]
    assert [p[1:] for p in planned] == [["3", "3"], ["1", "1"]]
    assert all(int(p[0]) <= 2 for p in planned)
    # Per scan: the timeline's listing, the table's (two pages of 1,000 objects), the one file read;
    # once: the table check, hoodie.properties, the commit's document. No footer: 8 LIST, 5 GET.
    assert counted.get("LIST", 0) <= 10 and counted.get("GET", 0) <= 6 and set(counted) <= {"LIST", "GET"}, counted

"""Bulk insert fills files up to hoodie.parquet.max.file.size by what its records take on disk,
as Hudi's bulk insert rolls files over by their written size; the record size estimate (1024
bytes on a table without commits) plays no part. Upsert and insert keep Hudi's estimate."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from upsertlake import create_table
from upsertlake.engine.bulk_insert import written_record_size
from upsertlake.layout.file_writer import FileWriterConfig

from helpers import data_bytes, hudi_read, trips

ROWS = 120_000
MAX_FILE = 400_000  # about 44K of these records: a batch of 120K fills 2 files and most of a third
TOLERANCE = 0.05
ONE_ROW_GROUP = {"hoodie.parquet.block.size": 120 * 2**20}  # Hudi's: every file here one row group


def new_table(path: Path):
    return create_table(path, "t", record_key="key", precombine_field="ts", partition_fields="day")


def file_rows(path: Path) -> int:
    return pq.read_metadata(path).num_rows


@pytest.mark.parametrize("sort_mode", ["NONE", "GLOBAL_SORT"])
@pytest.mark.parametrize("row_groups", ["one", "default"])
def test_bulk_insert_fills_files_up_to_the_max_file_size(tmp_path: Path, sort_mode: str, row_groups: str) -> None:
    """At the default row-group size (4 MiB of rows in memory, about 20K of these records) each
    row group repeats its dictionary pages, so a file holds fewer records: 4 files, 3 of them full."""
    t = new_table(tmp_path / "t")
    options = {"hoodie.parquet.max.file.size": MAX_FILE, "hoodie.bulkinsert.sort.mode": sort_mode}
    r = t.bulk_insert(trips(ROWS), {**options, **(ONE_ROW_GROUP if row_groups == "one" else {})})
    files = sorted((Path(t.path) / f for f in r.files_written), key=file_rows, reverse=True)
    assert len(files) == (3 if row_groups == "one" else 4)  # the 1024-byte estimate would make 308 files of 390 records
    full, last = files[:-1], files[-1]
    assert file_rows(full[0]) == file_rows(full[1])
    assert sum(map(file_rows, files)) == ROWS
    for f in full:
        assert abs(data_bytes(f) - MAX_FILE) <= TOLERANCE * MAX_FILE, (f.name, data_bytes(f))
    assert data_bytes(last) < MAX_FILE * (1 - TOLERANCE)
    assert hudi_read(t.path).num_rows == ROWS


def test_bulk_insert_sizes_each_partition_by_the_same_measure(tmp_path: Path) -> None:
    """Two days of 120K and 30K records: 3 files and 1 file, records never mixed across days."""
    t = new_table(tmp_path / "t")
    data = pa.concat_tables([trips(ROWS, "2026-11-23"), trips(30_000, "2026-11-22", seed=8)])
    r = t.bulk_insert(data, {"hoodie.parquet.max.file.size": MAX_FILE, **ONE_ROW_GROUP})
    by_day: dict[str, list[int]] = {}
    for f in r.files_written:
        by_day.setdefault(f.split("/")[0], []).append(file_rows(Path(t.path) / f))
    assert sorted(by_day) == ["2026-11-22", "2026-11-23"]
    assert by_day["2026-11-22"] == [30_000]
    assert len(by_day["2026-11-23"]) == 3 and sum(by_day["2026-11-23"]) == ROWS


def test_upsert_on_a_table_without_commits_keeps_hudis_record_size_estimate(tmp_path: Path) -> None:
    """Hudi's UpsertPartitioner sizes a first write's insert buckets by
    hoodie.copyonwrite.record.size.estimate: 400_000 // 1024 = 390 records a bucket, so 3
    buckets for 1000 records (each record goes to one by the hash of its key), though all of
    them would fit in one file."""
    t = new_table(tmp_path / "t")
    r = t.insert(trips(1_000), {"hoodie.parquet.max.file.size": MAX_FILE})
    assert len(r.files_written) == 3
    assert sum(file_rows(Path(t.path) / f) for f in r.files_written) == 1_000


def test_written_record_size_counts_meta_columns_and_leaves_out_the_footer(tmp_path: Path) -> None:
    """The measure is the bytes of the column chunks of a file holding the sample."""
    t = new_table(tmp_path / "t")
    sample = trips(5_000)
    r = t.bulk_insert(sample, {"hoodie.bulkinsert.sort.mode": "NONE"})
    (written,) = r.files_written
    records = sample.append_column("_hoodie_record_key", sample["key"]).append_column(
        "_hoodie_partition_path", sample["day"]
    )
    measured = written_record_size(records, sample.schema, FileWriterConfig())
    assert measured.fixed == 0  # a sample smaller than SAMPLE_ROWS is measured whole
    assert measured.per_record * 5_000 == pytest.approx(data_bytes(Path(t.path) / written), rel=0.01)

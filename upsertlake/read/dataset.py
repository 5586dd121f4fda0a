"""A snapshot as a pyarrow dataset, for engines that scan parquet themselves (pyarrow, DuckDB,
Polars): exactly the snapshot's base files, on the table's own file system (object stores
included, with the table's storage options), each fragment's partition expression saying what its
statistics guarantee of every row (`upsertlake.read.skipping.guarantee`: the partition columns'
values, each recorded column's range and nulls), so those engines skip files and push filters
down themselves. A merge-on-read snapshot with log files has no such form: its rows are merged;
nor has one of Lance base files, which pyarrow does not read. Its schema is a scan's: the
one-value-per-file meta columns decoded as dictionaries."""

from __future__ import annotations

import pyarrow.dataset as ds

from upsertlake.errors import MergeOnReadError, UnsupportedTableError
from upsertlake.layout.base_files import is_lance
from upsertlake.read.reader import DICTIONARY_META, read_schema
from upsertlake.read.skipping import guarantee
from upsertlake.read.snapshot import ScanPlan
from upsertlake.read.statistics import FileStatistics
from upsertlake.storage import Storage
from upsertlake.storage.arrow_fs import arrow_file_system


def pyarrow_dataset(storage: Storage, plan: ScanPlan, statistics: FileStatistics) -> ds.FileSystemDataset:
    """The plan's base files as a dataset (MergeOnReadError when it has slices to merge)."""
    if plan.slices:
        raise MergeOnReadError(
            f"{len(plan.slices)} file group(s) of this merge-on-read snapshot have log files, whose changes a "
            "parquet dataset would miss: read it with `Table.scan()` (its Arrow stream goes to DuckDB, Polars "
            "and pyarrow alike), or ask for the read-optimized query, which leaves those changes out"
        )
    lance = [bf.path for bf in plan.files if is_lance(bf.path)]
    if lance:
        raise UnsupportedTableError(
            f"{len(lance)} base file(s) of this snapshot are Lance files, which pyarrow's datasets do not read: "
            "read it with `Table.scan()` (its Arrow stream goes to DuckDB, Polars and pyarrow alike)"
        )
    fs = arrow_file_system(storage)
    schema = read_schema(plan.schema)
    dictionary = [f.name for f in schema if f.name in DICTIONARY_META and f.type != plan.schema.field(f.name).type]
    fmt = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=dictionary))
    stats = statistics.of_bases(plan.files, plan.schema)
    fragments = [
        fmt.make_fragment(bf.path, fs, partition_expression=guarantee(stats[bf.path], plan.schema), file_size=bf.size)
        for bf in plan.files
    ]
    return ds.FileSystemDataset(fragments, schema, fmt, fs)

"""`ingest`'s input files as one Spark DataFrame.

Local files go through Spark's own readers, which split large files among tasks. Files on an
object store, which a JVM without the store's Hadoop connector cannot open, are read by Python
tasks through our storage layer (the store's settings travel with them), one task a file, with the
readers the write commands use (`cli.inputs`, so a CSV key stays text as it does there). Their
schema is learned first by the tasks too: each reports its file's schema (a parquet footer, or the
parsed text file), and the driver unifies them; nothing per record reaches the driver."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from upsertlake.cli.input_files import FileFormat, InputFile
from upsertlake.cli.inputs import InputTypes, read_file
from upsertlake.cli.output import CliError
from upsertlake.spark.session import arrow_only

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameReader, SparkSession



@arrow_only
def read_sources(spark: SparkSession, files: Sequence[InputFile], fmt: FileFormat, types: InputTypes) -> DataFrame:
    """The files (all from one source) as a DataFrame, with `types` imposed on the text formats.
    Its tasks yield Arrow batches: PySpark's pandas-3 warning, which mapInArrow raises, is not ours."""
    if all(f.storage.os_path(f.rel) for f in files):  # Spark's JVM reads them itself
        return _spark_read(spark, fmt, [f.uri for f in files], types)
    return _task_read(spark, list(files), fmt, types)


def _spark_read(spark: SparkSession, fmt: FileFormat, files: list[str], types: InputTypes) -> DataFrame:
    """Spark's reader: inferred, then read again with the types `types` imposes on the columns
    found. A malformed record (a CSV row with too few or too many fields, a broken JSON line) or a
    value that does not parse fails the run, naming the file, as the write commands do: Spark's
    default would fill nulls, drop extra fields, or add a `_corrupt_record` column."""
    from upsertlake.spark.types import arrow_schema_of, with_types

    def reader() -> DataFrameReader:  # a DataFrameReader's options stick: one per read
        read = spark.read.option("mode", "FAILFAST")
        return read.option("header", "true") if fmt is FileFormat.CSV else read

    df = (reader().option("inferSchema", "true") if fmt is FileFormat.CSV else reader()).format(fmt.value).load(files)
    if fmt is FileFormat.PARQUET:
        return df
    imposed = types.csv_types() if fmt is FileFormat.CSV else types.json_types(arrow_schema_of(df.schema))
    imposed = {k: v for k, v in imposed.items() if k in df.columns}
    if not imposed:
        return df
    return reader().schema(with_types(df.schema, imposed)).format(fmt.value).load(files)


def _task_read(spark: SparkSession, files: list[InputFile], fmt: FileFormat, types: InputTypes) -> DataFrame:
    """One Python task a file, reading it through the storage layer (two passes: schema, rows)."""
    from upsertlake.spark.types import arrow_schema_of, spark_schema_of

    tasks = spark.createDataFrame([(i,) for i in range(len(files))], "file int").repartition(len(files))
    found = tasks.mapInArrow(partial(_schema_task, files, fmt, types), "schema binary").collect()
    try:
        schema = pa.unify_schemas(
            [pa.ipc.read_schema(pa.py_buffer(r.schema)) for r in found], promote_options="permissive"
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise CliError(f"input files do not share one schema: {exc}") from exc
    spark_schema = spark_schema_of(schema)
    # Spark's Arrow form of the schema (e.g. microsecond timestamps): what the tasks must yield.
    return tasks.mapInArrow(partial(_read_task, files, fmt, types, arrow_schema_of(spark_schema)), spark_schema)


def _schema_task(
    files: list[InputFile], fmt: FileFormat, types: InputTypes, batches: Iterator[pa.RecordBatch]
) -> Iterator[Any]:
    """Task: the schema of each file named, serialized."""
    for batch in batches:
        for i in batch.column(0).to_pylist():
            f = files[i]
            schema = (
                f.storage.parquet_file(f.rel).schema_arrow
                if fmt is FileFormat.PARQUET
                else read_file(f, fmt, types).schema
            )
            yield pa.record_batch([pa.array([schema.serialize().to_pybytes()], pa.binary())], names=["schema"])


def _read_task(
    files: list[InputFile], fmt: FileFormat, types: InputTypes, target: pa.Schema, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Task: the rows of each file named, in the `target` schema (a column a file lacks is null)."""
    for batch in batches:
        for i in batch.column(0).to_pylist():
            data = read_file(files[i], fmt, types)
            cols = [
                data.column(f.name).cast(f.type) if f.name in data.column_names else pa.nulls(data.num_rows, f.type)
                for f in target
            ]
            yield from pa.Table.from_arrays(cols, schema=target).to_batches()

"""The engines compared. Each peer builds its table from the base (untimed), may prepare untimed
what the timed part needs, applies one batch (timed), and reads back the row count, the sum of `ts`
and the probed keys for verification.

Peers whose package is missing report `unavailable()` with a note; none is ever faked.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from workloads import dedup_latest

COLUMNS = ["key", "ts", "fare"]
Snapshot = tuple[int, int, pa.Table]  # row count, sum of ts, probed keys found (key, ts, fare)


class Peer:
    name = ""
    needs: tuple[str, ...] = ()

    def __init__(self, hoodie: dict[str, Any] | None = None) -> None:
        # Write options of the run (e.g. hoodie.parquet.max.file.size); only upsertlake reads them.
        self.hoodie = dict(hoodie or {})

    def unavailable(self) -> str | None:
        """Why this peer cannot run here, or None."""
        missing = [m for m in self.needs if importlib.util.find_spec(m) is None]
        return f"not installed: {', '.join(missing)}" if missing else None

    def build(self, path: Path, base: pa.Table) -> None:
        raise NotImplementedError

    def prepare(self, path: Path, batch: pa.Table, workload: str) -> None:
        """Untimed work between build and apply (none unless a peer says so)."""

    def apply(self, path: Path, batch: pa.Table, workload: str) -> dict[str, Any]:
        """Apply the batch (the timed part); return extra figures (stage seconds, index stats)."""
        raise NotImplementedError

    def snapshot(self, path: Path, keys: list[str]) -> Snapshot:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _summary(table: pa.Table, keys: list[str]) -> Snapshot:
    found = table.filter(pc.is_in(table["key"], value_set=pa.array(keys))).select(COLUMNS)
    return table.num_rows, pc.sum(table["ts"]).as_py() or 0, found


class UpsertlakePeer(Peer):
    name = "upsertlake"
    needs = ("upsertlake",)

    def __init__(
        self, hoodie: dict[str, Any] | None = None, index: str = "SIMPLE", table_type: str = "COPY_ON_WRITE"
    ) -> None:
        super().__init__(hoodie)
        self.index = index
        self.table_type = table_type

    def build(self, path: Path, base: pa.Table) -> None:
        import upsertlake

        kind = {"table_type": self.table_type} if self.table_type != "COPY_ON_WRITE" else {}
        t = upsertlake.create_table(
            path, name="bench", record_key="key", precombine_field="ts", partition_fields=["part"], **kind
        )
        t.bulk_insert(base, self.hoodie)

    def apply(self, path: Path, batch: pa.Table, workload: str) -> dict[str, Any]:
        import upsertlake

        table = upsertlake.open_table(path, options={"hoodie.index.type": self.index, **self.hoodie})
        op = {"delete": table.delete, "insert": table.insert}.get(workload, table.upsert)
        result = op(batch)
        return {"stages": result.stage_seconds, "index": table.write_client().index.stats(),
                "files_written": len(result.files_written)}

    def snapshot(self, path: Path, keys: list[str]) -> Snapshot:
        import upsertlake

        return _summary(upsertlake.open_table(path).read(columns=COLUMNS), keys)


def _parquet_files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*.parquet") if ".hoodie" not in p.parts}


def _file_id(path: Path) -> str:
    return path.name.split("_", 1)[0]


def _writer_settings(md: pq.FileMetaData) -> dict[str, Any]:
    """The ParquetWriter arguments a file was written with, read back from its footer: codec per
    column, which columns are dictionary-encoded, any other encoding, rows per row group."""
    rg = md.row_group(0)
    compression, dictionary, encoding = {}, [], {}
    for i in range(rg.num_columns):
        col = rg.column(i)
        compression[col.path_in_schema] = col.compression.lower()
        if {"PLAIN_DICTIONARY", "RLE_DICTIONARY"} & set(col.encodings):
            dictionary.append(col.path_in_schema)
        else:
            other = [e for e in col.encodings if e not in ("PLAIN", "RLE", "BIT_PACKED")]
            if other:
                encoding[col.path_in_schema] = other[0]
    return {"compression": compression, "use_dictionary": dictionary, "column_encoding": encoding or None,
            "store_schema": b"ARROW:schema" in (md.metadata or {}), "write_statistics": rg.column(0).is_stats_set,
            "row_group_size": rg.num_rows}


class PyarrowLimitPeer(UpsertlakePeer):
    """The physical limit of a copy-on-write upsert: pyarrow alone reading every base file our upsert
    replaces and writing every file it writes, with the same writer settings (read back from the
    files' footers) and the same footer metadata, on as many threads as upsertlake's write pool.
    Untimed, upsertlake runs the upsert first to learn those files and their contents; the timed
    part only decodes and encodes. The table then holds pyarrow's files under our commit, and the
    usual verification reads them."""

    name = "pyarrow-limit"

    def prepare(self, path: Path, batch: pa.Table, workload: str) -> None:
        before = _parquet_files(path)
        super().apply(path, batch, workload)
        self.reads: list[Path] = []
        self.writes: list[tuple[Path, pa.Table, dict[str, Any], dict[bytes, bytes]]] = []
        latest: dict[tuple[Path, str], Path] = {}
        for f in sorted(before, key=lambda f: f.name.rsplit("_", 1)[-1]):  # by instant: newest wins
            latest[f.parent, _file_id(f)] = f
        for f in sorted(_parquet_files(path) - before):
            if (old := latest.get((f.parent, _file_id(f)))) is not None:
                self.reads.append(old)
            md = pq.read_metadata(f)
            footer = {k: v for k, v in (md.metadata or {}).items() if k != b"ARROW:schema"}
            self.writes.append((f, pq.read_table(f), _writer_settings(md), footer))
            f.unlink()

    def apply(self, path: Path, batch: pa.Table, workload: str) -> dict[str, Any]:
        # As many threads as upsertlake's write pool (one per CPU): encoding one file at a time
        # would be a limit only for a single-threaded writer.
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            list(pool.map(pq.read_table, self.reads))
            list(pool.map(_encode, self.writes))
        return {"files_read": len(self.reads), "files_written": len(self.writes)}


def _encode(write: tuple[Path, pa.Table, dict[str, Any], dict[bytes, bytes]]) -> None:
    f, content, settings, footer = write
    settings = dict(settings)
    rows = settings.pop("row_group_size")
    with pq.ParquetWriter(f, content.schema, **settings) as w:
        w.write_table(content, row_group_size=rows)
        w.add_key_value_metadata(footer)


class DeltaPeer(Peer):
    """delta-rs MERGE on the key alone, as users write it; `delta-rs+part` adds the partition
    predicate a user who knows the layout would add (the batch's days, and t.part = s.part)."""

    name = "delta-rs"
    needs = ("deltalake",)

    def __init__(self, hoodie: dict[str, Any] | None = None, by_partition: bool = False) -> None:
        super().__init__(hoodie)
        self.by_partition = by_partition

    def build(self, path: Path, base: pa.Table) -> None:
        from deltalake import write_deltalake

        write_deltalake(str(path), base, partition_by=["part"])

    def apply(self, path: Path, batch: pa.Table, workload: str) -> dict[str, Any]:
        from deltalake import DeltaTable

        predicate = "t.key = s.key"
        if self.by_partition:
            days = ", ".join(f"'{d}'" for d in pc.unique(batch["part"]).to_pylist())
            predicate = f"t.part IN ({days}) AND t.part = s.part AND {predicate}"
        merge = DeltaTable(str(path)).merge(
            dedup_latest(batch), predicate=predicate, source_alias="s", target_alias="t"
        )
        if workload == "delete":
            merge = merge.when_matched_delete()
        else:
            merge = merge.when_matched_update_all(predicate="s.ts >= t.ts").when_not_matched_insert_all()
        return {"metrics": {k: v for k, v in merge.execute().items() if isinstance(v, (int, float))}}

    def snapshot(self, path: Path, keys: list[str]) -> Snapshot:
        from deltalake import DeltaTable

        return _summary(DeltaTable(str(path)).to_pyarrow_dataset().to_table(columns=COLUMNS), keys)


class IcebergPeer(Peer):
    """pyiceberg with a SqlCatalog on sqlite; table partitioned by identity(part)."""

    name = "pyiceberg"
    needs = ("pyiceberg", "sqlalchemy")

    def _table(self, path: Path, base: pa.Table | None = None) -> Any:
        from pyiceberg.catalog.sql import SqlCatalog

        cat = SqlCatalog("bench", uri=f"sqlite:///{path}/catalog.db", warehouse=f"file://{path}/warehouse")
        if base is None:
            return cat.load_table("b.t")
        from pyiceberg.transforms import IdentityTransform

        cat.create_namespace("b")
        t = cat.create_table("b.t", schema=base.schema)
        with t.update_spec() as spec:
            spec.add_field("part", IdentityTransform(), "part")
        return t

    def build(self, path: Path, base: pa.Table) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self._table(path, base).append(base)

    def apply(self, path: Path, batch: pa.Table, workload: str) -> dict[str, Any]:
        t = self._table(path)
        if workload == "delete":
            from pyiceberg.expressions import In

            t.delete(In("key", batch["key"].to_pylist()))
            return {}
        r = t.upsert(dedup_latest(batch), join_cols=["key"])
        return {"metrics": {"rows_updated": r.rows_updated, "rows_inserted": r.rows_inserted}}

    def snapshot(self, path: Path, keys: list[str]) -> Snapshot:
        return _summary(self._table(path).scan(selected_fields=tuple(COLUMNS)).to_arrow(), keys)


class DuckDBPeer(Peer):
    """A DuckDB database file, `key` the primary key: INSERT … ON CONFLICT DO UPDATE."""

    name = "duckdb"
    needs = ("duckdb",)

    def _con(self, path: Path) -> Any:
        import duckdb

        path.mkdir(parents=True, exist_ok=True)
        return duckdb.connect(str(path / "db.duckdb"))

    def build(self, path: Path, base: pa.Table) -> None:
        con = self._con(path)
        con.execute("CREATE TABLE t AS SELECT * FROM base LIMIT 0")
        con.execute("ALTER TABLE t ADD PRIMARY KEY (key)")
        con.execute("INSERT INTO t SELECT * FROM base")
        con.close()

    def apply(self, path: Path, batch: pa.Table, workload: str) -> dict[str, Any]:
        con = self._con(path)
        src = dedup_latest(batch)  # noqa: F841 (read by name in the SQL)
        if workload == "delete":
            con.execute("DELETE FROM t WHERE key IN (SELECT key FROM src)")
        else:
            sets = ", ".join(f"{c} = excluded.{c}" for c in batch.column_names if c != "key")
            con.execute(
                f"INSERT INTO t SELECT * FROM src ON CONFLICT (key) DO UPDATE SET {sets} WHERE excluded.ts >= t.ts"
            )
        con.execute("CHECKPOINT")
        con.close()
        return {}

    def snapshot(self, path: Path, keys: list[str]) -> Snapshot:
        con = self._con(path)
        found = con.sql("SELECT key, ts, fare FROM t WHERE key IN (SELECT unnest($1))", params=[keys]).to_arrow_table()
        ((count, ts_sum),) = con.sql("SELECT count(*), coalesce(sum(ts), 0) FROM t").fetchall()
        con.close()
        return count, int(ts_sum), found


_SESSION: Any = None  # the session this process started (a borrowed one is never stopped here)


def spark_session(extra: dict[str, str] | None = None) -> Any:
    """The local[2] session of a benchmark process (or the one already active, e.g. a test's). Its
    Python workers run this interpreter, the one that has pyarrow and upsertlake."""
    global _SESSION
    from pyspark.sql import SparkSession

    if (active := SparkSession.getActiveSession()) is not None:
        return active
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master("local[2]").appName("bench")
        .config("spark.pyspark.python", sys.executable).config("spark.pyspark.driver.python", sys.executable)
        .config("spark.sql.shuffle.partitions", "8").config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "2g")
    )
    for k, v in (extra or {}).items():
        builder = builder.config(k, v)
    _SESSION = builder.getOrCreate()
    _SESSION.sparkContext.setLogLevel("ERROR")
    return _SESSION


def stop_spark() -> None:
    global _SESSION
    if _SESSION is not None:
        _SESSION.stop()
        _SESSION = None


class SparkPeer(Peer):
    """What every Spark peer shares, so that all pay the same start-up: the session starts untimed
    after the build (which never uses Spark), and the first Spark job runs in the timed part."""

    needs = ("pyspark",)

    def build(self, path: Path, base: pa.Table) -> None:
        path.mkdir(parents=True, exist_ok=True)
        pq.write_to_dataset(base, path / "v0", partition_cols=["part"])
        spark_session()
        self.schema = base.schema

    def table_frame(self, path: Path) -> Any:
        """The table as Spark reads it, with the schema given so that `part` stays a string."""
        from pyspark.sql.pandas.types import from_arrow_schema

        return spark_session().read.schema(from_arrow_schema(self.schema)).parquet(str(path / "v0"))

    def batch_frame(self, path: Path, batch: pa.Table) -> Any:
        pq.write_table(batch, path.parent / "batch.parquet")
        return spark_session().read.parquet(str(path.parent / "batch.parquet"))

    def snapshot(self, path: Path, keys: list[str]) -> Snapshot:
        t = ds.dataset(self.output(path), format="parquet", partitioning="hive").to_table(columns=COLUMNS)
        return _summary(t, keys)

    def output(self, path: Path) -> Path:
        return path / "v0"

    def close(self) -> None:
        stop_spark()


def newest_per_key(old: Any, new: Any, workload: str) -> Any:
    """The plain-Spark upsert: union the batch, keep the row with the largest ts per key (or drop
    the batch's keys for a delete)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if workload == "delete":
        return old.join(new.select("key"), "key", "left_anti")
    w = Window.partitionBy("key").orderBy(F.col("ts").desc())
    return old.unionByName(new).withColumn("_rn", F.row_number().over(w)).filter("_rn = 1").drop("_rn")


class SparkRewritePeer(SparkPeer):
    """What users write without a table format: read all, keep the newest row per key, write the
    whole table anew."""

    name = "spark-rewrite"

    def apply(self, path: Path, batch: pa.Table, workload: str) -> dict[str, Any]:
        new = self.batch_frame(path, batch)
        old = self.table_frame(path)
        newest_per_key(old, new, workload).write.partitionBy("part").parquet(str(path / "v1"))
        return {}

    def output(self, path: Path) -> Path:
        return path / "v1"


class SparkPartitionOverwritePeer(SparkPeer):
    """The best a user can do without a table format: read only the days the batch touches, keep
    the newest row per key, and overwrite just those days in place (dynamic partition overwrite)."""

    name = "spark-overwrite"

    def apply(self, path: Path, batch: pa.Table, workload: str) -> dict[str, Any]:
        from pyspark.sql import functions as F

        new = self.batch_frame(path, batch)
        days = [r[0] for r in new.select("part").distinct().collect()]
        old = self.table_frame(path).where(F.col("part").isin(days))
        (newest_per_key(old, new, workload).write.mode("overwrite").option("partitionOverwriteMode", "dynamic")
         .partitionBy("part").parquet(str(path / "v0")))
        return {"partitions": len(days)}


class UpsertlakeSparkPeer(UpsertlakePeer):
    """`upsertlake.spark.upsert` on local[2]; the table is built in process, the session starts
    untimed after it, as for the plain Spark peers."""

    name = "upsertlake-spark"
    needs = ("upsertlake", "pyspark")

    def unavailable(self) -> str | None:
        if (why := super().unavailable()) is not None:
            return why
        try:
            import upsertlake.spark  # noqa: F401
        except ImportError as e:
            return f"upsertlake.spark not importable ({e})"
        return None

    def build(self, path: Path, base: pa.Table) -> None:
        super().build(path, base)
        spark_session()

    def apply(self, path: Path, batch: pa.Table, workload: str) -> dict[str, Any]:
        import upsertlake.spark as uls

        df = SparkPeer.batch_frame(self, path, batch)
        op = {"delete": uls.delete, "insert": uls.insert}.get(workload, uls.upsert)
        result = op(df, str(path), **self.hoodie)
        return {"stages": dict(result.stage_seconds), "files_written": len(result.files_written)}

    def close(self) -> None:
        stop_spark()


PEERS: dict[str, Callable[..., Peer]] = {
    "upsertlake": UpsertlakePeer,
    "upsertlake-mor": lambda hoodie=None: UpsertlakePeer(hoodie, table_type="MERGE_ON_READ"),
    "pyarrow-limit": PyarrowLimitPeer,
    "upsertlake-spark": UpsertlakeSparkPeer,
    "upsertlake-spark-mor": lambda hoodie=None: UpsertlakeSparkPeer(hoodie, table_type="MERGE_ON_READ"),
    "delta-rs": DeltaPeer,
    "delta-rs+part": lambda hoodie=None: DeltaPeer(hoodie, by_partition=True),
    "pyiceberg": IcebergPeer,
    "duckdb": DuckDBPeer,
    "spark-rewrite": SparkRewritePeer,
    "spark-overwrite": SparkPartitionOverwritePeer,
}


def make_peer(name: str, hoodie: dict[str, Any] | None = None) -> Peer:
    """`upsertlake:BLOOM` selects upsertlake with that index type."""
    base, _, index = name.partition(":")
    if base == "upsertlake" and index:
        return UpsertlakePeer(hoodie, index)
    return PEERS[base](hoodie)

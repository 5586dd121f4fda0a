"""The engines compared. Each peer builds its table from the base (untimed), applies one batch
(timed), and reads back the probed keys and the row count for verification.

Peers whose package is missing report `unavailable()` with a note; none is ever faked.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from workloads import dedup_latest

COLUMNS = ["key", "ts", "fare"]


class Peer:
    name = ""
    needs: tuple[str, ...] = ()

    def unavailable(self) -> str | None:
        """Why this peer cannot run here, or None."""
        missing = [m for m in self.needs if importlib.util.find_spec(m) is None]
        return f"not installed: {', '.join(missing)}" if missing else None

    def build(self, path: Path, base: pa.Table) -> None:
        raise NotImplementedError

    def apply(self, path: Path, batch: pa.Table, workload: str) -> dict[str, Any]:
        """Apply the batch (the timed part); return extra figures (stage seconds, index stats)."""
        raise NotImplementedError

    def snapshot(self, path: Path, keys: list[str]) -> tuple[int, pa.Table]:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _probe(table: pa.Table, keys: list[str]) -> pa.Table:
    return table.filter(pc.is_in(table["key"], value_set=pa.array(keys))).select(COLUMNS)


class UpsertlakePeer(Peer):
    name = "upsertlake"
    needs = ("upsertlake",)

    def __init__(self, index: str = "SIMPLE") -> None:
        self.index = index

    def build(self, path: Path, base: pa.Table) -> None:
        import upsertlake

        t = upsertlake.create_table(path, name="bench", record_key="key", precombine_field="ts", partition_fields=["part"])
        t.bulk_insert(base)

    def apply(self, path: Path, batch: pa.Table, workload: str) -> dict[str, Any]:
        import upsertlake

        table = upsertlake.open_table(path, options={"hoodie.index.type": self.index})
        op = {"delete": table.delete, "insert": table.insert}.get(workload, table.upsert)
        result = op(batch)
        return {"stages": result.stage_seconds, "index": table.write_client().index.stats()}

    def snapshot(self, path: Path, keys: list[str]) -> tuple[int, pa.Table]:
        import upsertlake

        t = upsertlake.open_table(path).read(columns=COLUMNS)
        return t.num_rows, _probe(t, keys)


class UpsertlakeSparkPeer(UpsertlakePeer):
    name = "upsertlake-spark"
    needs = ("upsertlake", "pyspark")

    def unavailable(self) -> str | None:
        if (why := super().unavailable()) is not None:
            return why
        try:
            import upsertlake.spark  # noqa: F401
        except ImportError as e:
            return f"upsertlake.spark not importable ({e}); it is being built on the spark branch"
        return None

    def build(self, path: Path, base: pa.Table) -> None:
        super().build(path, base)
        _spark()  # the session starts untimed, as for the plain Spark peer

    def apply(self, path: Path, batch: pa.Table, workload: str) -> dict[str, Any]:
        import pyarrow.parquet as pq

        import upsertlake.spark

        pq.write_table(batch, path.parent / "batch.parquet")
        df = _spark().read.parquet(str(path.parent / "batch.parquet"))
        op = {"delete": upsertlake.spark.delete, "insert": upsertlake.spark.insert}.get(workload, upsertlake.spark.upsert)
        result = op(df, str(path))
        return {"stages": dict(result.stage_seconds)}

    def close(self) -> None:
        if _SESSION is not None:
            _SESSION.stop()


class DeltaPeer(Peer):
    name = "delta-rs"
    needs = ("deltalake",)

    def build(self, path: Path, base: pa.Table) -> None:
        from deltalake import write_deltalake

        write_deltalake(str(path), base, partition_by=["part"])

    def apply(self, path: Path, batch: pa.Table, workload: str) -> dict[str, Any]:
        from deltalake import DeltaTable

        merge = DeltaTable(str(path)).merge(
            dedup_latest(batch), predicate="t.key = s.key AND t.part = s.part", source_alias="s", target_alias="t"
        )
        if workload == "delete":
            merge = merge.when_matched_delete()
        else:
            merge = merge.when_matched_update_all(predicate="s.ts >= t.ts").when_not_matched_insert_all()
        return {"metrics": {k: v for k, v in merge.execute().items() if isinstance(v, (int, float))}}

    def snapshot(self, path: Path, keys: list[str]) -> tuple[int, pa.Table]:
        from deltalake import DeltaTable

        t = DeltaTable(str(path)).to_pyarrow_dataset().to_table(columns=COLUMNS)
        return t.num_rows, _probe(t, keys)


class IcebergPeer(Peer):
    """pyiceberg with a SqlCatalog on sqlite; table partitioned by identity(part)."""

    name = "pyiceberg"
    needs = ("pyiceberg", "sqlalchemy")

    def _table(self, path: Path, base: pa.Table | None = None) -> Any:
        from pyiceberg.catalog.sql import SqlCatalog

        cat = SqlCatalog("bench", uri=f"sqlite:///{path}/catalog.db", warehouse=f"file://{path}/warehouse")
        if base is None:
            return cat.load_table("b.t")
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.transforms import IdentityTransform

        cat.create_namespace("b")
        t = cat.create_table("b.t", schema=base.schema)
        with t.update_spec() as spec:
            spec.add_field("part", IdentityTransform(), "part")
        del PartitionField, PartitionSpec
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

    def snapshot(self, path: Path, keys: list[str]) -> tuple[int, pa.Table]:
        t = self._table(path).scan(selected_fields=tuple(COLUMNS)).to_arrow()
        return t.num_rows, _probe(t, keys)


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
            con.execute(f"INSERT INTO t SELECT * FROM src ON CONFLICT (key) DO UPDATE SET {sets} WHERE excluded.ts >= t.ts")
        con.execute("CHECKPOINT")
        con.close()
        return {}

    def snapshot(self, path: Path, keys: list[str]) -> tuple[int, pa.Table]:
        con = self._con(path)
        count = con.execute("SELECT count(*) FROM t").fetchone()[0]
        found = con.execute("SELECT key, ts, fare FROM t WHERE key IN (SELECT unnest(?))", [keys]).to_arrow_table()
        con.close()
        return count, found


_SESSION: Any = None


def _spark() -> Any:
    global _SESSION
    if _SESSION is None:
        from pyspark.sql import SparkSession

        _SESSION = (
            SparkSession.builder.master("local[2]").appName("bench")
            .config("spark.sql.shuffle.partitions", "8").config("spark.ui.enabled", "false")
            .config("spark.driver.memory", "2g").getOrCreate()
        )
    return _SESSION


class SparkRewritePeer(Peer):
    """What users write without a table format: read all, union the batch, keep the newest row per
    key (row_number over key by ts desc), write the whole table anew."""

    name = "spark-rewrite"
    needs = ("pyspark",)

    def build(self, path: Path, base: pa.Table) -> None:
        import pyarrow.parquet as pq

        path.mkdir(parents=True, exist_ok=True)
        pq.write_table(base, path / "base.parquet")
        _spark().read.parquet(str(path / "base.parquet")).write.partitionBy("part").parquet(str(path / "v0"))
        (path / "base.parquet").unlink()

    def apply(self, path: Path, batch: pa.Table, workload: str) -> dict[str, Any]:
        import pyarrow.parquet as pq
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        spark = _spark()
        pq.write_table(batch, path / "batch.parquet")
        old = spark.read.parquet(str(path / "v0"))
        new = spark.read.parquet(str(path / "batch.parquet"))
        if workload == "delete":
            out = old.join(new.select("key"), "key", "left_anti")
        else:
            w = Window.partitionBy("key").orderBy(F.col("ts").desc())
            out = old.unionByName(new).withColumn("_rn", F.row_number().over(w)).filter("_rn = 1").drop("_rn")
        out.write.partitionBy("part").parquet(str(path / "v1"))
        return {}

    def snapshot(self, path: Path, keys: list[str]) -> tuple[int, pa.Table]:
        t = ds.dataset(path / "v1", format="parquet", partitioning="hive").to_table(columns=COLUMNS)
        return t.num_rows, _probe(t, keys)

    def close(self) -> None:
        if _SESSION is not None:
            _SESSION.stop()


PEERS: dict[str, Callable[[], Peer]] = {
    "upsertlake": UpsertlakePeer,
    "upsertlake-spark": UpsertlakeSparkPeer,
    "delta-rs": DeltaPeer,
    "pyiceberg": IcebergPeer,
    "duckdb": DuckDBPeer,
    "spark-rewrite": SparkRewritePeer,
}


def make_peer(name: str) -> Peer:
    """`upsertlake:BLOOM` selects upsertlake with that index type."""
    base, _, index = name.partition(":")
    return UpsertlakePeer(index) if base == "upsertlake" and index else PEERS[base]()

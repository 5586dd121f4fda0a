"""A Spark driver against a standalone cluster (tests/spark/test_cluster.py starts the master and
the worker): the distributed write path and both read paths on each table, printing JSON.

    python tests/scripts/spark_cluster_probe.py MASTER_URL ROWS TABLES_JSON

TABLES_JSON lists [TABLE, STORE] pairs: TABLE is an `s3://` URI (STORE then holds its storage
options) or a path relative to this process's working folder, which the executors do not share
(STORE: {}). One driver does them one after the other.
"""

from __future__ import annotations

import json
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import upsertlake.spark as uls


def main() -> None:
    master, rows, tables = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    spark = (
        SparkSession.builder.master(master)
        .appName("upsertlake-cluster-test")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.pyspark.python", sys.executable)  # the executors run the interpreter with our packages
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.executor.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    uls.register(spark)
    out = {}
    for table, store in tables:
        began = time.perf_counter()
        out[table] = {"steps": steps(spark, table, store, rows), "seconds": time.perf_counter() - began}
    print(json.dumps(out), flush=True)
    spark.stop()


def steps(spark: SparkSession, table: str, store: dict, rows: int) -> dict:
    """Bulk insert, two upserts, a delete and a data-source save, each read back both ways."""
    keys = dict(table="t", record_key="uuid", precombine_field="ts", partition_fields="city", storage_options=store)

    def frame(first: int, last: int, ts: int):
        return spark.range(first, last).select(
            F.concat(F.lit("k"), F.col("id").cast("string")).alias("uuid"),
            F.lit(ts).cast("long").alias("ts"),
            (F.col("id") % 8).cast("string").alias("city"),
            (F.col("id") * ts).cast("double").alias("fare"),
        )

    def counts() -> dict:
        snap = uls.read(spark, table, storage_options=store)
        source = spark.read.format("upsertlake")
        for k, v in store.items():
            source = source.option(k, v)
        through_source = source.load(table)
        agg = snap.agg(F.count("*"), F.sum("fare")).first()
        agg2 = through_source.agg(F.count("*"), F.sum("fare")).first()
        return {"rows": agg[0], "fare": agg[1], "source_rows": agg2[0], "source_fare": agg2[1]}

    done = {}
    uls.bulk_insert(frame(0, rows, 1), table, **keys)
    done["bulk_insert"] = counts()
    uls.upsert(frame(0, rows // 10, 2), table, **keys)
    done["upsert_1"] = counts()
    uls.upsert(frame(rows // 20, rows // 20 + rows // 10, 3), table, **keys)
    done["upsert_2"] = counts()
    uls.delete(frame(0, 100, 0).select("uuid", "city"), table, **keys)
    done["delete"] = counts()
    sink = frame(rows, rows + 10, 4).write.format("upsertlake").mode("append")
    for k, v in store.items():
        sink = sink.option(k, v)
    sink.option("hoodie.datasource.write.operation", "upsert").save(table)
    done["save"] = counts()
    return done


if __name__ == "__main__":
    main()

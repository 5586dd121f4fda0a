"""A Spark driver against a standalone cluster (tests/test_spark_cluster.py starts the master and
the worker): the distributed write path and both read paths on one table, printing JSON.

    python tests/spark_cluster_probe.py MASTER_URL TABLE ROWS [STORE_JSON]

TABLE is an `s3://` URI (STORE_JSON then holds its storage options) or a path relative to this
process's working folder, which the executors do not share.
"""

from __future__ import annotations

import json
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import upsertlake.spark as uls


def main() -> None:
    master, table, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
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
    keys = dict(table="t", record_key="uuid", precombine_field="ts", partition_fields="city", storage_options=store)
    began = time.perf_counter()

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

    steps = {}
    uls.bulk_insert(frame(0, rows, 1), table, **keys)
    steps["bulk_insert"] = counts()
    uls.upsert(frame(0, rows // 10, 2), table, **keys)
    steps["upsert_1"] = counts()
    uls.upsert(frame(rows // 20, rows // 20 + rows // 10, 3), table, **keys)
    steps["upsert_2"] = counts()
    uls.delete(frame(0, 100, 0).select("uuid", "city"), table, **keys)
    steps["delete"] = counts()
    sink = frame(rows, rows + 10, 4).write.format("upsertlake").mode("append")
    for k, v in store.items():
        sink = sink.option(k, v)
    sink.option("hoodie.datasource.write.operation", "upsert").save(table)
    steps["save"] = counts()
    print(json.dumps({"steps": steps, "seconds": time.perf_counter() - began}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()

"""Apache Hudi's Spark datasource behind a pipe: the reference the tests compare upsertlake with.

Runs under the interpreter of a separate virtual environment that holds a PySpark Hudi supports
(PySpark 3.5; the tests' own PySpark is newer and cannot share a process with it), with Hudi's
Spark bundle on the classpath. It imports nothing of upsertlake. One request per line on standard
input, one JSON answer per line on the file descriptor given by `--answers`; everything Spark or
the JVM prints goes to standard error (the client keeps it in a log file).

Requests (JSON objects; every answer is `{"ok": true, "result": ...}` or `{"ok": false, "error": ...}`):
- `write`: `data` (a parquet file or folder), `path`, `options`, `mode`; `async: true` answers at once
  with a handle that `wait` joins.
- `read`: `path`, `options` (query type, instants), `out`: the rows are written to `out` (Arrow IPC).
- `sql`: one Spark SQL statement; answers its rows as lists of strings.
- `call`: a Hudi procedure (`procedure`, `args`) on the table at `path`, with `conf` (hoodie.*
  settings) set in the session while it runs.
- `stream`: a streaming write of the parquet files in `source` to `path`, one file a micro-batch
  (trigger availableNow).
- `hfile`: every key and value of an HFile, read by Hudi's own HFile reader (hex-encoded).
- `exit`.
`--once FILE` runs the one request in FILE and exits: the tests kill such a process mid-write.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import traceback


def build_session(jar: str, local_dir: str):
    """A local Spark session with Hudi's bundle, its serializer and SQL extensions."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("hudi-reference")
        .config("spark.jars", jar)
        .config("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
        .config("spark.kryo.registrator", "org.apache.spark.HoodieSparkKryoRegistrar")
        .config("spark.sql.extensions", "org.apache.spark.sql.hudi.HoodieSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.hudi.catalog.HoodieCatalog")
        .config("spark.driver.memory", "2g")
        .config("spark.local.dir", local_dir)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.sql.sources.partitionOverwriteMode", "static")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


class Server:
    """Runs requests against one Spark session; async writes run on threads of their own."""

    def __init__(self, spark) -> None:
        self.spark = spark
        self.pending: dict[str, threading.Thread] = {}
        self.outcomes: dict[str, dict] = {}

    def handle(self, request: dict) -> object:
        return getattr(self, "do_" + request["cmd"])(request)

    def do_ping(self, request: dict) -> object:
        self.spark._jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass("org.apache.hudi.DefaultSource")
        return {"spark": self.spark.version}

    def do_write(self, request: dict) -> object:
        if request.get("async"):
            handle = str(len(self.pending) + 1)

            def run() -> None:
                self.outcomes[handle] = answer(self, {**request, "async": False})

            thread = threading.Thread(target=run, daemon=True)
            self.pending[handle] = thread
            thread.start()
            return {"handle": handle}
        frame = self.spark.read.parquet(request["data"])
        writer = frame.write.format("hudi").options(**request.get("options", {}))
        writer.mode(request.get("mode", "append")).save(request["path"])
        return None

    def do_wait(self, request: dict) -> object:
        self.pending.pop(request["handle"]).join()
        outcome = self.outcomes.pop(request["handle"])
        if not outcome["ok"]:
            raise RuntimeError(outcome["error"])
        return outcome["result"]

    def do_read(self, request: dict) -> object:
        frame = self.spark.read.format("hudi").options(**request.get("options", {})).load(request["path"])
        if request.get("where"):
            frame = frame.where(request["where"])
        if request.get("columns"):
            frame = frame.select(*request["columns"])
        write_arrow(frame, request["out"])
        return {"columns": frame.columns}

    def do_sql(self, request: dict) -> object:
        return [[None if v is None else str(v) for v in row] for row in self.spark.sql(request["statement"]).collect()]

    def do_call(self, request: dict) -> object:
        """A Hudi procedure on the table at `path`: the table is registered in the session's
        catalog first (procedures such as run_clean take a table name only)."""
        name = "t_" + hashlib.sha1(request["path"].encode()).hexdigest()[:12]
        self.spark.sql(f"CREATE TABLE IF NOT EXISTS {name} USING hudi LOCATION '{request['path']}'")
        args = ", ".join([f"table => '{name}'", *(f"{k} => {_literal(v)}" for k, v in request.get("args", {}).items())])
        conf = request.get("conf", {})  # Hudi's procedures take hoodie.* settings from the session
        before = {k: self.spark.conf.get(k, None) for k in conf}
        for k, v in conf.items():
            self.spark.conf.set(k, v)
        try:
            return self.do_sql({"statement": f"CALL {request['procedure']}({args})"})
        finally:
            for k, v in before.items():
                self.spark.conf.unset(k) if v is None else self.spark.conf.set(k, v)

    def do_stream(self, request: dict) -> object:
        schema = self.spark.read.parquet(request["schema_from"]).schema
        source = self.spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(request["source"])
        query = (
            source.writeStream.format("hudi")
            .options(**request.get("options", {}))
            .option("checkpointLocation", request["checkpoint"])
            .outputMode("append")
            .trigger(availableNow=True)
            .start(request["path"])
        )
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        return {"batches": len(query.recentProgress)}

    def do_hfile(self, request: dict) -> object:
        return _hfile_entries(self.spark, request["file"])


def _hfile_entries(spark, file: str) -> list[list[str]]:
    """Hudi 1.x's HFile reader (hudi-io): every key-value pair, in file order, hex-encoded."""
    jvm = spark._jvm
    data = jvm.java.nio.file.Files.readAllBytes(jvm.java.nio.file.Paths.get(file))
    stream = jvm.org.apache.hudi.io.ByteArraySeekableDataInputStream(
        jvm.org.apache.hudi.io.ByteBufferBackedInputStream(data)
    )
    reader = jvm.org.apache.hudi.io.hfile.HFileReaderImpl(stream, len(data))
    entries = []
    if reader.seekTo():
        while True:
            kv = reader.getKeyValue().get()
            entries.append(
                [
                    bytes(kv.getKey().getContentInString().encode()).hex(),
                    bytes(kv.getBytes()[kv.getValueOffset() : kv.getValueOffset() + kv.getValueLength()]).hex(),
                ]
            )
            if not reader.next():
                break
    reader.close()
    return entries


def write_arrow(frame, out: str) -> None:
    """A DataFrame's rows as an Arrow IPC file (collected as Arrow: a Spark write job costs more)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    batches = frame._collect_as_arrow()
    schema = batches[0].schema if batches else to_arrow_schema(frame.schema)
    with pa.OSFile(out, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)


def _literal(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return str(value)
    return "'" + str(value).replace("'", "\\'") + "'"


def answer(server: Server, request: dict) -> dict:
    try:
        return {"ok": True, "result": server.handle(request)}
    except Exception as error:  # the client turns this into a test failure with Hudi's message
        traceback.print_exc(file=sys.stderr)
        return {"ok": False, "error": _java_message(error)}


def _java_message(error: Exception) -> str:
    """The Java exception's message chain, without py4j's frames: what Hudi said."""
    java = getattr(error, "java_exception", None)
    if java is None:
        return f"{type(error).__name__}: {error}"
    causes = []
    while java is not None and len(causes) < 8:
        causes.append(f"{java.getClass().getName()}: {java.getMessage()}")
        java = java.getCause()
    return "\ncaused by ".join(causes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jar", required=True)
    parser.add_argument("--local-dir", required=True)
    parser.add_argument("--answers", type=int, help="file descriptor for answers (default: stdout)")
    parser.add_argument("--once", help="a file holding one request: run it and exit")
    args = parser.parse_args()
    answers = os.fdopen(args.answers if args.answers is not None else os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever Spark, py4j or the JVM print goes to the log, never into the answers
    server = Server(build_session(args.jar, args.local_dir))
    if args.once:
        with open(args.once) as f:
            outcome = answer(server, json.load(f))
        answers.write(json.dumps(outcome) + "\n")
        return
    for line in sys.stdin:
        request = json.loads(line)
        if request["cmd"] == "exit":
            break
        answers.write(json.dumps(answer(server, request)) + "\n")
    server.spark.stop()


if __name__ == "__main__":
    main()

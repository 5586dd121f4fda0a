"""Table services: clean, savepoint / restore, rollback, compaction, clustering, archival, doctor,
the upgrade to version 8.

Layers (pyproject.toml, docs/DESIGN.md §3): may import index, partitioner,
concurrency and every floor below.

One module per service; each holds the table lock while it changes the timeline, and writes its
instants with Hudi's Avro documents so Apache Hudi's tools read them.
"""

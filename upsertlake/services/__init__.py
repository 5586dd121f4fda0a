"""Table services (DESIGN.md §5): clean, savepoint / restore, rollback.

Floor 5 of the layers declared in pyproject.toml [tool.importlinter]; may import index, partitioner,
concurrency and every floor below.

One module per service; each holds the table lock while it changes the timeline, and writes its
instants with Hudi's Avro documents so Apache Hudi's tools read them.
"""

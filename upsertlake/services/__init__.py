"""Table services (DESIGN.md §5): clean, savepoint / restore, rollback.

One module per service; each holds the table lock while it changes the timeline, and writes its
instants with Hudi's Avro documents so Apache Hudi's tools read them.
"""

"""Readers: plans of snapshot, time-travel and incremental reads with filters and pruning
(`snapshot`), and the scan that reads a plan into Arrow, a bounded stream, DuckDB or Polars (`scan`).

Layers (pyproject.toml, docs/DESIGN.md §3): beside the engine, which it does not import; nor
does it import services, indexes, the partitioner or concurrency control (a contract of its own):
reading imports only what reading needs.
"""

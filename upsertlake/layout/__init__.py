"""The format model of a table's files: file groups and slices (file system view), key generators,
base-file writing and footers, Hudi's bloom filter, markers and the undoing of pending writes.

Layers (pyproject.toml, docs/DESIGN.md §3): may import timeline, schema
and every floor below.
"""

"""The format model of a table's files: file groups and slices (file system view), key generators,
base-file writing and footers, Hudi's bloom filter, markers and the undoing of pending writes.

Floor 7 of the layers declared in pyproject.toml [tool.importlinter]; may import timeline, schema
and every floor below.
"""

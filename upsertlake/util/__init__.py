"""Small Arrow helpers shared across the write and read paths.

Floor 11 (bottom) of the layers declared in pyproject.toml [tool.importlinter]; may import nothing
of upsertlake.
"""

"""Small helpers shared across the write and read paths (Arrow, NumPy) and reports (durations).

Floor 11 (bottom) of the layers declared in pyproject.toml [tool.importlinter]; may import nothing
of upsertlake.
"""

"""Small helpers shared across the write and read paths (Arrow, NumPy) and reports (durations).

Layers (pyproject.toml, docs/DESIGN.md §3): the bottom floor; may import nothing
of upsertlake.
"""

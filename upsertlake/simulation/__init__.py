"""The multi-writer simulator and the invariants it checks: a tool on top of the whole engine.

Layers (pyproject.toml, docs/DESIGN.md §3): may import table and every
floor below; not cli, not spark.
"""

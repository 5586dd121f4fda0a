"""The multi-writer simulator and the invariants it checks: a tool on top of the whole engine.

Floor 2 of the layers declared in pyproject.toml [tool.importlinter]; may import table and every
floor below; not cli, not spark.
"""

"""The user-facing `Table`: one facade over writes, reads and services.

Floor 3 of the layers declared in pyproject.toml [tool.importlinter]; may import engine, read,
services and every floor below.
"""

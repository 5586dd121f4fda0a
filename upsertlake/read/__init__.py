"""Readers: snapshot, time travel and incremental scans with filters.

Floor 4 of the layers declared in pyproject.toml [tool.importlinter]; may import services and every
floor below; not engine.
"""

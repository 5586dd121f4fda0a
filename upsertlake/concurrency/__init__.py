"""Concurrent writers: table locks, heartbeats and the commit-time conflict check.

Floor 6 of the layers declared in pyproject.toml [tool.importlinter]; may import layout and every
floor below; not index or partitioner.
"""

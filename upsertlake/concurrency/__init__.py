"""Concurrent writers: table locks, heartbeats and the commit-time conflict check.

Layers (pyproject.toml, docs/DESIGN.md §3): may import layout and every
floor below; not index or partitioner.
"""

"""Readers: snapshot, time travel and incremental scans with filters.

Layers (pyproject.toml, docs/DESIGN.md §3): may import services and every
floor below; not engine.
"""

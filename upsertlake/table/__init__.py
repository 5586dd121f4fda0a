"""The user-facing `Table`: one facade over writes, reads and services.

Layers (pyproject.toml, docs/DESIGN.md §3): may import engine, read,
services and every floor below.
"""

"""The timeline: instants and their times, commit metadata, Hudi's Avro timeline documents,
retention queries, the active and archived timelines.

Layers (pyproject.toml, docs/DESIGN.md §3): may import config, storage,
util, errors; not schema.
"""

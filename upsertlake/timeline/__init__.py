"""The timeline: instants and their times, commit metadata, Hudi's Avro timeline documents,
retention queries, the active and archived timelines.

Floor 8 of the layers declared in pyproject.toml [tool.importlinter]; may import config, storage,
util, errors; not schema.
"""

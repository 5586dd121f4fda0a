"""The write client and its steps: input, dedup, tag, profile, partition, write buckets, commit.

Floor 4 of the layers declared in pyproject.toml [tool.importlinter]; may import services and every
floor below; not read.
"""

"""The write client and its steps, one module each: input, prepare (dedup), tag, copy_on_write
(partition, write buckets), overwrite, commit and remerge; instants starts and ends them.

Floor 4 of the layers declared in pyproject.toml [tool.importlinter]; may import services and every
floor below; not read.
"""

"""The write client and its steps, one module each, in the order of the write path
(docs/DESIGN.md §2): instants (start, end), prepare (dedup), tag, planner (one write_plan) and
bucketing, write_buckets and merge_on_read (write buckets), overwrite, commit and remerge; the write context
they all take (context) and the started writes (pending).

Layers (pyproject.toml, docs/DESIGN.md §3): may import services and every
floor below; not read.
"""

"""Step 4-5 of the write path: the workload profile and Hudi's UpsertPartitioner (docs/DESIGN.md §2).

Layers (pyproject.toml, docs/DESIGN.md §3): may import layout and every
floor below; not index or concurrency.
"""

from upsertlake.partitioner.bucket_partitioner import BucketPartitioner
from upsertlake.partitioner.profile import PartitionWorkload, WorkloadProfile
from upsertlake.partitioner.record_size import (
    ESTIMATE_ACTIONS_0_14,
    ESTIMATE_ACTIONS_0_15,
    average_record_size,
)
from upsertlake.partitioner.upsert_partitioner import (
    Bucket,
    BucketType,
    PartitionerConfig,
    SmallFile,
    UpsertPartitioner,
    md5_key_hash,
    new_file_id,
)

__all__ = [
    "ESTIMATE_ACTIONS_0_14",
    "ESTIMATE_ACTIONS_0_15",
    "Bucket",
    "BucketPartitioner",
    "BucketType",
    "PartitionWorkload",
    "PartitionerConfig",
    "SmallFile",
    "UpsertPartitioner",
    "WorkloadProfile",
    "average_record_size",
    "md5_key_hash",
    "new_file_id",
]

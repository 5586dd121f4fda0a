"""Write operations, as Hudi's WriteOperationType names them in commit metadata.

One type that knows what sets each operation apart (whether it looks keys up, replaces file
groups, how it deduplicates and merges), so the index, the engine and Spark ask it instead of
comparing strings.
"""

from __future__ import annotations

from upsertlake.config import options as opt
from upsertlake.config.option import Option
from upsertlake.errors import ConfigError
from upsertlake.timeline.instant import Action
from upsertlake.util.spelled import Spelled


class Operation(str, Spelled):
    UPSERT = "upsert"
    INSERT = "insert"
    BULK_INSERT = "bulk_insert"
    DELETE = "delete"
    INSERT_OVERWRITE = "insert_overwrite"
    INSERT_OVERWRITE_TABLE = "insert_overwrite_table"
    DELETE_PARTITION = "delete_partition"

    @classmethod
    def of(cls, value: str | Operation, allowed: tuple[Operation, ...] | None = None) -> Operation:
        """The operation named `value` (any case), one of `allowed` (default: every one)."""
        allowed = allowed or tuple(cls)
        name = value.value if isinstance(value, Operation) else str(value).lower()
        found = next((op for op in allowed if op.value == name), None)
        if found is None:
            raise ConfigError(f"unknown operation {value!r}; use one of {', '.join(op.value for op in allowed)}")
        return found

    @property
    def type_name(self) -> str:
        """The commit metadata's `operationType` (Hudi's enum name)."""
        return self.value.upper()

    @property
    def overwrites(self) -> bool:
        """Replaces file groups instead of merging into them: a replacecommit, whose new records
        go to new file groups and take no small files."""
        return self in _OVERWRITES

    @property
    def replaces_table(self) -> bool:
        """Replaces every partition, not only those it writes to."""
        return self is Operation.INSERT_OVERWRITE_TABLE

    @property
    def action(self) -> Action:
        """The timeline action of a copy-on-write write (a merge-on-read table's non-replacing
        writes are deltacommits)."""
        return Action.REPLACE_COMMIT if self.overwrites else Action.COMMIT

    @property
    def looks_up(self) -> bool:
        """Tags records with their stored location through the index (Hudi: insert-only
        operations skip the lookup; an overwrite's records all go to new file groups)."""
        return self in (Operation.UPSERT, Operation.DELETE)

    @property
    def writes_records(self) -> bool:
        """Takes a batch of records (delete_partition takes partition names)."""
        return self is not Operation.DELETE_PARTITION

    @property
    def appends(self) -> bool:
        """Writes its records beside the stored ones instead of merging them by key (inserts
        create duplicates of existing keys, as in Hudi)."""
        return self in (Operation.INSERT, Operation.BULK_INSERT, Operation.INSERT_OVERWRITE,
                        Operation.INSERT_OVERWRITE_TABLE)

    @property
    def sized_by_batch(self) -> bool:
        """Cuts its files by the batch's own encoded size (bulk insert's layout), not by the
        partitioner's record-size estimate and small files."""
        return self is Operation.BULK_INSERT

    @property
    def combine_option(self) -> Option[bool]:
        """The option that says whether the batch is deduplicated by key first."""
        if self is Operation.UPSERT:
            return opt.COMBINE_BEFORE_UPSERT
        if self is Operation.DELETE:
            return opt.COMBINE_BEFORE_DELETE
        return opt.COMBINE_BEFORE_INSERT


_OVERWRITES = frozenset({Operation.INSERT_OVERWRITE, Operation.INSERT_OVERWRITE_TABLE, Operation.DELETE_PARTITION})
# The commit metadata's operationType of the table services (WriteOperationType's names): they take
# no batch of records, so they are no Operation.
COMPACT_TYPE = "COMPACT"
CLUSTER_TYPE = "CLUSTER"
CLEAN_TYPE = "CLEAN"
# What a Spark data source write and the command line take (the replace actions have their own calls).
BATCH_OPERATIONS = (Operation.UPSERT, Operation.INSERT, Operation.BULK_INSERT, Operation.DELETE)
# What a write client's batch writes take.
RECORD_OPERATIONS = (*BATCH_OPERATIONS, Operation.INSERT_OVERWRITE, Operation.INSERT_OVERWRITE_TABLE)

"""upsertlake: Hudi-compatible upserts (copy-on-write and merge-on-read tables) for Python and PySpark."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from upsertlake.errors import (
    BatchTooLargeError,
    CleanedInstantError,
    ConfigError,
    CorruptTableError,
    FilterError,
    HFileError,
    InstantTimeError,
    LockLostError,
    LockTimeoutError,
    MergeOnReadError,
    MissingFileError,
    PartitionNotFoundError,
    SchemaError,
    ServiceError,
    StorageError,
    TableExistsError,
    TableNotFoundError,
    UnsupportedLogBlockError,
    UnsupportedSchemeError,
    UnsupportedTableError,
    UpsertlakeError,
    UpsertlakeWarning,
    WriteConflictError,
    WriteInProgressError,
)
from upsertlake.util.memory_pool import choose_memory_pool

__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it)
choose_memory_pool()  # jemalloc where pyarrow's mimalloc would wait on huge pages (see the module)

if TYPE_CHECKING:
    from upsertlake.engine.write_client import WriteClient
    from upsertlake.engine.write_plan import Progress
    from upsertlake.engine.write_result import WriteResult
    from upsertlake.table.open import create_table, open_table, upgrade_table
    from upsertlake.table.table import Table
    from upsertlake.timeline.instant import Action, Instant, State

# The API objects load on first use, so importing one submodule does not import the engine.
_LAZY = {
    "Table": "upsertlake.table.table",
    "create_table": "upsertlake.table.open",
    "open_table": "upsertlake.table.open",
    "upgrade_table": "upsertlake.table.open",
    "Progress": "upsertlake.engine.write_plan",
    "WriteClient": "upsertlake.engine.write_client",
    "WriteResult": "upsertlake.engine.write_result",
    "Action": "upsertlake.timeline.instant",
    "Instant": "upsertlake.timeline.instant",
    "State": "upsertlake.timeline.instant",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'upsertlake' has no attribute {name!r}")


__all__ = [
    "Action",
    "BatchTooLargeError",
    "CleanedInstantError",
    "ConfigError",
    "CorruptTableError",
    "FilterError",
    "HFileError",
    "Instant",
    "InstantTimeError",
    "LockLostError",
    "LockTimeoutError",
    "MergeOnReadError",
    "MissingFileError",
    "PartitionNotFoundError",
    "Progress",
    "SchemaError",
    "ServiceError",
    "State",
    "StorageError",
    "Table",
    "TableExistsError",
    "TableNotFoundError",
    "UnsupportedLogBlockError",
    "UnsupportedSchemeError",
    "UnsupportedTableError",
    "UpsertlakeError",
    "UpsertlakeWarning",
    "WriteClient",
    "WriteConflictError",
    "WriteInProgressError",
    "WriteResult",
    "create_table",
    "open_table",
    "upgrade_table",
]

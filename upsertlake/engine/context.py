"""The write context: what every step of a write reads, as one frozen value.

Hudi's action executors take `(context, config, table, instantTime)`; ours take a `WriteContext`
and return what they produced. Only the write client holds a context and replaces it (when the
table's config changed under the lock: an upgrade, a first schema); no step mutates another
object's state. See docs/DESIGN.md, "The write path".
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from upsertlake.concurrency.heartbeat import HeartbeatPolicy
from upsertlake.concurrency.lock import TableLock, make_lock
from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.config.enums import ConcurrencyMode
from upsertlake.config.table_config import TableConfig
from upsertlake.storage import Storage


@dataclass(frozen=True)
class WriteContext:
    """One table's storage and config, the write options, the table lock, the heartbeat policy
    and the concurrency mode."""

    storage: Storage
    table_config: TableConfig
    options: Config
    lock: TableLock
    heartbeats: HeartbeatPolicy
    mode: ConcurrencyMode

    @classmethod
    def open(cls, storage: Storage, table_config: TableConfig, options: Config) -> WriteContext:
        return cls(storage, table_config, options, make_lock(storage, options), HeartbeatPolicy.of(options),
                   options.get(opt.WRITE_CONCURRENCY_MODE))

    @property
    def optimistic(self) -> bool:
        return self.mode is ConcurrencyMode.OPTIMISTIC

    def with_table(self, table_config: TableConfig) -> WriteContext:
        return self if table_config is self.table_config else replace(self, table_config=table_config)

    def resolve(self, options: dict[str, Any] | None) -> Config:
        """These options with a call's on top; a call cannot change the table version."""
        cfg = self.options.with_overrides(options)
        if options and cfg.is_set(opt.WRITE_TABLE_VERSION):
            self.table_config.check_write_version(cfg.get(opt.WRITE_TABLE_VERSION))
        return cfg

"""Exactly-once streaming writes, Hudi's way: each commit of a stream's micro-batch records the
batch id in its extraMetadata, and a batch whose id is at most the last one recorded for its
stream is not written again.

The key and its value are those of Hudi's Spark streaming sink (`HoodieStreamingSink`,
`CommitUtils.getCheckpointValueAsString`): `_hudi_streaming_sink_checkpoint` holds the JSON map
`{identifier: "batchId"}` (the batch id a string, as Jackson writes a `Map<String, String>`), so a
table Hudi's sink wrote goes on with ours where it stopped, and the other way round. The last batch
id of an identifier is the one of the newest completed write carrying it (`CommitUtils.
getValidCheckpointForCurrentWriter`), looked up in the active timeline and, beyond Hudi, in the
archived one: a stream idle while other writers' commits got its last one archived still finds it.

One place for the sink, the `foreachBatch` hook and `upsertlake ingest --continuous`
(docs/DESIGN.md §9).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.config.enums import ConcurrencyMode
from upsertlake.errors import ConfigError, CorruptTableError
from upsertlake.timeline.active import Timeline

log = logging.getLogger(__name__)

SINK_CHECKPOINT_KEY = "_hudi_streaming_sink_checkpoint"


@dataclass(frozen=True)
class StreamBatch:
    """One micro-batch of a stream: the stream's identifier and Spark's batch id."""

    identifier: str
    batch_id: int

    @classmethod
    def of(cls, cfg: Config, batch_id: int) -> StreamBatch:
        """The batch under the identifier the options name (Hudi's default for a single writer).
        Under optimistic concurrency the identifier must be given, as Hudi requires: two streams
        sharing the default would each skip the other's batches."""
        if batch_id < 0:
            raise ConfigError(f"batch_id={batch_id}: a stream's batch ids start at 0")
        key = opt.STREAMING_CHECKPOINT_IDENTIFIER
        if cfg.get(opt.WRITE_CONCURRENCY_MODE) is not ConcurrencyMode.SINGLE_WRITER and not cfg.is_set(key):
            raise ConfigError(
                f"a streaming write under {opt.WRITE_CONCURRENCY_MODE.key}={cfg.get(opt.WRITE_CONCURRENCY_MODE)} "
                f"needs {key.key}: each stream writing the table names its own"
            )
        identifier = cfg.get(key).strip()
        if not identifier:
            raise ConfigError(f"{key.key} is empty: name the stream")
        return cls(identifier, batch_id)

    def metadata(self) -> dict[str, str]:
        """The commit's extraMetadata entry, byte for byte as Hudi's sink writes it."""
        return {SINK_CHECKPOINT_KEY: json.dumps({self.identifier: str(self.batch_id)}, separators=(",", ":"))}

    def committed(self, timeline: Timeline) -> bool:
        """Whether this batch (or a later one of its stream) is already in the table; logged once
        when so, since the stream then moves on without writing it."""
        last = last_batch_id(timeline, self.identifier)
        if last is None or self.batch_id > last:
            return False
        log.warning("batch %d of stream %r is already in the table (its last committed batch is %d): skipped",
                    self.batch_id, self.identifier, last)
        return True


def last_batch_id(timeline: Timeline, identifier: str) -> int | None:
    """The batch id the newest completed write recorded for `identifier` (active or archived);
    None when no commit did."""
    done = timeline.completed_writes()
    for seen, inst in enumerate(reversed(done)):
        if seen == 1:  # not the newest commit: read the others at once (an object store's GETs)
            timeline.prefetch_documents(done)
        value = timeline.commit_metadata(inst).extra_metadata.get(SINK_CHECKPOINT_KEY)
        if not value:
            continue
        batch = _batch_of(value, identifier, inst.time)
        if batch is not None:
            return batch
    return None


def _batch_of(value: str, identifier: str, instant: str) -> int | None:
    """The batch id of `identifier` in one commit's checkpoint value (None: another stream's)."""
    try:
        recorded = json.loads(value)
        if not isinstance(recorded, dict):
            raise ValueError("not a JSON object")
        batch = recorded.get(identifier)
        return None if batch is None else int(batch)
    except (ValueError, TypeError) as exc:
        raise CorruptTableError(
            f"commit {instant}: {SINK_CHECKPOINT_KEY}={value!r} is not a map of stream identifiers to batch ids ({exc})"
        ) from exc

"""The active timeline: the instants in `.hoodie/`, read as one snapshot, and its state changes.

An instant's state is the most advanced of its files present (a completed instant keeps its
`.requested` and `.inflight` siblings). Every state change creates a new file with
write-if-absent, so two writers can never both complete the same instant, and nothing is ever
overwritten.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from upsertlake.errors import CorruptTableError, UpsertlakeError
from upsertlake.storage import Storage
from upsertlake.timeline.archived import load_archived
from upsertlake.timeline.commit_metadata import CommitMetadata
from upsertlake.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from upsertlake.timeline.instant_time import next_instant_time

METAFOLDER = ".hoodie"


@dataclass(frozen=True)
class Timeline:
    """An immutable snapshot of the timeline, instants sorted by time: the active ones and the
    archived ones (completed, their documents in `archived`), so reads reach back past archival."""

    storage: Storage
    instants: tuple[Instant, ...]
    archived: Mapping[Instant, bytes] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def load(cls, storage: Storage) -> Timeline:
        latest: dict[tuple[str, Action], Instant] = {}
        for entry in storage.list(METAFOLDER):
            if entry.is_dir:
                continue
            inst = Instant.from_file_name(entry.name)
            if inst is None:
                continue
            key = (inst.time, inst.action)
            seen = latest.get(key)
            if seen is None or inst.state.rank > seen.state.rank:
                latest[key] = inst
        archived = load_archived(storage)
        for inst in archived:
            latest.setdefault((inst.time, inst.action), inst)
        return cls(storage, tuple(sorted(latest.values())), archived)

    # -- queries -----------------------------------------------------------------------------
    def filter(
        self, actions: Iterable[Action] = WRITE_ACTIONS, states: Iterable[State] | None = None
    ) -> list[Instant]:
        acts, sts = set(actions), set(states) if states is not None else None
        return [i for i in self.instants if i.action in acts and (sts is None or i.state in sts)]

    def completed_writes(self) -> list[Instant]:
        """Completed commits and replacecommits: the instants whose files readers see."""
        return self.filter(WRITE_ACTIONS, [State.COMPLETED])

    def pending_writes(self) -> list[Instant]:
        return self.filter(WRITE_ACTIONS, [State.REQUESTED, State.INFLIGHT])

    def latest_completed_write(self) -> Instant | None:
        done = self.completed_writes()
        return done[-1] if done else None

    def last_time(self) -> str | None:
        return max((i.time for i in self.instants), default=None)

    def get(self, time: str, action: Action | None = None) -> Instant | None:
        for inst in self.instants:
            if inst.time == time and (action is None or inst.action is action):
                return inst
        return None

    def commit_metadata(self, instant: Instant) -> CommitMetadata:
        """The metadata of a completed commit or replacecommit (cached: completed files never change)."""
        if not instant.is_completed:
            raise UpsertlakeError(f"instant {instant.time} is not completed")
        if instant in self.archived:
            return CommitMetadata.from_json_bytes(self.archived[instant], source=f"archived {instant.time}")
        return _read_commit_metadata(self.storage, f"{METAFOLDER}/{instant.file_name()}")

    def document(self, instant: Instant) -> bytes:
        """The bytes of an instant's file in its state (archived instants: their completed file)."""
        if instant in self.archived:
            return self.archived[instant]
        return self.storage.read_bytes(f"{METAFOLDER}/{instant.file_name()}")

    def active(self) -> list[Instant]:
        """The instants still in `.hoodie/` (not archived)."""
        return [i for i in self.instants if i not in self.archived]

    def latest_schema(self) -> str | None:
        """The Avro schema JSON of the newest completed write that recorded one."""
        for inst in reversed(self.completed_writes()):
            schema = self.commit_metadata(inst).schema
            if schema:
                return schema
        return None


@lru_cache(maxsize=4096)
def _read_commit_metadata_cached(base: str, rel: str, size: int, mtime_ns: int) -> CommitMetadata:
    storage = Storage(base)
    return CommitMetadata.from_json_bytes(storage.read_bytes(rel), source=f"{base}/{rel}")


def _read_commit_metadata(storage: Storage, rel: str) -> CommitMetadata:
    # Keyed by size and mtime too, so a table deleted and re-created at the same path is re-read.
    info = storage.fs.get_file_info(storage.full_path(rel))
    if info.size is None:
        raise CorruptTableError(f"commit file missing: {storage.full_path(rel)}")
    return _read_commit_metadata_cached(storage.base, rel, info.size, info.mtime_ns or 0)


# -- state changes ---------------------------------------------------------------------------
def create_requested(storage: Storage, action: Action, content: bytes = b"") -> Instant:
    """Create `<t>.<action>.requested` with a fresh instant time later than any on the timeline.

    Call under the table lock: the time is chosen from the timeline as listed now, and
    write-if-absent guards against a writer that does not hold the lock.
    """
    last = Timeline.load(storage).last_time()
    while True:
        instant = Instant(next_instant_time(last), action, State.REQUESTED)
        if storage.write_if_absent(f"{METAFOLDER}/{instant.file_name()}", content):
            return instant
        last = instant.time


def transition(storage: Storage, instant: Instant, to: State, content: bytes = b"") -> Instant:
    """Move an instant to `to` by creating its file; refuses if that file already exists."""
    target = instant.with_state(to)
    if to.rank <= instant.state.rank:
        raise UpsertlakeError(f"cannot move instant {instant.time} from {instant.state} to {to}")
    if not storage.write_if_absent(f"{METAFOLDER}/{target.file_name()}", content):
        raise CorruptTableError(f"instant file already exists: {target.file_name()}")
    return target


def delete_instant_files(storage: Storage, instant: Instant) -> None:
    """Remove an instant's files, most advanced state first, so a crash midway leaves it pending;
    then the temporary files of a writer that died while creating one (write_if_absent's)."""
    for state in (State.COMPLETED, State.INFLIGHT, State.REQUESTED):
        if state.rank <= instant.state.rank:
            storage.delete(f"{METAFOLDER}/{instant.with_state(state).file_name()}")
    for entry in storage.list(METAFOLDER):
        if entry.name.startswith(f".{instant.time}.") and entry.name.endswith(".tmp"):
            storage.delete(entry.path)

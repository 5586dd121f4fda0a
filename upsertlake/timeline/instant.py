"""Instants: one action at one time in one state, and the timeline file names that encode them.

`Instant.file_name()` and `Instant.from_file_name()` are exact inverses over the names Hudi's
timeline layout 1 (table version 6) uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from upsertlake.errors import CorruptTableError


class Action(str, Enum):
    COMMIT = "commit"
    DELTA_COMMIT = "deltacommit"
    REPLACE_COMMIT = "replacecommit"
    CLEAN = "clean"
    ROLLBACK = "rollback"
    SAVEPOINT = "savepoint"
    RESTORE = "restore"
    COMPACTION = "compaction"
    INDEXING = "indexing"


class State(str, Enum):
    REQUESTED = "requested"
    INFLIGHT = "inflight"
    COMPLETED = "completed"

    @property
    def rank(self) -> int:
        return _STATE_RANK[self]


_STATE_RANK = {State.REQUESTED: 0, State.INFLIGHT: 1, State.COMPLETED: 2}

# Actions whose completed instants write data files readers must see.
WRITE_ACTIONS = frozenset({Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT})

_NAME = re.compile(r"^(\d{14}|\d{17})\.([a-z]+)(?:\.(requested|inflight))?$")


@dataclass(frozen=True, order=True)
class Instant:
    """A timeline instant; ordered by (time, action, state)."""

    time: str
    action: Action
    state: State

    def file_name(self) -> str:
        """The file name of this instant in `.hoodie/` (layout 1)."""
        if self.state is State.COMPLETED:
            return f"{self.time}.{self.action.value}"
        if self.action is Action.COMMIT and self.state is State.INFLIGHT:
            return f"{self.time}.inflight"  # Hudi's one irregular name
        return f"{self.time}.{self.action.value}.{self.state.value}"

    @classmethod
    def from_file_name(cls, name: str) -> Instant | None:
        """Parse a timeline file name; None for files that are not instants."""
        m = _NAME.match(name)
        if m is None:
            return None
        time, action, state = m.groups()
        if action == "inflight" and state is None:
            return cls(time, Action.COMMIT, State.INFLIGHT)
        try:
            act = Action(action)
        except ValueError:
            return None
        if act is Action.COMMIT and state == "inflight":
            return None  # "<ts>.commit.inflight" is not a name Hudi writes
        return cls(time, act, State(state) if state else State.COMPLETED)

    def with_state(self, state: State) -> Instant:
        return Instant(self.time, self.action, state)

    @property
    def is_completed(self) -> bool:
        return self.state is State.COMPLETED


def parse_instant_file_name(name: str) -> Instant:
    """Like `Instant.from_file_name` but raises for a name that is not an instant."""
    inst = Instant.from_file_name(name)
    if inst is None:
        raise CorruptTableError(f"not a timeline instant file name: {name!r}")
    return inst

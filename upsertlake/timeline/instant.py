"""Instants: one action at one time in one state, and the timeline file names that encode them.

`Instant.file_name(layout)` and `Instant.from_file_name(name, layout)` are exact inverses over the
names of Hudi's timeline layouts: 1 (table version 6, in `.hoodie/`) and 2 (table version 8, in
`.hoodie/timeline/`), where a completed instant is `<requested>_<completion>.<action>` and a pending
clustering replacecommit is `<t>.clustering.requested` / `<t>.clustering.inflight`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum


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
_COMPLETED_V2 = re.compile(r"^(\d{17})_(\d{17})\.([a-z]+)$")
CLUSTERING = "clustering"  # layout 2's action name of a pending clustering replacecommit


@dataclass(frozen=True, order=True)
class Instant:
    """A timeline instant; ordered and compared by (requested time, action, state).

    `completion` is the completion time layout 2 records in a completed instant's file name
    (None in layout 1, where instants complete in the order of their requested times);
    `clustering` marks a replacecommit that clusters (its pending files are named so in layout 2).
    """

    time: str
    action: Action
    state: State
    completion: str | None = field(default=None, compare=False)
    clustering: bool = field(default=False, compare=False)

    def file_name(self, layout: int = 1) -> str:
        """The file name of this instant in its timeline folder."""
        if self.state is State.COMPLETED:
            if layout == 2:
                if self.completion is None:
                    raise ValueError(f"completed instant {self.time} has no completion time (layout 2)")
                return f"{self.time}_{self.completion}.{self.action.value}"
            return f"{self.time}.{self.action.value}"
        if self.action is Action.COMMIT and self.state is State.INFLIGHT:
            return f"{self.time}.inflight"  # Hudi's one irregular name
        action = CLUSTERING if layout == 2 and self.clustering else self.action.value
        return f"{self.time}.{action}.{self.state.value}"

    @classmethod
    def from_file_name(cls, name: str, layout: int = 1) -> Instant | None:
        """Parse a timeline file name; None for files that are not instants of the layout."""
        if layout == 2:
            done = _COMPLETED_V2.match(name)
            if done is not None:
                act = _action(done.group(3))
                return None if act is None else cls(done.group(1), act, State.COMPLETED, completion=done.group(2))
        m = _NAME.match(name)
        if m is None:
            return None
        time, action, state = m.groups()
        if action == "inflight" and state is None:
            return cls(time, Action.COMMIT, State.INFLIGHT)
        if layout == 2 and action == CLUSTERING and state is not None:
            return cls(time, Action.REPLACE_COMMIT, State(state), clustering=True)
        if layout == 2 and state is None:
            return None  # a completed instant without its completion time is not a layout 2 name
        act = _action(action)
        if act is None:
            return None
        if act is Action.COMMIT and state == "inflight":
            return None  # "<ts>.commit.inflight" is not a name Hudi writes
        return cls(time, act, State(state) if state else State.COMPLETED)

    def with_state(self, state: State, completion: str | None = None) -> Instant:
        return Instant(self.time, self.action, state, completion, self.clustering)

    @property
    def is_completed(self) -> bool:
        return self.state is State.COMPLETED

    @property
    def completed_at(self) -> str:
        """When the instant completed: its completion time in layout 2, its time in layout 1."""
        return self.completion or self.time


def _action(name: str) -> Action | None:
    try:
        return Action(name)
    except ValueError:
        return None

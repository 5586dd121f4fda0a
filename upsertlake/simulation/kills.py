"""Killing a simulated writer at a random storage write: kill -9 lands between any two of the
writes an attempt makes (its data files, markers, timeline transitions, the metadata table's log
files, compaction base files and timeline, hoodie.properties), so every state storage can be left
in is reachable, also the short steps a random delay seldom hits (a metadata compaction).

Storage is the only thing a kill leaves behind: killing before the n-th write is every kill that
lands after the (n-1)-th. Heartbeats are not counted (their thread beats on its own clock). The
writer process installs the switch once; each attempt arms it at a write number (of all its
writes, or of the metadata table's alone, which are few) or leaves it off.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from upsertlake.concurrency.heartbeat import HEARTBEAT_FOLDER
from upsertlake.metadata.partitions import FOLDER as METADATA_FOLDER
from upsertlake.storage import Storage

WRITES = ("write_bytes", "write_if_absent", "put_if", "delete", "delete_dir", "open_output")
METADATA_TIMELINE = f"{METADATA_FOLDER}/.hoodie/timeline/"


class KillSwitch:
    """Counts this process's storage writes and SIGKILLs it at the armed one, first journaling
    where (`kills-<name>.txt`); journals each completed metadata-table compaction it wrote
    (`metadata-compactions-<name>.txt`)."""

    def __init__(self, root: str, journal: Path, name: str) -> None:
        self.root = root.rstrip("/") + "/"  # the data table's full path or URI
        self.kills = journal / f"kills-{name}.txt"
        self.compactions = journal / f"metadata-compactions-{name}.txt"
        self.at: int | None = None
        self.metadata_only = False  # count only the writes into the metadata table
        self.after = False  # kill just after the armed write instead of just before it
        self.count = 0
        self.synced = False  # a metadata instant completed since the switch was armed
        self._lock = threading.Lock()

    def install(self) -> None:
        """Wrap Storage's writing verbs (in this process: the simulator's writers are their own)."""
        for verb in WRITES:
            setattr(Storage, verb, self._wrapped(getattr(Storage, verb)))

    def arm(self, at: int | None, metadata_only: bool = False, after: bool = False) -> None:
        """Kill just before the `at`-th write from now (or just `after` it), of all writes or of
        those into the metadata table alone; None: do not kill. Counting the metadata table's
        writes, a kill armed past the writes of its first completed instant lands just after
        them: its deltacommit (and compaction) completed, the data instant not yet."""
        with self._lock:
            self.at, self.metadata_only, self.after, self.count, self.synced = at, metadata_only, after, 0, False

    def overdue(self) -> None:
        """Kill now if armed at a write this attempt did not reach (the attempt has written all
        it writes: the kill lands after it)."""
        if self.at is not None and self.count < self.at:
            self._kill("after the last write")

    def writes(self) -> int:
        """The writes counted since the last `arm`."""
        return self.count

    def _wrapped(self, method: Callable[..., Any]) -> Callable[..., Any]:
        verb = method.__name__

        @functools.wraps(method)
        def write(storage: Storage, rel: str, *args: Any, **kwargs: Any) -> Any:
            where = storage.full_path(rel).removeprefix(self.root)
            due = None if where.startswith(HEARTBEAT_FOLDER) else self._count(where, verb)
            if due == "synced":
                self._kill(f"after {METADATA_FOLDER}/ completed an instant, before {verb} {where}")
            elif due == "at" and not self.after:
                self._kill(f"{verb} {where}")
            out = method(storage, rel, *args, **kwargs)
            if where.startswith(METADATA_TIMELINE) and where.endswith(".commit") and verb != "delete":
                _journal(self.compactions, where)  # a metadata compaction completed (its commit)
            if due == "at":
                self._kill(f"after {verb} {where}")
            return out

        return write

    def _count(self, where: str, verb: str) -> str | None:
        """Count a write; "at": it is the armed one; "synced": counting the metadata table's
        writes, this is the first other write after one of its instants completed, the armed one
        not reached; else None."""
        inside = where.startswith(f"{METADATA_FOLDER}/")
        with self._lock:
            if self.metadata_only and not inside:
                return "synced" if self.at is not None and self.synced and self.count < self.at else None
            self.count += 1
            self.synced |= inside and _completes(where, verb)
            return "at" if self.count == self.at else None

    def _kill(self, what: str) -> None:
        _journal(self.kills, what)
        os.kill(os.getpid(), signal.SIGKILL)


def _completes(where: str, verb: str) -> bool:
    """Whether writing `where` completes an instant of the metadata table (timeline layout 2
    names a completed instant `<time>_<completion>.<action>`)."""
    name = where.removeprefix(METADATA_TIMELINE)
    return where.startswith(METADATA_TIMELINE) and verb != "delete" and "_" in name.partition(".")[0]


def _journal(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())

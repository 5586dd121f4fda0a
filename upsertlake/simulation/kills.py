"""Killing a simulated writer at a random storage write: kill -9 lands between any two of the
writes an attempt makes (its data files, markers, timeline transitions, the metadata table's log
files, compaction base files and timeline, hoodie.properties), so every state storage can be left
in is reachable, also the short steps a random delay seldom hits (a metadata compaction).

Storage is the only thing a kill leaves behind: killing before the n-th write is every kill that
lands after the (n-1)-th. Heartbeats are not counted (their thread beats on its own clock). The
writer process installs the switch once; each attempt arms it at a write number (of all its
writes, or of those into one folder such as the metadata table, which makes few of them) or
leaves it off.
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
    """Counts this process's storage writes and SIGKILLs it just before the armed one, first
    journaling the path it was about to write (`kills-<name>.txt`); journals each completed
    metadata-table compaction it wrote (`metadata-compactions-<name>.txt`)."""

    def __init__(self, root: str, journal: Path, name: str) -> None:
        self.root = root.rstrip("/") + "/"  # the data table's full path or URI
        self.kills = journal / f"kills-{name}.txt"
        self.compactions = journal / f"metadata-compactions-{name}.txt"
        self.inside = ""  # count only the writes below this table-relative folder
        self.count = 0
        self.at: int | None = None
        self._lock = threading.Lock()

    def install(self) -> None:
        """Wrap Storage's writing verbs (in this process: the simulator's writers are their own)."""
        for verb in WRITES:
            setattr(Storage, verb, self._wrapped(getattr(Storage, verb)))

    def arm(self, at: int | None, inside: str = "") -> None:
        """Kill before the `at`-th write from now below the folder `inside` (the table-relative
        path of the metadata table, say; "": any write); None: do not kill."""
        with self._lock:
            self.count, self.at, self.inside = 0, at, inside

    def overdue(self) -> None:
        """Kill now if armed at a write this attempt did not reach (the attempt has written all
        it writes: the kill lands after it)."""
        if self.at is not None and self.count < self.at:
            _journal(self.kills, "after the last write")
            os.kill(os.getpid(), signal.SIGKILL)

    def writes(self) -> int:
        """The writes counted since the last `arm` (those below its folder)."""
        return self.count

    def _wrapped(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def write(storage: Storage, rel: str, *args: Any, **kwargs: Any) -> Any:
            where = storage.full_path(rel).removeprefix(self.root)
            if not where.startswith(HEARTBEAT_FOLDER):
                self._count(where, method.__name__)
            out = method(storage, rel, *args, **kwargs)
            if where.startswith(METADATA_TIMELINE) and where.endswith(".commit") and method.__name__ != "delete":
                _journal(self.compactions, where)  # a metadata compaction completed (its commit)
            return out

        return write

    def _count(self, where: str, verb: str) -> None:
        with self._lock:
            if not where.startswith(self.inside):
                return
            self.count += 1
            due = self.at is not None and self.count >= self.at
        if due:
            _journal(self.kills, f"{verb} {where}")
            os.kill(os.getpid(), signal.SIGKILL)


def _journal(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())

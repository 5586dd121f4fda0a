"""Progress on a terminal: one line per stage of a command's work with its counts (rows, file
groups, bytes) and time, a bar while the stage counts units of work, drawn by rich on stderr.
Nothing is drawn when stderr is not a terminal, or with `--quiet` (or `--json`): scripts get the
result alone. The same stages are logged at INFO (`-v`) by the `upsertlake.progress` logger."""

from __future__ import annotations

import argparse
import logging
import sys
from types import TracebackType
from typing import TYPE_CHECKING

from upsertlake.engine.write_plan import Progress

if TYPE_CHECKING:
    from rich.progress import Progress as Bars
    from rich.progress import TaskID

log = logging.getLogger("upsertlake.progress")

UNITS = {"write": "file groups"}  # what a stage's total counts


def drawing(args: argparse.Namespace) -> bool:
    """Whether this command draws progress: on a terminal, unless told to be quiet."""
    quiet = getattr(args, "quiet", False) or getattr(args, "no_progress", False) or getattr(args, "json", False)
    return not quiet and sys.stderr.isatty()


class StageBars(Progress):
    """A write's stages as rich progress lines on stderr; `counts` adds what is known of a stage
    before it runs (e.g. the input rows of `dedup`). A context manager: the display ends on exit."""

    def __init__(self, draw: bool, counts: dict[str, str] | None = None) -> None:
        self.counts = dict(counts or {})
        self._bars: Bars | None = None
        self._tasks: dict[str, TaskID] = {}
        if draw:
            from rich.console import Console
            from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bars

            self._bars = Bars(TextColumn("  {task.description:<9}"), BarColumn(bar_width=30),
                              TextColumn("{task.fields[counts]}"), TimeElapsedColumn(),
                              console=Console(stderr=True), transient=False)

    def __enter__(self) -> StageBars:
        if self._bars is not None:
            self._bars.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._bars is not None:
            self._bars.stop()

    def started(self, stage: str, total: int = 0) -> None:
        if self._bars is None:
            return
        counts = f"0/{total:,} {UNITS.get(stage, 'units')}" if total else self.counts.get(stage, "")
        self._tasks[stage] = self._bars.add_task(stage, total=total or None, counts=counts)

    def advanced(self, stage: str, done: int) -> None:
        if self._bars is None or stage not in self._tasks:
            return
        task = self._tasks[stage]
        total = self._bars.tasks[task].total
        self._bars.update(task, completed=done, counts=f"{done:,}/{int(total or 0):,} {UNITS.get(stage, 'units')}")

    def ended(self, stage: str, seconds: float) -> None:
        if self._bars is None or stage not in self._tasks:
            return
        task = self._tasks.pop(stage)
        total = self._bars.tasks[task].total
        counts = f"{int(total):,} {UNITS.get(stage, 'units')}" if total else self.counts.get(stage, "")
        self._bars.update(task, total=total or 1, completed=total or 1, counts=counts)
        self._bars.stop_task(task)


def say(args: argparse.Namespace, line: str) -> None:
    """A progress line of a long command (ingest's stages and micro-batches): on stderr on a
    terminal, logged at INFO always."""
    log.info("%s", line)
    if drawing(args):
        print(line, file=sys.stderr, flush=True)

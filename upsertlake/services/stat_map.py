"""`StatMap`: how a service runs its file writer over the groups of a plan, one write stat each: in
process by default (`services.cluster`, `services.compaction`), as Spark tasks on Spark
(`upsertlake.spark.write.groups_on`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from upsertlake.timeline.commit_metadata import WriteStat

T = TypeVar("T")


class StatMap(Protocol):
    def __call__(self, fn: Callable[[T], WriteStat], items: list[T], /) -> list[WriteStat]: ...

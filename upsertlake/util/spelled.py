"""`Spelled`: an Enum whose members print as their values, the names Hudi spells (in options,
properties files, commit metadata and messages), not as `Class.MEMBER`."""

from __future__ import annotations

from enum import Enum


class Spelled(Enum):
    """An Enum that prints (str, format) as its value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

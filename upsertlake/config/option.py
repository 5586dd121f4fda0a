"""`Option`: one typed write option (Hudi's key, the type of its value, its default), and how
its value is parsed from what users and properties files give.

Its own room, apart from the declarations of every option (`upsertlake.config.options`) and their
resolution into a `Config` (`upsertlake.config.resolved`), which both build on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar, cast

from upsertlake.errors import ConfigError

T = TypeVar("T")

_TRUE = "true"
_FALSE = "false"


def option_list(value: str) -> list[str]:
    """The items of a comma-separated option value (field names, columns), stripped, empty items
    left out: "a, b,,c" -> ["a", "b", "c"]."""
    return [item.strip() for item in value.split(",") if item.strip()]


def _describe(value: object) -> str:
    return repr(value) if isinstance(value, str) else f"{value!r} ({type(value).__name__})"


@dataclass(frozen=True)
class Option(Generic[T]):
    """One write option: Hudi's key, the Python type of its value, its default and its doc.

    An option whose type is an Enum takes its members' values (Hudi's spellings), matched
    case-insensitively, and gives the member. `choices` lists the accepted values of a string
    option in their canonical case (codecs are lower-case); input is matched case-insensitively
    and returned in that case. `aliases` are other keys naming the same option (Hudi's deprecated
    alternatives, or a newer Hudi name). `minimum`/`maximum` bound a number, inclusive (the minimum
    excluded when `exclusive`): a size of 0 bytes or a negative count means nothing, and is refused
    by the option's name rather than acted on.
    """

    key: str
    type: type
    default: T
    doc: str
    choices: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive: bool = False

    def parse(self, raw: object) -> T:
        """The typed value of `raw`, given typed or in the string form Hudi properties use."""
        try:
            value = self._convert(raw)
        except (TypeError, ValueError):
            value = None
        if value is None or not self._in_range(value):
            raise ConfigError(
                f"invalid value {_describe(raw)} for {self.key}: expected {self._expected()}"
            )
        return cast(T, value)

    @property
    def values(self) -> tuple[str, ...]:
        """The accepted values of an enumerated option (none: any value of its type)."""
        if issubclass(self.type, Enum):
            return tuple(str(member.value) for member in self.type)
        return self.choices

    def _in_range(self, value: object) -> bool:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return True
        if self.minimum is not None and (value <= self.minimum if self.exclusive else value < self.minimum):
            return False
        return self.maximum is None or value <= self.maximum

    def to_string(self, value: object) -> str:
        """The string form Hudi would store in a properties file ("true", "125829120", ...)."""
        if isinstance(value, Enum):
            return str(value.value)
        if isinstance(value, bool):
            return _TRUE if value else _FALSE
        if isinstance(value, float):
            return repr(value)
        return str(value)

    def _expected(self) -> str:
        if self.values:
            return "one of " + ", ".join(self.values)
        if self.type is bool:
            return "a boolean (true or false)"
        kind = {int: "an integer", float: "a number"}.get(self.type)
        if kind is None:
            return "a string"
        bounds = [
            f"{'above' if self.exclusive else 'of at least'} {self.minimum:g}" if self.minimum is not None else "",
            f"at most {self.maximum:g}" if self.maximum is not None else "",
        ]
        return " ".join([kind, " and ".join(b for b in bounds if b)]).strip()

    def _convert(self, raw: object) -> Any:
        # Returns None for "not convertible" so that `parse` words every error the same way.
        if self.type is bool:
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, str) and raw.strip().lower() in (_TRUE, _FALSE):
                return raw.strip().lower() == _TRUE
            return None
        if self.type is int:
            if isinstance(raw, bool):
                return None
            if isinstance(raw, int):
                return raw
            if isinstance(raw, float):
                return int(raw) if raw.is_integer() else None
            if isinstance(raw, str):
                return int(raw.strip())
            return None
        if self.type is float:
            if isinstance(raw, bool):
                return None
            if isinstance(raw, (int, float)):
                return float(raw)
            if isinstance(raw, str):
                return float(raw.strip())
            return None
        if issubclass(self.type, Enum):
            if isinstance(raw, self.type):
                return raw
            if not isinstance(raw, str):
                return None
            by_value = {str(member.value).lower(): member for member in self.type}
            return by_value.get(raw.strip().lower())
        if not isinstance(raw, str):
            return None
        if self.choices:
            canonical = {choice.lower(): choice for choice in self.choices}
            return canonical.get(raw.strip().lower())
        return raw

"""The forms a person passes for a point in time, read by one parser: wherever a time is taken
(time travel's `as_of`, incremental `begin`/`end`, the command line's `--as-of/--since/--until`,
filters on date and timestamp columns) the same forms mean the same thing.

- a `datetime` (a pandas `Timestamp` too): aware ones in their zone, naive ones in local time,
  as Python's `datetime.now()` gives it;
- a `date`: its midnight, local time;
- an ISO-8601 string, `2026-12-06`, `2026-12-06 02:57:44`, `2026-12-06T02:57:44.5+01:00`, or with
  `Z`: naive (local time) unless it names its zone;
- `numpy.datetime64`: naive.

Instant times (`yyyyMMddHHmmss[SSS]`, the names of a table's instants, in its timeline zone) are
the timeline's own form: `upsertlake.timeline.instant_time` reads them and hands the other forms
here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timezone
from typing import Any, TypeAlias

FORMS = "a datetime or date (naive = local time), a pandas Timestamp, an ISO-8601 string such as " \
        "'2026-12-06 02:57:44' or '2026-12-06T02:57:44Z'"

# What the API's time parameters take (a pandas Timestamp is a datetime; numpy.datetime64 too).
TimeLike: TypeAlias = str | datetime | date


@dataclass(frozen=True)
class Parsed:
    """A time as passed: the datetime (naive or aware) and whether it was given to the second
    (an ISO string without fractions names its whole second, as a 14-digit instant time does)."""

    when: datetime
    whole_second: bool = False


def parse_time(value: Any) -> Parsed:
    """`value` in one of the forms above; ValueError naming the value and the forms otherwise."""
    if hasattr(value, "to_pydatetime"):  # pandas Timestamp (a naive one refuses astimezone)
        return Parsed(value.to_pydatetime())
    if isinstance(value, datetime):
        return Parsed(value)
    if isinstance(value, date):
        return Parsed(datetime.combine(value, time()))
    if type(value).__name__ == "datetime64":  # numpy, without importing it
        return Parsed(datetime.fromisoformat(str(value.astype("datetime64[us]"))))
    if isinstance(value, str):
        text = value.strip()
        iso = text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text
        try:
            when = datetime.fromisoformat(iso)
        except ValueError:
            pass
        else:
            has_time = len(text) > 10
            return Parsed(when, whole_second=has_time and when.microsecond == 0 and "." not in text and "," not in text)
    raise ValueError(f"{value!r} is not a time: give {FORMS}")


def as_aware(when: datetime) -> datetime:
    """`when` with its zone: a naive datetime is local time."""
    return when if when.tzinfo is not None else when.astimezone()


def zone_name(when: datetime) -> str:
    """How an error names a datetime's zone: `UTC`, `+01:00`, or `no zone`."""
    if when.tzinfo is None:
        return "no zone"
    if when.utcoffset() == timezone.utc.utcoffset(None):
        return "UTC"
    return when.tzname() or str(when.utcoffset())

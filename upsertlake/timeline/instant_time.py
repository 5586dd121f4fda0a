"""Instant times: `yyyyMMddHHmmssSSS` in the table's timeline zone, and the user-facing forms that
name one.

Hudi writes instant times as wall-clock times in `hoodie.table.timeline.timezone`: `UTC`, or
`LOCAL` (the writer's zone, Hudi's default; our new tables say UTC). Every conversion between a
datetime and an instant time goes through that zone. A naive datetime is local time, as Python's
`datetime.now()` gives it, so a user who passes `datetime.now()` lands on the instants they just saw.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone, tzinfo

from upsertlake.errors import InstantTimeError
from upsertlake.util.times import FORMS, parse_time

_DIGITS = re.compile(r"^\d{14}(\d{3})?$")
FORMAT = "%Y%m%d%H%M%S"
UTC = "UTC"


def zone_info(zone: str) -> tzinfo | None:
    """A `hoodie.table.timeline.timezone` value as Python's tzinfo: UTC, else None (local time)."""
    return timezone.utc if zone.strip().upper() == UTC else None


def format_instant_time(when: datetime, zone: str = UTC) -> str:
    """The 17-digit instant time of a datetime in the timeline zone (naive = local time)."""
    when = when.astimezone(zone_info(zone))
    return when.strftime(FORMAT) + f"{when.microsecond // 1000:03d}"


def now_instant_time(zone: str = UTC) -> str:
    return format_instant_time(datetime.now(timezone.utc), zone)


def parse_instant_time(time: str, zone: str = UTC) -> datetime:
    """The (aware) datetime an instant time of a timeline in `zone` stands for."""
    if not _DIGITS.match(time):
        raise ValueError(f"not an instant time (yyyyMMddHHmmss[SSS]): {time!r}")
    base = datetime.strptime(time[:14], FORMAT)
    millis = int(time[14:] or 0)
    wall = base.replace(microsecond=millis * 1000)
    tz = zone_info(zone)
    return wall.replace(tzinfo=tz) if tz is not None else wall.astimezone()


def normalize_instant(value: object, zone: str = UTC, *, end_of_second: bool = True) -> str:
    """A 17-digit instant time from a user's `as_of` / `begin` / `end`.

    An instant time (`yyyyMMddHHmmss[SSS]`) is taken as it is, in the timeline zone; any other
    time (`upsertlake.util.times`: a datetime, a date, a pandas Timestamp, an ISO-8601 string) is
    converted to the timeline zone, naive ones from local time. A time given to the second (14
    digits, or an ISO string without fractions) names the whole second, so `end_of_second` pads
    it with 999: every instant started within that second is included.
    """
    text = value.strip() if isinstance(value, str) else None
    if text and set(text) == {"0"}:  # Hudi's "from the start" ("000", "0"): before every instant
        return "0" * 17
    if text is not None and _DIGITS.match(text):
        if len(text) == 14:
            return text + ("999" if end_of_second else "000")
        return text
    try:
        parsed = parse_time(value)
    except ValueError:
        raise InstantTimeError(
            f"{value!r} is not a time: give an instant time (yyyyMMddHHmmss[SSS]), {FORMS}"
        ) from None
    instant = format_instant_time(parsed.when, zone)
    if parsed.whole_second:
        return instant[:14] + ("999" if end_of_second else "000")
    return instant


def next_instant_time(after: str | None, zone: str = UTC) -> str:
    """An instant time later than both the clock and `after` (the newest time on the timeline)."""
    now = now_instant_time(zone)
    if after is None or now > after:
        return now
    return format_instant_time(parse_instant_time(after, zone) + timedelta(milliseconds=1), zone)

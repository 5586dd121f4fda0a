"""Instant times: `yyyyMMddHHmmssSSS` in UTC, and the user-facing forms that name one."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

_DIGITS = re.compile(r"^\d{14}(\d{3})?$")
FORMAT = "%Y%m%d%H%M%S"


def format_instant_time(when: datetime) -> str:
    """The 17-digit instant time of a datetime (naive datetimes are taken as UTC)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    when = when.astimezone(timezone.utc)
    return when.strftime(FORMAT) + f"{when.microsecond // 1000:03d}"


def now_instant_time() -> str:
    return format_instant_time(datetime.now(timezone.utc))


def parse_instant_time(time: str) -> datetime:
    """The UTC datetime an instant time stands for."""
    if not _DIGITS.match(time):
        raise ValueError(f"not an instant time (yyyyMMddHHmmss[SSS]): {time!r}")
    base = datetime.strptime(time[:14], FORMAT).replace(tzinfo=timezone.utc)
    millis = int(time[14:] or 0)
    return base.replace(microsecond=millis * 1000)


def normalize_instant(value: str | datetime, *, end_of_second: bool = True) -> str:
    """A 17-digit instant time from a user's `as_of` / `begin` / `end`.

    A 14-digit (second precision) time names the whole second, so `end_of_second` pads it
    with 999: every instant started within that second is included.
    """
    if isinstance(value, datetime):
        return format_instant_time(value)
    text = str(value).strip()
    if not _DIGITS.match(text):
        raise ValueError(f"not an instant time (yyyyMMddHHmmss[SSS] or datetime): {value!r}")
    if len(text) == 14:
        return text + ("999" if end_of_second else "000")
    return text


def next_instant_time(after: str | None) -> str:
    """An instant time later than both the clock and `after` (the newest time on the timeline)."""
    now = now_instant_time()
    if after is None or now > after:
        return now
    return format_instant_time(parse_instant_time(after) + timedelta(milliseconds=1))

"""Numbers as people read them, for every printed report (the CLI's and the simulator's)."""

from __future__ import annotations


def human_duration(seconds: float | None) -> str:
    """A duration as people read it: "340 ms", "26.9 s", "1 min 3 s", "2 h 5 min" (every command
    prints durations through this; JSON keeps the number of seconds)."""
    if seconds is None:
        return ""
    if seconds < 0.9995:  # what rounds to 1000 ms reads "1.0 s"
        ms = round(seconds * 1000)
        return "< 1 ms" if ms < 1 else f"{ms} ms"
    if seconds < 59.95:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        minutes, secs = divmod(whole, 60)
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(round(whole / 60), 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"

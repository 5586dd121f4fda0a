"""Printing for every command: aligned text for people, JSON for scripts, and the error type
commands raise for bad arguments or input."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa


class CliError(Exception):
    """A bad argument or input file: printed as one line, exit code 2."""


def format_rows(table: pa.Table) -> str:
    """A plain aligned text table (no pandas needed)."""
    cells = [table.column_names] + [[str(v) for v in row.values()] for row in table.to_pylist()]
    widths = [max(len(r[i]) for r in cells) for i in range(len(table.column_names))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def format_records(records: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """Dicts as an aligned text table with the given columns."""
    return format_rows(pa.table({c: [_text(r.get(c)) for r in records] for c in columns}))


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def parse_options(pairs: Sequence[str] | None) -> dict[str, str]:
    """`--option k=v` pairs as a dict; the library validates keys and values."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--option expects key=value, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def human_bytes(n: int) -> str:
    size, unit = float(n), 0
    while size >= 1024 and unit < 3:
        size, unit = size / 1024, unit + 1
    return f"{n} B" if unit == 0 else f"{size:.1f} {('KiB', 'MiB', 'GiB')[unit - 1]}"


def _text(value: Any) -> str:
    return "" if value is None else str(value)

"""Printing for every command: aligned text for people, JSON for scripts, and the error type
commands raise for bad arguments or input."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from upsertlake.config.enums import TableType

TABLE_TYPES = tuple(t.value for t in TableType)  # the choices of --table-type, Hudi's spellings


class CliError(Exception):
    """A bad argument or input file: printed as one line, exit code 2."""


def format_rows(data: pa.Table) -> str:
    """A plain aligned text table (no pandas needed)."""
    cells = [data.column_names] + [[str(v) for v in row.values()] for row in data.to_pylist()]
    widths = [max(len(r[i]) for r in cells) for i in range(len(data.column_names))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def format_records(records: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """Dicts as an aligned text table with the given columns."""
    return format_rows(pa.table({c: [_text(r.get(c)) for r in records] for c in columns}))


class _Deprecated(argparse.Action):
    """An old spelling of an option: stores into the new option's value and warns."""

    def __init__(self, option_strings: list[str], dest: str, new: str = "", **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
        option_string: str | None = None,
    ) -> None:
        warnings.warn(f"{option_string} is deprecated; use {self.new}", DeprecationWarning, stacklevel=2)
        setattr(namespace, self.dest, values)


def add_key_fields(p: argparse.ArgumentParser, what: str = "") -> None:
    """--record-key, --precombine-field, --partition-fields (comma-separated), the names every
    command that creates a table uses; --precombine and --partition remain as deprecated aliases."""
    p.add_argument("--record-key", required=True, help="record key field(s), comma separated")
    p.add_argument("--precombine-field", help=f"ordering field: the larger value wins{what}")
    p.add_argument("--partition-fields", default="", metavar="FIELDS", help="partition field(s), comma separated")
    p.add_argument("--table-type", type=str.upper, choices=TABLE_TYPES,
                   help="table type of a table this creates (default COPY_ON_WRITE)")
    for old, new, dest in (
        ("--precombine", "--precombine-field", "precombine_field"),
        ("--partition", "--partition-fields", "partition_fields"),
    ):
        p.add_argument(old, dest=dest, action=_Deprecated, new=new, default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def parse_options(pairs: Sequence[str] | None, flag: str = "--option") -> dict[str, str]:
    """`--option k=v` pairs as a dict; the library validates keys and values."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{flag} expects key=value, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def store_options(args: object) -> dict[str, str]:
    """`--storage-option k=v` (every command): the object store's settings, in delta-rs's keys."""
    return parse_options(getattr(args, "storage_option", None), "--storage-option")


def human_bytes(n: int) -> str:
    size, unit = float(n), 0
    while size >= 1024 and unit < 3:
        size, unit = size / 1024, unit + 1
    return f"{n} B" if unit == 0 else f"{size:.1f} {('KiB', 'MiB', 'GiB')[unit - 1]}"


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def request_counts(counts: dict[str, int]) -> str:
    """Object store requests by kind, as `LIST 3, GET 5, HEAD 0, PUT 7, DELETE 2`."""
    return ", ".join(f"{kind} {n}" for kind, n in counts.items())

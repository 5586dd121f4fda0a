"""`upsertlake read`: snapshot, time travel or incremental reads, with `--where` parsed into the
tuple filters `Table.read` accepts (so partition and key-range pruning apply)."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv

import upsertlake
from upsertlake.cli.output import CliError, format_rows, print_json, store_options
from upsertlake.read.filters import to_expression

# A quoted string, an operator or parenthesis or comma, or a bare word.
_TOKEN = re.compile(r"""\s*(?:'([^']*)'|"([^"]*)"|(!=|==|<=|>=|=|<|>|\(|\)|,)|([^\s=!<>(),'"]+))""")
_COMPARISONS = {"=", "==", "!=", "<", "<=", ">", ">="}


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("read", parents=[common], help="read a snapshot, a past snapshot, or the changes since an instant")
    p.add_argument("path", help="the table")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--as-of", metavar="INSTANT", help="time travel: the snapshot as of this instant")
    when.add_argument("--since", metavar="INSTANT", help="incremental: records written after this instant")
    p.add_argument("--until", metavar="INSTANT", help="with --since: up to and including this instant")
    p.add_argument("--where", metavar="EXPR", help="e.g. \"city = 'sf' and fare >= 10\"; ops = != < <= > >= in, not in")
    p.add_argument("--columns", nargs="+", metavar="COL", help="columns to return (comma or space separated)")
    p.add_argument("--limit", type=int, metavar="N", help="at most N rows")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format")
    p.add_argument("--json", action="store_true", help="the same as --format json")
    p.set_defaults(func=read)


def read(args: argparse.Namespace) -> int:
    if args.until and not args.since:
        raise CliError("--until needs --since")
    if args.limit is not None and args.limit < 0:
        raise CliError("--limit must be at least 0")
    table = upsertlake.open_table(args.path, storage_options=store_options(args))
    columns = [c for item in args.columns or () for c in item.split(",") if c] or None
    filters = parse_where(args.where, table.schema()) if args.where else None
    if args.since:
        result = table.read_incremental(args.since, args.until, columns)
        if filters:
            result = result.filter(to_expression(filters))
    else:
        result = table.read(columns, as_of=args.as_of, filters=filters)
    if args.limit is not None:
        result = result.slice(0, args.limit)
    fmt = "json" if args.json else args.format
    if fmt == "json":
        print_json(result.to_pylist())
    elif fmt == "csv":
        sys.stdout.flush()
        pcsv.write_csv(result, sys.stdout.buffer)
    else:
        print(format_rows(result))
    return 0


def parse_where(text: str, schema: pa.Schema) -> list[tuple[str, str, Any]]:
    """`col op value [and col op value ...]` as (column, op, value) tuples, values cast to the
    column's type; a meta column (`_hoodie_*`) is a string."""
    tokens = _tokenize(text)
    predicates = []
    while True:
        column = _word(tokens, "a column name")
        op = _operator(tokens)
        if op in ("in", "not in"):
            raw: Any = _list(tokens)
        else:
            raw = _literal(tokens)
        predicates.append((column, op, _typed(column, raw, schema)))
        if not tokens:
            return predicates
        if _word(tokens, "'and'").lower() != "and":
            raise CliError(f"--where: expected 'and' between conditions in {text!r} (only 'and' is supported)")


def _tokenize(text: str) -> list[tuple[str, str]]:
    """(kind, text) tokens: kind is 'str' (quoted), 'op' or 'word'."""
    tokens, pos, text = [], 0, text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise CliError(f"--where: cannot parse {text[pos:]!r}")
        quoted = m.group(1) if m.group(1) is not None else m.group(2)
        if quoted is not None:
            tokens.append(("str", quoted))
        elif m.group(3):
            tokens.append(("op", m.group(3)))
        elif m.group(4):
            tokens.append(("word", m.group(4)))
        pos = m.end()
    if not tokens:
        raise CliError("--where is empty")
    return tokens


def _word(tokens: list[tuple[str, str]], what: str) -> str:
    if not tokens or tokens[0][0] != "word":
        raise CliError(f"--where: expected {what}, got {tokens[0][1] if tokens else 'the end'!r}")
    return tokens.pop(0)[1]


def _operator(tokens: list[tuple[str, str]]) -> str:
    if tokens and tokens[0][0] == "op" and tokens[0][1] in _COMPARISONS:
        return tokens.pop(0)[1]
    if tokens and tokens[0] == ("word", "in"):
        tokens.pop(0)
        return "in"
    if len(tokens) > 1 and tokens[0][1].lower() == "not" and tokens[1][1].lower() == "in":
        del tokens[:2]
        return "not in"
    got = tokens[0][1] if tokens else "the end"
    raise CliError(f"--where: expected an operator (= != < <= > >= in, not in), got {got!r}")


def _literal(tokens: list[tuple[str, str]]) -> str | None:
    if not tokens or tokens[0][0] == "op":
        raise CliError(f"--where: expected a value, got {tokens[0][1] if tokens else 'the end'!r}")
    kind, value = tokens.pop(0)
    return None if kind == "word" and value.lower() == "null" else value


def _list(tokens: list[tuple[str, str]]) -> list[str | None]:
    if not tokens or tokens[0] != ("op", "("):
        raise CliError("--where: 'in' needs a list in parentheses, e.g. city in ('sf', 'nyc')")
    tokens.pop(0)
    values = [_literal(tokens)]
    while tokens and tokens[0] == ("op", ","):
        tokens.pop(0)
        values.append(_literal(tokens))
    if not tokens or tokens.pop(0) != ("op", ")"):
        raise CliError("--where: missing ')' after the 'in' list")
    return values


def _typed(column: str, raw: Any, schema: pa.Schema) -> Any:
    if column.startswith("_hoodie_"):
        return raw
    if column not in schema.names:
        raise CliError(f"--where: unknown column {column!r} (columns: {', '.join(schema.names)})")
    values = raw if isinstance(raw, list) else [raw]
    try:
        typed = pa.array(values, pa.string()).cast(schema.field(column).type).to_pylist()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise CliError(f"--where: {raw!r} is no {schema.field(column).type} value for column {column!r}") from exc
    return typed if isinstance(raw, list) else typed[0]

"""`upsertlake read`: snapshot, time travel or incremental reads, with `--where` parsed into the
tuple filters `Table.scan` accepts (so partitions, files and row groups are skipped), streamed:
each form (parquet, CSV, JSON, NDJSON, the aligned table; to the screen or to `--output`, whose
extension names the format unless `--format` does) is written batch by batch, in memory that does
not grow with the rows read."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

import upsertlake
from upsertlake.cli.input_files import FileFormat
from upsertlake.cli.output import CliError, print_json, store_options
from upsertlake.config import option_list

# A quoted string, an operator or parenthesis or comma, or a bare word.
_TOKEN = re.compile(r"""\s*(?:'([^']*)'|"([^"]*)"|(!=|==|<=|>=|=|<|>|\(|\)|,)|([^\s=!<>(),'"]+))""")
_COMPARISONS = {"=", "==", "!=", "<", "<=", ">", ">="}
TABLE = "table"  # aligned columns, for a screen (or a .txt file)
FORMATS = (TABLE, *(f.value for f in FileFormat))


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "read", parents=[common], help="read a snapshot, a past snapshot, or the changes since an instant"
    )
    p.add_argument("path", help="the table")
    when = p.add_mutually_exclusive_group()
    times = "an instant time (yyyyMMddHHmmss[SSS]) or an ISO-8601 time, e.g. '2026-12-06 09:30' (local) or '...Z'"
    when.add_argument("--as-of", metavar="TIME", help=f"time travel: the snapshot as of this time; {times}")
    when.add_argument("--since", metavar="TIME", help="incremental: records written after this time")
    p.add_argument("--until", metavar="TIME", help="with --since: up to and including this time")
    p.add_argument("--where", metavar="EXPR", help="e.g. \"city = 'sf' and fare >= 10\"; ops = != < <= > >= in, not in")
    p.add_argument("--columns", nargs="+", metavar="COL", help="columns to return (comma or space separated)")
    p.add_argument("--limit", type=int, metavar="N", help="at most N rows")
    p.add_argument("--format", choices=FORMATS, help="table (default on screen), csv, json (an array), ndjson "
                   "(a row a line) or parquet; with --output, by default the file's extension says")
    p.add_argument("--json", action="store_true", help="the same as --format json")
    p.add_argument("--output", metavar="FILE", help="write the rows to this file (streamed) instead of printing them")
    p.set_defaults(func=read)


def read(args: argparse.Namespace) -> int:
    if args.until and not args.since:
        raise CliError("--until needs --since")
    if args.limit is not None and args.limit < 0:
        raise CliError("--limit must be at least 0")
    fmt = "json" if args.json and not args.output else args.format
    if args.output:
        fmt = fmt or output_format(args.output)
    elif fmt == "parquet":
        raise CliError("--format parquet writes a file: give --output FILE.parquet")
    table = upsertlake.open_table(args.path, storage_options=store_options(args))
    columns = [c for item in args.columns or () for c in option_list(item)] or None
    filters = parse_where(args.where, table.schema()) if args.where else None
    scan = table.scan(columns, filters, as_of=args.as_of, begin=args.since, end=args.until)
    batches = _limited(scan.to_batches(), args.limit)
    if args.output:
        try:
            with open(args.output, "wb") as out:
                rows = write_rows(fmt, scan.schema, batches, out)
        except BaseException:
            Path(args.output).unlink(missing_ok=True)  # no half-written file left behind
            raise
        if args.json:
            print_json({"output": args.output, "format": fmt, "rows": rows})
        else:
            print(f"{rows} row(s) written to {args.output} ({fmt})")
        return 0
    sys.stdout.flush()
    write_rows(fmt or TABLE, scan.schema, batches, sys.stdout.buffer)
    sys.stdout.buffer.flush()
    return 0


def output_format(path: str) -> str:
    """The format a file's extension names: the data file formats' own extensions (as the inputs
    of upsert and ingest are told apart), `.txt` for the aligned table."""
    name = path.rsplit("/", 1)[-1]
    suffix = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if suffix == ".txt":
        return TABLE
    fmt = FileFormat.of_suffix(suffix)
    if fmt is None:
        known = ", ".join(sorted({e for f in FileFormat for e in f.extensions} | {".txt"}))
        raise CliError(f"--output {path}: cannot tell the format from its extension ({known}); give --format")
    return fmt.value


def write_rows(fmt: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch], out: BinaryIO) -> int:
    """The rows in `fmt`, a batch at a time, to a binary stream; how many were written."""
    rows = 0

    def counted() -> Iterator[pa.RecordBatch]:
        nonlocal rows
        for batch in batches:
            rows += batch.num_rows
            yield batch

    {"parquet": _write_parquet, "csv": _write_csv, "json": _write_json, "ndjson": _write_ndjson,
     TABLE: _write_table}[fmt](schema, counted(), out)  # fmt: skip
    return rows


def _limited(batches: Iterator[pa.RecordBatch], limit: int | None) -> Iterator[pa.RecordBatch]:
    """The first `limit` rows of a stream (all without a limit); the stream stops there."""
    left = limit
    for batch in batches:
        if left is not None:
            if left <= 0:
                return
            batch = batch.slice(0, left)
            left -= batch.num_rows
        yield batch


def _write_parquet(schema: pa.Schema, batches: Iterator[pa.RecordBatch], out: BinaryIO) -> None:
    import pyarrow.parquet as pq

    with pq.ParquetWriter(out, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)


def _write_csv(schema: pa.Schema, batches: Iterator[pa.RecordBatch], out: BinaryIO) -> None:
    import pyarrow.csv as pcsv

    with pcsv.CSVWriter(out, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)


def _write_json(schema: pa.Schema, batches: Iterator[pa.RecordBatch], out: BinaryIO) -> None:
    """The rows as one JSON array (as `print_json` prints a list), a batch at a time."""
    first = True
    for batch in batches:
        for row in batch.to_pylist():
            text = json.dumps(row, indent=2, default=str).replace("\n", "\n  ")
            out.write((("[\n  " if first else ",\n  ") + text).encode())
            first = False
    out.write(b"[]\n" if first else b"\n]\n")


def _write_ndjson(schema: pa.Schema, batches: Iterator[pa.RecordBatch], out: BinaryIO) -> None:
    """One JSON object a line (what `upsertlake upsert` reads back as NDJSON)."""
    for batch in batches:
        out.write("".join(json.dumps(row, default=str) + "\n" for row in batch.to_pylist()).encode())


def _write_table(schema: pa.Schema, batches: Iterator[pa.RecordBatch], out: BinaryIO) -> None:
    """An aligned text table, the header once; a column widens when a later batch needs it
    (its earlier rows are printed already)."""
    widths = [len(name) for name in schema.names]
    header = True
    for batch in batches:
        cells = [[str(v) for v in row.values()] for row in batch.to_pylist()]
        widths = [max([w, *(len(r[i]) for r in cells)]) for i, w in enumerate(widths)]
        lines = ([schema.names] if header else []) + cells
        header = False
        out.write("".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n" for r in lines).encode())
    if header:
        out.write(("  ".join(schema.names) + "\n").encode())


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
    field_type = schema.field(column).type
    if pa.types.is_timestamp(field_type) or pa.types.is_date(field_type):
        return raw  # times are read by the library's one parser (ISO-8601, zones)
    values = raw if isinstance(raw, list) else [raw]
    try:
        typed = pa.array(values, pa.string()).cast(schema.field(column).type).to_pylist()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise CliError(f"--where: {raw!r} is no {schema.field(column).type} value for column {column!r}") from exc
    return typed if isinstance(raw, list) else typed[0]

"""The `upsertlake` command: one entry point, one small module per command group.

Layers (pyproject.toml, docs/DESIGN.md §3): the top floor; may import anything
below: spark, simulation, table and the floors under them.

Every failure a user can cause (bad arguments, bad input files, a table error) ends in one line on
stderr and a non-zero exit code, never a traceback (`--debug` shows it).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
import warnings
from typing import NoReturn, TextIO

from upsertlake import __version__
from upsertlake.cli import demo, doctor, ingest, insight, read, services, simulate, stats, write
from upsertlake.cli.output import CliError
from upsertlake.errors import UpsertlakeError, UpsertlakeWarning

GROUPS = (demo, write, insight, read, stats, services, simulate, ingest, doctor)
USAGE_ERROR = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS,
        help="log each stage as it starts and ends (INFO); -vv for DEBUG"
    )
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    common.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
        help="no progress on stderr (none is drawn either when stderr is not a terminal)",
    )
    common.add_argument(
        "--storage-option", action="append", metavar="KEY=VALUE", default=argparse.SUPPRESS,
        help="an object store setting over its environment variables, e.g. aws_endpoint=http://127.0.0.1:9000 "
             "(repeatable; the keys delta-rs and obstore take)",
    )
    about = "Hudi-compatible upserts (copy-on-write and merge-on-read tables)"
    parser = _Parser(prog="upsertlake", description=about, parents=[common])
    parser.add_argument("--version", action="version", version=f"upsertlake {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.register(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; a reader that left early (`| head -1`) ends it quietly, as Python's note on
    SIGPIPE recommends: stdout flushed here so that the broken pipe is seen here and not at the
    interpreter's exit (`Exception ignored ... BrokenPipeError`, status 120), what remains sent to
    devnull, no message, status 1."""
    try:
        try:
            return _run(argv)
        finally:  # also when argparse exits (--help, --version)
            sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _run(argv: list[str] | None) -> int:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        args = build_parser().parse_args(argv)
    for w in caught:  # deprecated spellings of options: one line each, the command still runs
        print(f"warning: {w.message}", file=sys.stderr)
    debug = getattr(args, "debug", False)
    verbose = getattr(args, "verbose", 0)
    level = logging.DEBUG if debug or verbose > 1 else logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _warning_line
            return int(args.func(args))
    except BrokenPipeError:
        raise  # the reader left: main ends quietly
    except (UpsertlakeError, CliError) as exc:
        return _fail(exc, debug, USAGE_ERROR)
    except Exception as exc:
        return _fail(exc, debug, 1)


def _warning_line(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """Ours as one `warning: ...` line on stderr (the command goes on); others as Python shows them."""
    if issubclass(category, UpsertlakeWarning):
        print(f"warning: {message}", file=sys.stderr)
    else:
        _show_warning(message, category, filename, lineno, file, line)


_show_warning = warnings.showwarning


def _fail(exc: Exception, debug: bool, code: int) -> int:
    if debug:
        traceback.print_exc()
    name = "" if isinstance(exc, CliError) else f"{type(exc).__name__}: "
    print(f"error: {name}{' '.join(str(exc).split())}", file=sys.stderr)
    return code

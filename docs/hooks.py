"""MkDocs hooks: the reference pages that the code writes. `<!-- options -->` becomes the table
of every option in the registry (`upsertlake.config.options`: key, type, default, bounds or
choices, doc); `<!-- cli -->` the help of every command, as `upsertlake COMMAND --help` prints it.
Nothing generated is checked in, so the reference cannot drift from the code."""

from __future__ import annotations

import argparse
import io
import os
import sys
from contextlib import redirect_stdout
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def on_page_markdown(markdown: str, page: object, config: object, files: object) -> str:
    if "<!-- options -->" in markdown:
        markdown = markdown.replace("<!-- options -->", options_table())
    if "<!-- cli -->" in markdown:
        markdown = markdown.replace("<!-- cli -->", cli_help())
    return markdown


def options_table() -> str:
    from upsertlake.config import options as opt

    rows = ["| key | type | default | accepts | what it does |", "| --- | --- | --- | --- | --- |"]
    seen = set()
    for option in opt.OPTIONS.values():
        if option.key in seen:
            continue
        seen.add(option.key)
        accepts = ", ".join(f"`{c}`" for c in option.choices) or option._expected()
        if option.aliases:
            accepts += "; also named " + ", ".join(f"`{a}`" for a in option.aliases)
        default = option.to_string(option.default) if option.default != "" else ""
        doc = " ".join(option.doc.split()).replace("|", "\\|")
        rows.append(f"| `{option.key}` | {option.type.__name__} | `{default}` | {accepts} | {doc} |")
    return "\n".join(rows)


def cli_help() -> str:
    from upsertlake.cli import build_parser

    os.environ.setdefault("COLUMNS", "100")
    parser = build_parser()
    out = [f"```text\n{_help(parser)}```"]
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in sub.choices.items():
        out.append(f"## upsertlake {name}\n\n```text\n{_help(command)}```")
    return "\n\n".join(out)


def _help(parser: argparse.ArgumentParser) -> str:
    text = io.StringIO()
    with redirect_stdout(text):
        parser.print_help()
    return text.getvalue()

"""The `java.util.Properties` text format, as Hudi reads and writes `hoodie.properties` with it.

Java's `Properties.load` and `Properties.store` rules: comments, line continuations, `\\uXXXX`
escapes as UTF-16 code units, and separators escaped inside keys and values (a ':' is stored as
'\\:'). A codec of text alone, apart from the file and its backup protocol
(`upsertlake.config.properties_file`), which decide what is read and written.
"""

from __future__ import annotations

import re

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_KEY = re.compile(r"(?:\\.?|[^=: \t\f\\])*")  # escaped characters, or anything but a separator


def parse_java_properties(text: str) -> dict[str, str]:
    """Parse the `java.util.Properties` text format (comments, continuations, escapes)."""
    props: dict[str, str] = {}
    lines = iter(text.splitlines())
    for raw in lines:
        line = raw.lstrip()
        if not line or line[0] in "#!":
            continue
        while _ends_with_odd_backslashes(line):
            line = line[:-1] + next(lines, "").lstrip()
        key, value = _split_key_value(line)
        props[_unescape(key)] = _unescape(value)
    return props


def _ends_with_odd_backslashes(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    found = _KEY.match(line)
    assert found is not None, "the key pattern matches every line (the empty key too)"
    i = found.end()  # the key runs to the first unescaped separator
    if i >= len(line):
        return line, ""
    c = line[i]
    key, rest = line[:i], line[i:].lstrip(" \t\f")
    if (rest[:1] in ("=", ":") and c in " \t\f") or c in "=:":
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def _unescape(text: str) -> str:
    if "\\" not in text:  # most keys and values: nothing to undo
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and i + 6 <= len(text):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    # \\uXXXX escapes are UTF-16 code units: characters beyond the BMP come as two halves.
    return "".join(out).encode("utf-16-be", "surrogatepass").decode("utf-16-be", "replace")


def _escape(text: str, is_key: bool) -> str:
    out: list[str] = []
    for i, c in enumerate(text):
        if c == "\\":
            out.append("\\\\")
        elif c in "=:#!":
            out.append("\\" + c)
        elif c == " " and (is_key or i == 0):
            out.append("\\ ")
        elif c in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[c])
        elif ord(c) > 0x7E or ord(c) < 0x20:  # as UTF-16 code units, one or two, as Java does
            units = c.encode("utf-16-be", "surrogatepass")
            out.extend(f"\\u{int.from_bytes(units[j : j + 2], 'big'):04X}" for j in range(0, len(units), 2))
        else:
            out.append(c)
    return "".join(out)


def format_java_properties(props: dict[str, str]) -> str:
    return "".join(f"{_escape(k, True)}={_escape(v, False)}\n" for k, v in props.items())

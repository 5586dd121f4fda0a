"""SQL text for the literals a write's expressions hold (file names, fileIds, partition paths,
bucket numbers), which grow with the files.

Built as PySpark Columns, every literal and every function over them is one py4j round trip:
hundreds per write, each a wait of the driver. As SQL text the JVM parses the
whole expression in one call (`F.expr`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from numbers import Integral

SqlValue = str | int | float | bool | None  # NumPy integers and floats too


def sql_literal(value: SqlValue) -> str:
    """A Spark SQL literal of the same type PySpark's `F.lit` gives: STRING (one holding quotes
    or backslashes as UTF-8 bytes in hex), INT, BIGINT when it does not fit, DOUBLE (exact: Java
    parses the shortest repr back to the same double), or an untyped NULL."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        if "'" in value or "\\" in value:  # no escapes: their meaning depends on parser settings
            return f"decode(unhex('{value.encode().hex()}'), 'UTF-8')"
        return f"'{value}'"
    if isinstance(value, Integral):  # NumPy's integers too
        return str(int(value)) if -(2**31) <= value < 2**31 else f"{int(value)}L"
    return f"CAST('{float(value)!r}' AS DOUBLE)"


def sql_array(values: Sequence[SqlValue]) -> str:
    return f"array({', '.join(map(sql_literal, values))})"


def sql_map(entries: Mapping[str, str] | Mapping[int, str]) -> str:
    """`map(k1, v1, ...)` of literal keys and values given as SQL text."""
    return f"map({', '.join(f'{sql_literal(k)}, {v}' for k, v in entries.items())})"


def identifier(name: str) -> str:
    """A column name quoted for SQL text."""
    return "`" + name.replace("`", "``") + "`"

"""Turn whatever the caller hands us into one Arrow table."""

from __future__ import annotations

from typing import Any, cast

import pyarrow as pa

from upsertlake.errors import SchemaError


def to_arrow_table(data: Any) -> pa.Table:
    """Accept a pyarrow Table/RecordBatch/RecordBatchReader, a pandas DataFrame, or any object
    exporting `__arrow_c_stream__` (polars, DuckDB, ...). Data Arrow cannot convert (a column
    mixing types) raises SchemaError naming the column."""
    try:
        return _to_arrow_table(data)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        column = _unconvertible_column(data)
        where = f"column {column!r}: " if column else ""
        raise SchemaError(f"cannot convert the batch to Arrow: {where}{exc}") from exc


def _unconvertible_column(data: Any) -> str | None:
    """The first column of a list of dicts or a DataFrame that Arrow cannot convert on its own."""
    try:
        if isinstance(data, list):
            names = list(dict.fromkeys(k for row in data for k in row))
            columns = {n: [row.get(n) for row in data] for n in names}
        elif hasattr(data, "columns") and hasattr(data, "__getitem__"):
            columns = {str(n): list(data[n]) for n in data.columns}
        else:
            return None
        for name, values in columns.items():
            try:
                pa.array(values)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                return cast("str | None", name)
    except Exception:
        return None
    return None


def _to_arrow_table(data: Any) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if type(data).__module__.startswith("pandas") and hasattr(data, "columns"):
        return pa.Table.from_pandas(data, preserve_index=False)
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data).read_all()
    if isinstance(data, list) and all(isinstance(r, dict) for r in data):
        return pa.Table.from_pylist(data)
    raise SchemaError(
        f"cannot write a {type(data).__name__}: pass a pyarrow Table or RecordBatchReader, a pandas "
        "DataFrame, a list of dicts, or an object with __arrow_c_stream__"
    )

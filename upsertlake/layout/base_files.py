"""Opening a base file for reading, whatever its format: parquet (what every Hudi table holds and
what upsertlake writes) or Lance (Hudi 1.1's `hoodie.table.base.file.format=LANCE`).

A base file's format is its extension, as Hudi names it (`<fileId>_<token>_<instant>.parquet` or
`.lance`). Lance files are read through the Lance library (`pylance`, the optional `lance` extra),
whole: a Lance file has no row groups with statistics, so no part of it is skipped, and an object
store's file is fetched through the table's storage into a temporary file first (pylance opens
paths). `LanceFile` offers what the readers use of `pyarrow.parquet.ParquetFile`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Union

import pyarrow as pa
import pyarrow.parquet as pq

from upsertlake.errors import UnsupportedTableError
from upsertlake.storage import Storage

PARQUET_EXTENSION = ".parquet"
LANCE_EXTENSION = ".lance"
BASE_FILE_EXTENSIONS = (PARQUET_EXTENSION, LANCE_EXTENSION)
LANCE_EXTRA = "reading Lance base files needs the Lance library: pip install 'upsertlake[lance]' (the pylance package)"


def base_extension(name: str) -> str | None:
    """The base file extension `name` ends with (None: not a base file's)."""
    return next((ext for ext in BASE_FILE_EXTENSIONS if name.endswith(ext)), None)


def is_lance(path: str) -> bool:
    return path.endswith(LANCE_EXTENSION)


@dataclass(frozen=True)
class LanceMetadata:
    """The parts of a parquet footer's metadata a Lance file has: its rows and its key-value
    metadata (Hudi keeps the bloom filter and key range there too); one "row group", whole."""

    num_rows: int
    metadata: dict[bytes, bytes]
    num_row_groups: int = 1


class LanceFile:
    """A Lance base file, read through pylance, shaped as the readers use a parquet file."""

    def __init__(self, path: str) -> None:
        self.path = path

    @cached_property
    def _schema(self) -> pa.Schema:
        return _reader(self.path).metadata().schema

    @property
    def schema_arrow(self) -> pa.Schema:
        return self._schema.remove_metadata()

    @cached_property
    def metadata(self) -> LanceMetadata:
        return LanceMetadata(_reader(self.path).num_rows(), dict(self._schema.metadata or {}))

    def read(self, columns: Sequence[str] | None = None, **_: Any) -> pa.Table:
        columns = list(columns) if columns is not None else None
        table = _reader(self.path, columns).read_all(batch_size=64 * 1024).to_table()
        return table.replace_schema_metadata(None)

    def read_row_groups(self, row_groups: Sequence[int], columns: Sequence[str] | None = None, **_: Any) -> pa.Table:
        return self.read(columns) if list(row_groups) else self.schema_arrow.empty_table()

    def iter_batches(
        self, batch_size: int = 64 * 1024, row_groups: Sequence[int] | None = None,
        columns: Sequence[str] | None = None, **_: Any,
    ) -> Iterator[pa.RecordBatch]:
        if row_groups is not None and not list(row_groups):
            return iter(())
        return iter(self.read(columns).to_batches(max_chunksize=batch_size))


BaseFileReader = Union[pq.ParquetFile, LanceFile]


def open_base_file(storage: Storage, path: str, source: pa.NativeFile | None = None) -> BaseFileReader:
    """A base file opened for reading (`source`: a parquet file opened already)."""
    if not is_lance(path):
        if source is not None:
            return pq.ParquetFile(source)
        local = storage.os_path(path)
        return pq.ParquetFile(local) if local is not None else storage.parquet_file(path)
    local = storage.os_path(path)
    if local is not None:
        return LanceFile(local)
    return _LanceCopy(storage.read_bytes(path))


class _LanceCopy(LanceFile):
    """A Lance file of an object store, read from a temporary copy of its bytes (removed when
    the reader goes)."""

    def __init__(self, data: bytes) -> None:
        handle, copy = tempfile.mkstemp(suffix=LANCE_EXTENSION)
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        super().__init__(copy)

    def __del__(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass


def _reader(path: str, columns: list[str] | None = None) -> Any:
    try:
        from lance.file import LanceFileReader
    except ImportError as exc:
        raise UnsupportedTableError(LANCE_EXTRA) from exc
    return LanceFileReader(path, columns=columns)

"""Opening a base file for reading, whatever its format: parquet (what every Hudi table holds and
what upsertlake writes) or Lance (Hudi 1.1's `hoodie.table.base.file.format=LANCE`).

A base file's format is its extension, as Hudi names it (`<fileId>_<token>_<instant>.parquet` or
`.lance`). Lance files are read through the Lance library (`pylance`, the optional `lance` extra),
whole: a Lance file has no row groups with statistics, so no part of it is skipped, and an object
store's file is fetched through the table's storage into a temporary file first (pylance opens
paths). `LanceFile` offers what the readers use of `pyarrow.parquet.ParquetFile`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeAlias

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
        data = _reader(self.path, columns).read_all(batch_size=64 * 1024).to_table()
        return data.replace_schema_metadata(None)

    def read_row_groups(self, row_groups: Sequence[int], columns: Sequence[str] | None = None, **_: Any) -> pa.Table:
        return self.read(columns) if list(row_groups) else self.schema_arrow.empty_table()

    def iter_batches(
        self, batch_size: int = 64 * 1024, row_groups: Sequence[int] | None = None,
        columns: Sequence[str] | None = None, **_: Any,
    ) -> Iterator[pa.RecordBatch]:
        if row_groups is not None and not list(row_groups):
            return iter(())
        return iter(self.read(columns).to_batches(max_chunksize=batch_size))


BaseFileReader: TypeAlias = pq.ParquetFile | LanceFile


# Encodings pyarrow cannot decode into a dictionary.
_NOT_DICTIONARY_DECODABLE = {"DELTA_BYTE_ARRAY", "DELTA_LENGTH_BYTE_ARRAY", "BYTE_STREAM_SPLIT"}


def open_base_file(
    storage: Storage, path: str, source: pa.NativeFile | None = None, dictionary: Collection[str] = ()
) -> BaseFileReader:
    """A base file opened for reading (`source`: a parquet file opened already). Of a parquet
    file, those of the string columns `dictionary` whose pages pyarrow can decode as a dictionary
    (dictionary or plain encoded) are decoded so: a column of a few values decodes to small
    indices instead of a string per row."""
    if is_lance(path):
        local = storage.os_path(path)
        return LanceFile(local) if local is not None else _LanceCopy(storage.read_bytes(path))
    if source is None:
        source = storage.os_path(path) or storage.open_input(path)
    if not dictionary:
        return pq.ParquetFile(source)
    metadata = pq.read_metadata(source)
    index = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    decodable = [
        c for c in dictionary if c in index and not any(
            _NOT_DICTIONARY_DECODABLE & set(metadata.row_group(g).column(index[c]).encodings)
            for g in range(metadata.num_row_groups)
        )
    ]
    return pq.ParquetFile(source, metadata=metadata, read_dictionary=decodable or None)


class _LanceCopy(LanceFile):
    """A Lance file of an object store, read from a temporary copy of its bytes (removed when
    the reader goes)."""

    def __init__(self, data: bytes) -> None:
        handle, copy = tempfile.mkstemp(suffix=LANCE_EXTENSION)
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        super().__init__(copy)

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def _reader(path: str, columns: list[str] | None = None) -> Any:
    try:
        from lance.file import LanceFileReader
    except ImportError as exc:
        raise UnsupportedTableError(LANCE_EXTRA) from exc
    return LanceFileReader(path, columns=columns)

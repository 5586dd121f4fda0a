"""Input files for writes: parquet, CSV, JSON (an array or NDJSON) or NDJSON, read into one Arrow
table, by extension or `--format`; a folder contributes its files of a known format.

Text formats are read with the table's types for the columns it has (`InputTypes`), so a string
column stays text exactly as written: inferring CSV types would read the key "001" as the number 1
(and then update the row of key "1") or refuse a zip code "00501" in a string column."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson

from upsertlake.cli.input_files import FileFormat, InputFile, find
from upsertlake.cli.output import CliError
from upsertlake.config import option_list
from upsertlake.storage import Storage, parse_location
from upsertlake.storage.requests import RequestCounts
from upsertlake.table.table import Table


@dataclass(frozen=True)
class InputTypes:
    """The types text inputs are read with: the table's type for each column the table has, and
    text for the identifier fields (record key and partition fields) it has no type for yet;
    every other column is inferred. Timestamps and nested types are left to inference (and the
    write's cast), since text readers cannot parse every form a table's timestamps take."""

    schema: pa.Schema = field(default_factory=lambda: pa.schema([]))
    text_fields: tuple[str, ...] = ()

    @classmethod
    def of(cls, table: Table) -> InputTypes:
        table_config = table.table_config
        return cls(table.schema(), (*table_config.record_key_fields, *table_config.partition_fields))

    @classmethod
    def of_fields(cls, record_key: str, partition_fields: str | None) -> InputTypes:
        """For a table not created yet: text for the key and partition fields given."""
        return cls(text_fields=(*option_list(record_key), *option_list(partition_fields or "")))

    def csv_types(self) -> dict[str, pa.DataType]:
        """Types by column name for a format that cannot tell text from numbers (CSV)."""
        out = {name: pa.string() for name in self.text_fields if name not in self.schema.names}
        out.update({f.name: f.type for f in self.schema if not _inferred(f.type)})
        return out

    def json_types(self, inferred: pa.Schema) -> dict[str, pa.DataType]:
        """Types for the columns of a JSON input, which tells strings from numbers: the table's,
        and text for an identifier field only where inference made a timestamp of a string."""
        wanted = self.csv_types()
        return {
            f.name: wanted[f.name] for f in inferred
            if f.name in wanted and (f.name in self.schema.names or pa.types.is_timestamp(f.type))
        }


def _inferred(t: pa.DataType) -> bool:
    """Types left to inference and the write's cast: text readers parse only some of their forms."""
    return bool(pa.types.is_nested(t) or pa.types.is_timestamp(t))


def read_inputs(
    paths: list[str],
    fmt: FileFormat | None,
    types: InputTypes | None = None,
    options: Mapping[str, str] | None = None,
    requests: RequestCounts | None = None,
) -> pa.Table:
    """Every input file as one table (columns unified by name); CliError naming a bad file. Paths
    may be folders, and may be on an object store (read with the store settings `options`, their
    requests counted by `requests` when given)."""
    files = [f for p in paths for f in _expand(p, fmt, options, requests)]
    tables = [read_file(f, fmt or _format_of(f), types or InputTypes()) for f in files]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise CliError(f"input files do not share one schema: {exc}") from exc


def _format_of(f: InputFile) -> FileFormat:
    fmt = FileFormat.of_suffix(f.suffix)
    assert fmt is not None, "_expand keeps files of a known format"
    return fmt


def _expand(
    path: str, fmt: FileFormat | None, options: Mapping[str, str] | None, requests: RequestCounts | None
) -> list[InputFile]:
    found = find(path, options, requests)
    if len(found) == 1 and found[0].uri == parse_location(path).uri:  # the file named
        if fmt is None and FileFormat.of_suffix(found[0].suffix) is None:
            choices = ",".join(f.value for f in FileFormat)
            raise CliError(f"cannot tell the format of {path} from its extension; pass --format {{{choices}}}")
        return found
    files = [f for f in found if fmt is not None or FileFormat.of_suffix(f.suffix) is not None]
    if not files:
        # An object store has no empty folders: a prefix exists while an object is below it.
        folder = bool(found) or Storage(path, options, requests).folder_exists("")
        raise CliError(f"no input files in folder {path}" if folder else f"no such input file: {path}")
    return files


def read_file(f: InputFile, fmt: FileFormat, types: InputTypes) -> pa.Table:
    """One input file, read through its storage, with `types` imposed on the text formats."""
    try:
        if fmt is FileFormat.PARQUET:
            return f.storage.read_parquet(f.rel)
        if fmt is FileFormat.CSV:
            return _read_csv(f, types)
        data = f.storage.read_bytes(f.rel)
        if fmt is FileFormat.JSON and data.lstrip().startswith(b"["):
            rows = json.loads(data)
            if not all(isinstance(r, dict) for r in rows):
                raise ValueError("a JSON array must hold objects, one per record")
            # As NDJSON: every field of every object, typed as NDJSON is (Arrow's from_pylist
            # would keep only the first object's fields).
            return _read_ndjson("".join(json.dumps(r) + "\n" for r in rows).encode(), types)
        return _read_ndjson(data, types)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise CliError(f"cannot read {f.uri} as {fmt}: {' '.join(str(exc).split())}") from exc


def _read_csv(f: InputFile, types: InputTypes) -> pa.Table:
    """CSV with the table's types (names the file lacks are ignored)."""
    with f.storage.open_input(f.rel) as stream:
        return pcsv.read_csv(stream, convert_options=pcsv.ConvertOptions(column_types=types.csv_types()))


def _read_ndjson(data: bytes, types: InputTypes) -> pa.Table:
    """NDJSON, inferred first to learn its columns, then read again with the imposed types for
    those columns only (an explicit schema would add the table's other columns as nulls)."""
    inferred = pjson.read_json(pa.BufferReader(data))
    imposed = types.json_types(inferred.schema)
    if not imposed:
        return inferred
    options = pjson.ParseOptions(explicit_schema=pa.schema(imposed.items()), unexpected_field_behavior="infer")
    return pjson.read_json(pa.BufferReader(data), parse_options=options).select(inferred.column_names)

"""Input files for writes: parquet, CSV, JSON (an array or NDJSON) or NDJSON, read into one Arrow
table, by extension or `--format`; a folder contributes its files of a known format."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from upsertlake.cli.output import CliError

FORMATS = ("parquet", "csv", "json", "ndjson")
_BY_EXTENSION = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".json": "json", ".ndjson": "ndjson", ".jsonl": "ndjson"}


def read_inputs(paths: list[str], fmt: str | None) -> pa.Table:
    """Every input file as one table (columns unified by name); CliError naming a bad file."""
    files = [f for p in paths for f in _expand(Path(p), fmt)]
    tables = [_read(f, fmt or _BY_EXTENSION[f.suffix.lower()]) for f in files]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise CliError(f"input files do not share one schema: {exc}") from exc


def _expand(path: Path, fmt: str | None) -> list[Path]:
    if path.is_dir():
        files = sorted(
            f for f in path.rglob("*") if f.is_file() and not f.name.startswith((".", "_"))
            and (fmt is not None or f.suffix.lower() in _BY_EXTENSION)
        )
        if not files:
            raise CliError(f"no input files in folder {path}")
        return files
    if not path.is_file():
        raise CliError(f"no such input file: {path}")
    if fmt is None and path.suffix.lower() not in _BY_EXTENSION:
        raise CliError(f"cannot tell the format of {path} from its extension; pass --format {{{','.join(FORMATS)}}}")
    return [path]


def _read(path: Path, fmt: str) -> pa.Table:
    try:
        if fmt == "parquet":
            return pq.read_table(path)
        if fmt == "csv":
            return pcsv.read_csv(path)
        if fmt == "json" and path.read_text(encoding="utf-8").lstrip().startswith("["):
            rows = json.loads(path.read_text(encoding="utf-8"))
            if not all(isinstance(r, dict) for r in rows):
                raise ValueError("a JSON array must hold objects, one per record")
            return pa.Table.from_pylist(rows)
        return pjson.read_json(path)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise CliError(f"cannot read {path} as {fmt}: {' '.join(str(exc).split())}") from exc

"""Reading one merge-on-read file slice: its base file and the blocks of its log files, merged by
record key under the table's merge mode. Shared by snapshot reads (`upsertlake.read`) and by
compaction (`upsertlake.services.compaction`), which writes the merged records as a new base file.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import pyarrow as pa

from upsertlake.config.enums import MergeMode
from upsertlake.errors import MissingFileError
from upsertlake.layout.base_files import BaseFileReader, open_base_file
from upsertlake.layout.file_system_view import FileSlice, LogFile
from upsertlake.logfile.blocks import Block
from upsertlake.logfile.merge import Merged, merge_counted
from upsertlake.logfile.reader import read_logs
from upsertlake.schema import conform
from upsertlake.schema.columns import RECORD_KEY
from upsertlake.storage import Storage


@dataclass(frozen=True)
class Merge:
    """How a slice's records merge: by record key, under the table's merge mode and ordering
    fields (compared in order), with only the blocks of `instants` (the completed writes the
    read sees) applied."""

    ordering_fields: tuple[str, ...]
    mode: MergeMode
    instants: frozenset[str]


# How a read takes a slice's base file records: from the opened file, the columns to read (None:
# all). Apache Hudi's incremental queries read a narrower part of the base file than its snapshots.
BaseRead = Callable[[BaseFileReader, list[str] | None], pa.Table]


def slice_inputs(
    storage: Storage,
    sl: FileSlice,
    skip: tuple[str, ...] = (),
    dictionary: Collection[str] = (),
    base_read: BaseRead | None = None,
) -> tuple[pa.Table | None, list[Block]]:
    """A slice's base file records (None in a log-only group), without the columns `skip` (and
    the columns `dictionary` decoded as dictionaries where its pages allow), and its log blocks,
    in log order. `base_read`: how the base file is read (whole when None)."""
    base = None
    if sl.base is not None:
        with listed(storage, sl.base.path, sl.base.instant_time):
            parquet = open_base_file(storage, sl.base.path, dictionary=dictionary)
            columns = [c for c in parquet.schema_arrow.names if c not in skip] if skip else None
            base = parquet.read(columns=columns) if base_read is None else base_read(parquet, columns)
    return base, read_logs(log_files(storage, sl))


def log_files(storage: Storage, sl: FileSlice) -> list[tuple[bytes, str]]:
    """The bytes (and URI) of a slice's log files, in log order. A file of a write no completed
    instant names (`LogFile.committed`) that is gone was rolled back meanwhile: none of its blocks
    is visible, so it is left out; a committed one that is gone fails the read."""
    return [f for f in (log_file(storage, log) for log in sl.logs) if f is not None]


def log_file(storage: Storage, log: LogFile) -> tuple[bytes, str] | None:
    """One log file's bytes and URI (`log_files`); None when it is gone and was not committed."""
    try:
        with listed(storage, log.path, log.name.instant):
            return storage.read_bytes(log.path), storage.full_path(log.path)
    except MissingFileError:
        if log.committed:
            raise
        return None


def merge_inputs(
    base: pa.Table | None, blocks: list[Block], merge: Merge, schema: pa.Schema, ordered: bool = True
) -> Merged:
    """The records of a slice's inputs (`slice_inputs`) merged, in `schema`, with the merge's
    counts; `ordered`: as `merge_slice`'s."""
    merged = merge_counted(
        base, blocks, RECORD_KEY, merge.ordering_fields, merge.mode, merge.instants, schema, ordered
    )
    return replace(merged, records=conform(merged.records, schema))


def read_slice(
    storage: Storage,
    sl: FileSlice,
    merge: Merge,
    schema: pa.Schema,
    ordered: bool = True,
    base_read: BaseRead | None = None,
) -> pa.Table:
    """A merge-on-read slice's records: its base file's (`base_read`: as `slice_inputs`'),
    merged with its log blocks by key (`ordered`: as `merge_slice`'s; a read need not keep the
    base file's order). The columns `schema` types as dictionaries are read from the base file as
    such."""
    inputs = slice_inputs(storage, sl, dictionary=dictionary_columns(schema), base_read=base_read)
    return merge_inputs(*inputs, merge, schema, ordered).records


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns `schema` types as dictionaries."""
    return [f.name for f in schema if pa.types.is_dictionary(f.type)]


@contextmanager
def listed(storage: Storage, path: str, instant: str) -> Iterator[None]:
    """A file the view listed as visible is read or the read fails: never skipped."""
    try:
        yield
    except FileNotFoundError as exc:
        raise MissingFileError(
            f"{storage.full_path(path)}, written by instant {instant}, was listed by this read "
            "but is gone (a restore or rollback ran meanwhile, or the file was deleted): its rows cannot be "
            f"returned. Read again; if it stays missing, run `upsertlake doctor {storage.base}`"
        ) from exc

"""Merge a file slice: its base file's records with its log blocks', by key, as Hudi's merged
log scanner (HoodieMergedLogRecordScanner) and file-slice reader do, with Arrow and numpy.

Which blocks count: data and delete blocks of instants the caller says are valid (completed as
of the read) and that no rollback command block in the slice voids. Each record, base file
first, then the log blocks in log order, is an *event* on its key; the key's state folds over
its events in that order:

- COMMIT_TIME_ORDERING: the latest event wins.
- EVENT_TIME_ORDERING, as Hudi 1.x's file group reader (BufferedRecordMergerFactory) and hudi-rs
  merge: a later event replaces the state when its ordering value is at least the state's (ties:
  the later wins); a delete whose writer gave it no ordering value (Hudi's IntWrapper(0)
  default, `natural_order`) always wins. While that natural delete is the state, a delete
  block's delete with an ordering value leaves it (deltaMergeDeleteRecord keeps a commit-time
  delete), and a record (a `_hoodie_is_deleted` one too) replaces it. The log's events merge
  first and the base file's record then competes with the log's winner: a natural delete
  clears the earlier log records, not the base record, which loses only to a later log record
  with an ordering value at least its own (a record written after delete() with a smaller
  ordering value than the base row's leaves the base row: the writer sends such a record to
  another file group, see `upsertlake.layout.slice_keys`).
  That fold is computed without a loop: after a key's last natural delete, its events from the
  first record on compete with the base record (when no record follows that delete, it wins),
  a key without natural deletes has all its events and the base record compete, and the winner
  is the largest (ordering value, position) among them.

An ordering value is the ordering field's, or with several fields (Hudi 1.1's
`hoodie.table.ordering.fields`) their tuple, compared field by field through the one encoded
column copy-on-write compares by (`upsertlake.schema.ordering`); a delete block's tuple is Hudi's
ArrayWrapper (`upsertlake.logfile.deletes`).

A winning delete (a delete block entry, or a record with `_hoodie_is_deleted` true) removes the
key. The output holds `schema`'s columns (by default the base file's): base rows keep their
order, records only the log holds follow in log order; log records with fewer or more columns
are conformed (missing ones null).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from upsertlake.config.enums import MergeMode
from upsertlake.errors import SchemaError
from upsertlake.logfile import Block, CommandBlock, DataBlock, DeleteBlock
from upsertlake.logfile.blocks import refuse_hfile
from upsertlake.schema import conform
from upsertlake.schema.columns import DELETED_KEY, DELETED_NATURAL, DELETED_ORDERING, IS_DELETED
from upsertlake.schema.ordering import ordering_values

# event kinds: a record, a delete block's delete with an ordering value, one without (natural),
# a record with `_hoodie_is_deleted` true (a delete that merges as a record)
_DATA, _DELETE, _NATURAL_DELETE, _DELETED_RECORD = 0, 1, 2, 3


def live_blocks(
    blocks: list[Block], valid_instants: Collection[str] | Callable[[str], bool]
) -> list[DataBlock | DeleteBlock]:
    """The data and delete blocks that count: of a valid instant, and voided by no rollback
    command block in the slice."""
    refuse_hfile(blocks)
    is_valid = valid_instants if callable(valid_instants) else valid_instants.__contains__
    rolled_back = {b.target_instant for b in blocks if isinstance(b, CommandBlock)}
    return [
        b
        for b in blocks
        if isinstance(b, (DataBlock, DeleteBlock)) and b.instant not in rolled_back and is_valid(b.instant)
    ]


@dataclass(frozen=True)
class Merged:
    """A merged slice's records, and what compaction's write stat reports of the merge: how many
    distinct keys the log names, how many of the base file's keys it wrote (updates), and the
    keys only the log holds that were written (the new file's keys beyond the base's)."""

    records: pa.Table
    log_keys: int
    updates: int
    added: pa.Array


def merge_slice(
    base: pa.Table | None,
    blocks: list[Block],
    key_field: str,
    ordering: str | Sequence[str] | None,
    mode: MergeMode,
    valid_instants: Collection[str] | Callable[[str], bool],
    schema: pa.Schema | None = None,
    ordered: bool = True,
) -> pa.Table:
    """The slice's records after merging `blocks` (in log order) into `base` (None: a log-only
    file group). `ordering`: the ordering field, or several (compared in order, as copy-on-write
    compares them: `upsertlake.schema.ordering`); `valid_instants`: the instants whose blocks
    count (a set, or a predicate).
    `ordered`: records the log replaced keep their base row's place (as compaction writes them);
    else they follow the base rows that stay, which costs a copy less (a read)."""
    return merge_counted(base, blocks, key_field, ordering, mode, valid_instants, schema, ordered).records


def merge_counted(
    base: pa.Table | None,
    blocks: list[Block],
    key_field: str,
    ordering: str | Sequence[str] | None,
    mode: MergeMode,
    valid_instants: Collection[str] | Callable[[str], bool],
    schema: pa.Schema | None = None,
    ordered: bool = True,
) -> Merged:
    """`merge_slice`, with its counts."""
    live = live_blocks(blocks, valid_instants)
    out_schema = _output_schema(schema, base, live)
    if out_schema is None:
        return Merged(pa.table({}), 0, 0, pa.array([], pa.string()))
    fields = (ordering,) if isinstance(ordering, str) else tuple(ordering or ())
    tables = [base] + [b.records for b in live if isinstance(b, DataBlock)]
    events = _Events(key_field, _Ordering(fields, [_field_type(out_schema, f, tables) for f in fields]))
    base_table = conform(base, out_schema) if base is not None else out_schema.empty_table()
    log_tables = []
    row_offset = base_table.num_rows
    for block in live:
        if isinstance(block, DataBlock):
            events.add_records(block.records, row_offset)
            log_tables.append(conform(block.records, out_schema))
            row_offset += block.records.num_rows
        else:
            events.add_deletes(block.keys)
    if events.empty:
        return Merged(_drop_deleted(base_table, base), 0, 0, pa.array([], pa.string()))
    winners, positions, touched, log_keys = events.resolve(base, mode)
    n_base = base_table.num_rows
    stays = ~touched & ~_deleted_mask(base) if base is not None else np.zeros(0, bool)  # base rows the log left
    if ordered:
        kept_base = np.flatnonzero(stays)
        rows = np.concatenate([kept_base, winners])
        rows = rows[np.argsort(np.concatenate([kept_base, positions]), kind="stable")]
        merged = pa.concat_tables([base_table, *log_tables]).take(pa.array(rows, pa.int64()))
    else:
        # the base rows that stay (untouched, or winning over the log) are filtered, not taken
        # (a copy less); the log's winners follow them, in position order
        by_position = winners[np.argsort(positions, kind="stable")]
        from_log = by_position >= n_base
        stays[by_position[~from_log]] = True
        logs = pa.concat_tables(log_tables) if log_tables else out_schema.empty_table()
        merged = pa.concat_tables(
            [base_table.filter(pa.array(stays)), logs.take(pa.array(by_position[from_log] - n_base))]
        )
    # the keys only the log holds come last
    added = int((positions >= n_base).sum())
    keys = _strings(merged.column(key_field).slice(merged.num_rows - added)) if added else pa.array([], pa.string())
    return Merged(merged, log_keys, len(positions) - added, keys)


def _output_schema(
    schema: pa.Schema | None, base: pa.Table | None, live: list[DataBlock | DeleteBlock]
) -> pa.Schema | None:
    if schema is not None:
        return schema
    if base is not None:
        return base.schema
    data = [b for b in live if isinstance(b, DataBlock)]
    return data[-1].records.schema if data else None


def _field_type(schema: pa.Schema, field: str, tables: list[pa.Table | None]) -> pa.DataType:
    """An ordering field's type: the output schema's, else the first input's that has it."""
    if field in schema.names:
        return schema.field(field).type
    for table in tables:
        if table is not None and field in table.column_names:
            return table.schema.field(field).type
    return pa.null()


class _Ordering:
    """The ordering values events compete by: one field's as they are (in its type); several
    fields' as the one column `ordering_values` encodes, whose byte order is the tuples' order
    (a null sorts before any value of its field), as copy-on-write compares them."""

    def __init__(self, fields: tuple[str, ...], types: list[pa.DataType]) -> None:
        self.fields = fields
        # a field no input holds is all nulls: typed int64 so that it encodes
        self.types = [pa.int64() if len(fields) > 1 and pa.types.is_null(t) else t for t in types]
        self.type = self.types[0] if len(fields) == 1 else pa.null() if not fields else pa.large_binary()

    def of(self, records: pa.Table, n: int | None = None) -> pa.Array:
        """Each record's ordering value (a field it has not got is null); `n`: how many records
        (a table without columns has lost its count)."""
        n = records.num_rows if n is None else n
        if len(self.fields) == 1:
            if self.fields[0] not in records.column_names:
                return pa.nulls(n, self.type)
            column = records.column(self.fields[0]).combine_chunks()
            return column if column.type == self.type else column.cast(self.type)
        if not self.fields:
            return pa.nulls(n)
        columns = [
            records.column(f).combine_chunks().cast(t) if f in records.column_names else pa.nulls(n, t)
            for f, t in zip(self.fields, self.types)
        ]
        return _array(ordering_values(pa.table(columns, names=list(self.fields)), self.fields))

    def of_rows(self, records: pa.Table, rows: np.ndarray) -> pa.Array:
        """`of` the given rows of `records`, only their ordering fields taken."""
        present = records.select([f for f in self.fields if f in records.column_names])
        return self.of(present.take(pa.array(rows)), len(rows))

    def of_deletes(self, values: pa.Array) -> pa.Array | None:
        """A delete block's ordering values in the records' terms, or None when they are not of
        the records' types (Hudi then lets the deletes win): one field's value, or a struct of
        the fields' values in order (Hudi's ArrayComparable, `upsertlake.logfile.deletes`)."""
        if len(self.fields) <= 1:
            return values.cast(self.type) if _same_kind(values.type, self.type) else None
        kind = values.type
        if not pa.types.is_struct(kind) or kind.num_fields != len(self.fields):
            return None
        if not all(_same_kind(kind.field(i).type, t) for i, t in enumerate(self.types)):
            return None
        columns = [values.field(i).cast(t) for i, t in enumerate(self.types)]
        return self.of(pa.table(columns, names=list(self.fields)))


def _same_kind(value_type: pa.DataType, field_type: pa.DataType) -> bool:
    """Whether a delete's ordering values compare with the field's (all nulls do)."""
    if pa.types.is_null(value_type):
        return True
    return bool(value_type == field_type or (pa.types.is_decimal(value_type) and pa.types.is_decimal(field_type)))


def _array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _deleted_mask(data: pa.Table | None) -> np.ndarray:
    if data is None:
        return np.zeros(0, bool)
    if IS_DELETED not in data.column_names:
        return np.zeros(data.num_rows, bool)
    return np.asarray(pc.fill_null(data.column(IS_DELETED), False), dtype=bool)


def _drop_deleted(base_table: pa.Table, base: pa.Table | None) -> pa.Table:
    mask = _deleted_mask(base)
    return base_table.filter(pa.array(~mask)) if mask.any() else base_table


class _Events:
    """The log's events on keys, in log order: key, ordering value, kind, row in the merged table."""

    def __init__(self, key_field: str, ordering: _Ordering) -> None:
        self.key_field, self.ordering = key_field, ordering
        self.keys: list[pa.Array] = []
        self.orderings: list[pa.Array] = []
        self.kinds: list[np.ndarray] = []
        self.rows: list[np.ndarray] = []

    @property
    def empty(self) -> bool:
        return not self.kinds

    def add_records(self, records: pa.Table, row_offset: int) -> None:
        n = records.num_rows
        if self.key_field not in records.column_names:
            raise SchemaError(f"a log data block has no key column {self.key_field!r}")
        self.keys.append(_strings(records.column(self.key_field)))
        self.orderings.append(self.ordering.of(records))
        deleted = _deleted_mask(records)
        self.kinds.append(np.where(deleted, _DELETED_RECORD, _DATA).astype(np.int8))
        self.rows.append(np.where(deleted, -1, np.arange(row_offset, row_offset + n)))

    def add_deletes(self, keys: pa.Table) -> None:
        n = keys.num_rows
        self.keys.append(_strings(keys.column(DELETED_KEY)))
        natural = np.asarray(keys.column(DELETED_NATURAL), dtype=bool)
        given = _array(keys.column(DELETED_ORDERING))
        values = None if pa.types.is_null(given.type) else self.ordering.of_deletes(given)
        if values is None:
            # Hudi lets a delete win when its ordering value is not of the record's class
            natural = np.ones(n, bool)
            values = pa.nulls(n, self.ordering.type)
        else:
            values = pc.if_else(pa.array(natural), pa.nulls(n, values.type), values)
        self.orderings.append(values)
        self.kinds.append(np.where(natural, _NATURAL_DELETE, _DELETE).astype(np.int8))
        self.rows.append(np.full(n, -1, np.int64))

    def resolve(self, base: pa.Table | None, mode: MergeMode) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(the merged-table rows of the winning records, their output positions, which base rows
        the log touched, how many distinct keys the log names): a key the base file holds stays at
        its base row's position, a key only the log holds goes after the base rows, where the log
        first names it."""
        log_keys = pa.concat_arrays(self.keys)
        n_log = len(log_keys)
        n_base = base.num_rows if base is not None else 0
        # the base file's keys probe the log's chunk by chunk: combining them would copy them
        base_keys = pa.chunked_array([], pa.string())
        if base is not None and n_base:
            base_keys = base.column(self.key_field).cast(pa.string())
        log_codes, base_codes, distinct = _key_codes(log_keys, base_keys)
        touched = base_codes >= 0
        idx = np.flatnonzero(touched)
        base_deleted = _deleted_mask(base)[idx] if n_base else np.zeros(0, bool)
        group = np.concatenate([base_codes[idx], log_codes])
        base_ordering = self.ordering.of_rows(base, idx) if base is not None else pa.array([], self.ordering.type)
        ordering = pa.concat_arrays([base_ordering, *self.orderings])
        kind = np.concatenate([np.where(base_deleted, _DELETED_RECORD, _DATA).astype(np.int8), *self.kinds])
        row = np.concatenate([np.where(base_deleted, -1, idx), *self.rows])
        position = np.concatenate([idx, n_base + np.arange(n_log)])
        winners, firsts = _winners(group, ordering, kind, mode, n_base=len(idx))
        won = row[winners]
        live = won >= 0
        return won[live], position[firsts][live], touched, distinct


def _key_codes(log_keys: pa.Array, base_keys: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, int]:
    """(each log key's number, keys numbered 0, 1, ... in order of first appearance; each base
    key's number, -1 where the log does not name it; how many distinct keys the log names). The
    base keys only probe the log's: hashing them in too cost a quarter more."""
    encoded = pc.dictionary_encode(log_keys, null_encoding="encode")
    hit = pc.index_in(base_keys, value_set=encoded.dictionary, skip_nulls=False)
    base_codes = np.asarray(pc.fill_null(hit, -1), dtype=np.int64)
    return np.asarray(encoded.indices).astype(np.int64), base_codes, len(encoded.dictionary)


def _winners(
    key_group: np.ndarray, ordering: pa.Array, kind: np.ndarray, mode: MergeMode, n_base: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(each key's winning event, each key's first event), keys in the same order; events are
    numbered in the order they happened (their index), `key_group` numbers their keys, and the
    first `n_base` events are base records."""
    order = _by_key(key_group)
    sorted_groups = key_group[order]
    n = len(order)
    starts = np.ones(n, bool)
    starts[1:] = sorted_groups[1:] != sorted_groups[:-1]
    group = np.cumsum(starts) - 1
    ends = np.ones(n, bool)
    ends[:-1] = starts[1:]
    firsts = order[starts]
    if mode is MergeMode.COMMIT_TIME:
        return order[ends], firsts
    in_play, natural = _in_play(kind[order], order < n_base, starts, ends, group)
    competing = order[in_play]
    groups = group[in_play]
    comp_ordering = ordering.take(pa.array(competing))
    resets_any = bool(natural.any())
    if not resets_any and comp_ordering.null_count == 0 and _is_integral(comp_ordering.type):
        return competing[_last_largest(groups, comp_ordering)], firsts
    if resets_any:
        is_reset = pa.array(kind[competing] == _NATURAL_DELETE)
        comp_ordering = pc.if_else(is_reset, pa.nulls(len(competing), ordering.type), comp_ordering)
    ranked = np.asarray(
        pc.sort_indices(
            pa.table({"g": groups, "o": comp_ordering, "s": competing}),
            sort_keys=[("g", "ascending"), ("o", "ascending", "at_start"), ("s", "ascending")],
        )
    )
    g_sorted = groups[ranked]
    last = np.ones(len(ranked), bool)
    last[:-1] = g_sorted[1:] != g_sorted[:-1]
    return competing[ranked[last]], firsts


def _in_play(
    kind: np.ndarray, is_base: np.ndarray, starts: np.ndarray, ends: np.ndarray, group: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(which events compete under event time, which are natural deletes), events ordered by key
    and each key's in event order (`starts`/`ends` mark each key's first and last, `group` numbers
    them). A natural delete starts a run; in a key's last run the events from its first record
    on compete with the base record; with no record there, the natural delete alone (it wins).
    A key without natural deletes has every event compete, the base record among them."""
    natural = kind == _NATURAL_DELETE
    is_record = ((kind == _DATA) | (kind == _DELETED_RECORD)) & ~is_base
    run_start = natural | starts
    run = np.cumsum(run_start) - 1
    records_so_far = np.cumsum(is_record)
    in_run = records_so_far - (records_so_far - is_record)[np.flatnonzero(run_start)][run]  # records of its run so far
    last_run = run == run[ends][group]
    naturals = np.cumsum(natural)
    had_natural = (naturals[ends] - (naturals - natural)[starts])[group] > 0
    revived = in_run[ends][group] > 0  # a record follows the key's last natural delete
    in_play = last_run & (~had_natural | (in_run > 0))
    in_play |= is_base & (~had_natural | revived)
    in_play |= natural & last_run & ~revived
    return in_play, natural


def _by_key(key_group: np.ndarray) -> np.ndarray:
    """The events ordered by key number, each key's in event order: a stable argsort, done as
    one sort of (key, event) packed in an int64, key * n + event < n**2 (numpy's vectorized sort
    of int64 takes a fifth of the time of its stable argsort)."""
    n = len(key_group)
    return np.sort(key_group.astype(np.int64) * n + np.arange(n, dtype=np.int64)) % n


def _is_integral(t: pa.DataType) -> bool:
    """An ordering type whose values compare as int64 (not uint64, which may not fit)."""
    if pa.types.is_integer(t):
        return bool(t != pa.uint64())
    return bool(pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t))


def _last_largest(groups: np.ndarray, ordering: pa.Array) -> np.ndarray:
    """Per run of equal `groups` (events in event order), the index of its last event holding
    the run's largest ordering value (`_is_integral`, no nulls): what sorting by (group, value,
    event) and taking each group's last finds, in linear time."""
    if not pa.types.is_integer(ordering.type):
        ordering = ordering.view(pa.int64() if ordering.type.bit_width == 64 else pa.int32())
    values = ordering.to_numpy().astype(np.int64)
    start = np.ones(len(groups), bool)
    start[1:] = groups[1:] != groups[:-1]
    starts = np.flatnonzero(start)
    at_largest = values == np.maximum.reduceat(values, starts)[np.cumsum(start) - 1]
    return np.maximum.reduceat(np.where(at_largest, np.arange(len(values)), -1), starts)


def _strings(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return array if array.type == pa.string() else array.cast(pa.string())

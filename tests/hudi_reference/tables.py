"""Tables that Apache Hudi and upsertlake write together in the tests: a layout (table type,
version, index, partitioning, ordering, columns) with the options each writer takes, batches of
rows with nullable columns of every type Hudi maps, and the exact comparison of two readers' rows
(meta columns included) or of a reader's rows with the model's (tests/table_model.py)."""

from __future__ import annotations

import datetime as dt
import random
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from upsertlake import create_table, open_table
from upsertlake.timeline.instant import Action

from table_model import Row

UTC = dt.timezone.utc
META = [
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
]
EVENT_TIME, COMMIT_TIME = "EVENT_TIME_ORDERING", "COMMIT_TIME_ORDERING"

PLAIN = pa.schema(
    [
        ("id", pa.string()),
        ("ts", pa.int64()),
        ("p", pa.string()),
        ("q", pa.int32()),
        ("v", pa.float64()),
        ("_hoodie_is_deleted", pa.bool_()),
    ]
)
TYPES = pa.schema(
    [
        ("dec", pa.decimal128(12, 3)),
        ("day", pa.date32()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("bin", pa.binary()),
        ("nested", pa.struct([("a", pa.int32()), ("b", pa.string())])),
        ("items", pa.list_(pa.int64())),
        ("attrs", pa.map_(pa.string(), pa.int32())),
    ]
)


@dataclass(frozen=True)
class Layout:
    table_type: str
    version: int
    index: str
    partitioning: str  # "one" (p), "two" (p, q) or "none"
    ordering: str = EVENT_TIME
    hive: bool = False
    all_types: bool = True

    def __str__(self) -> str:
        kind = "mor" if self.merge_on_read else "cow"
        return (
            f"{kind}-v{self.version}-{self.index.lower()}-{self.partitioning}-"
            f"{'event' if self.event_time else 'commit'}{'-hive' if self.hive else ''}"
            f"{'-types' if self.all_types else ''}"
        )

    @property
    def merge_on_read(self) -> bool:
        return self.table_type == "MERGE_ON_READ"

    @property
    def event_time(self) -> bool:
        return self.ordering == EVENT_TIME

    @property
    def is_global(self) -> bool:
        return self.index.startswith("GLOBAL")

    @property
    def partition_fields(self) -> list[str]:
        return {"one": ["p"], "two": ["p", "q"], "none": []}[self.partitioning]

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([*PLAIN, *(TYPES if self.all_types else [])])

    @property
    def record_key(self) -> list[str]:
        """Two partition fields come with a two-field key (`q` is a function of `id`), so the
        complex key generator encodes field names as every Hudi release does."""
        return ["id", "q"] if self.partitioning == "two" else ["id"]

    @property
    def keygen(self) -> str:
        if not self.partition_fields:
            return "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
        if len(self.partition_fields) > 1:
            return "org.apache.hudi.keygen.ComplexKeyGenerator"
        return "org.apache.hudi.keygen.SimpleKeyGenerator"

    def index_options(self) -> dict[str, str]:
        """The write options every writer of the table passes, Hudi's keys."""
        options = {"hoodie.index.type": self.index}
        if self.index == "BUCKET":
            options |= {
                "hoodie.bucket.index.num.buckets": "2",
                "hoodie.bucket.index.hash.field": "id",
                "hoodie.index.bucket.engine": "SIMPLE",
            }
        if self.is_global:
            options |= {
                "hoodie.simple.index.update.partition.path": "true",
                "hoodie.bloom.index.update.partition.path": "true",
            }
        return options

    def hudi_options(self, operation: str) -> dict[str, str]:
        """Hudi's datasource options for a write of `operation` to this table."""
        options = {
            "hoodie.table.name": "t",
            "hoodie.datasource.write.table.type": self.table_type,
            "hoodie.datasource.write.operation": operation,
            "hoodie.datasource.write.recordkey.field": ",".join(self.record_key),
            "hoodie.datasource.write.precombine.field": "ts",
            "hoodie.datasource.write.partitionpath.field": ",".join(self.partition_fields),
            "hoodie.datasource.write.keygenerator.class": self.keygen,
            "hoodie.datasource.write.hive_style_partitioning": str(self.hive).lower(),
            "hoodie.combine.before.insert": "true",
            "hoodie.metadata.enable": "false",
            **self.index_options(),
        }
        if self.index == "BUCKET" and operation == "bulk_insert":
            # Hudi's row-writer bulk insert (BucketIndexBulkInsertPartitionerWithRows) opens a new file
            # group for every bucket, also where the bucket has one, and Hudi's own bucket index then
            # refuses the partition ("multiple files ... belongs to the same bucket id"); its RDD path
            # (RDDSimpleBucketBulkInsertPartitioner) writes into the existing groups.
            options["hoodie.datasource.write.row.writer.enable"] = "false"
            if self.version == 6 and not self.merge_on_read:
                # Hudi 0.15's RDD path appends log files to a copy-on-write table's buckets, which
                # no copy-on-write reader reads (Hudi's neither): the rows are lost. An insert it is.
                options["hoodie.datasource.write.operation"] = "insert"
        if self.version == 6 and operation == "bulk_insert":
            options |= HUDI_0_15_AVRO_WRITER
        if self.version == 6:
            payload = "DefaultHoodieRecordPayload" if self.event_time else "OverwriteWithLatestAvroPayload"
            options["hoodie.datasource.write.payload.class"] = f"org.apache.hudi.common.model.{payload}"
        else:
            options |= {
                "hoodie.write.table.version": str(self.version),
                # Hudi's writer creates a table in the mode its write key says (without it: event
                # time where an ordering field is set); the table key is checked against the table's.
                "hoodie.write.record.merge.mode": self.ordering,
                "hoodie.record.merge.mode": self.ordering,
                "hoodie.write.auto.upgrade": "false",
            }
        return options

    def procedure_conf(self) -> dict[str, str]:
        """What Hudi's procedures (run_compaction, run_clean, savepoints, ...) must be told of the
        table, as its writes are: keep its version, no metadata table (the tests of the metadata
        table make their own)."""
        conf = {"hoodie.metadata.enable": "false"}
        if self.version == 6:
            conf |= HUDI_0_15_AVRO_WRITER  # clustering
        if self.version != 6:
            conf |= {"hoodie.write.table.version": str(self.version), "hoodie.write.auto.upgrade": "false"}
        return conf

    def our_create_options(self) -> dict[str, object]:
        return {
            "hoodie.write.table.version": self.version,
            "hoodie.record.merge.mode": self.ordering,
            "hoodie.datasource.write.keygenerator.class": self.keygen,
        }


# Hudi 0.15's row writer (bulk_insert, clustering) writes a table whose schema holds a decimal in
# Spark's legacy Parquet format, lists as `bag`/`array` groups, and its own small-file merge
# (parquet-avro) then reads those lists as null: a later Hudi insert into that file group loses
# them. The sequences keep Hudi 0.15 on its Avro writer; test_crossover pins that we keep such
# lists when we rewrite the file.
HUDI_0_15_AVRO_WRITER = {"hoodie.datasource.write.row.writer.enable": "false"}


# -- batches --------------------------------------------------------------------------------------


def partition_of(key: int) -> tuple[str, int]:
    return f"p{key % 3}", key % 2


def make_row(rng: random.Random, key: int, ts: int, step: int, p: str | None = None, deleted: bool = False) -> Row:
    home, q = partition_of(key)
    row: Row = {
        "id": f"k{key:04d}",
        "ts": ts,
        "p": p or home,
        "q": q,
        "v": float(step * 10000 + key),
        "_hoodie_is_deleted": deleted,
    }

    def maybe(value: object) -> object:
        return None if rng.random() < 0.15 else value

    row.update(
        {
            "dec": maybe(Decimal(f"{rng.randint(-99999, 99999)}.{rng.randint(0, 999):03d}")),
            "day": maybe(dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 900))),
            "at": maybe(dt.datetime(2024, 6, 1, tzinfo=UTC) + dt.timedelta(microseconds=rng.randint(0, 10**12))),
            "bin": maybe(rng.randbytes(rng.randint(0, 6))),
            "nested": maybe({"a": maybe(rng.randint(-5, 5)), "b": maybe(f"s{step}")}),
            "items": maybe([rng.randint(0, 9) for _ in range(rng.randint(0, 3))]),
            "attrs": maybe([(f"k{j}", rng.randint(0, 9)) for j in range(rng.randint(0, 2))]),
        }
    )
    return row


# -- comparing ------------------------------------------------------------------------------------


def _plain(value: object) -> object:
    """A value as both readers' rows can be compared: maps as sorted pairs, instants in UTC."""
    if isinstance(value, list):
        items = [_plain(v) for v in value]
        return sorted(items) if items and isinstance(items[0], tuple) else items
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(UTC)
    return value


def keyed(table: pa.Table, columns: list[str], what: str) -> dict[str, Row]:
    """Rows by record key, the given columns only; a key read twice fails."""
    out: dict[str, Row] = {}
    for row in table.select(columns).to_pylist():
        key = str(row["id"])
        assert key not in out, f"{what}: key {key} read twice"
        out[key] = {c: _plain(row[c]) for c in columns}
    return out


def assert_rows(ours: pa.Table, theirs: pa.Table, what: str, unique: bool = True) -> None:
    """Hudi's rows and ours: the same columns and, by key, the same values (meta columns too).
    `unique=False`: a key may be read more than once (a merge-on-read table's read-optimized view
    under a global index: a key deleted in a log and inserted again into another file group is in
    both base files), so the rows are compared as a multiset."""
    if theirs.num_columns == 0:  # nothing to read gives no schema
        assert ours.num_rows == 0, f"{what}: Hudi reads nothing, we read {ours.num_rows} rows"
        return
    assert sorted(ours.column_names) == sorted(theirs.column_names), what
    columns = ours.column_names
    if not unique:
        mine_rows = sorted(repr(sorted(_plain(r).items())) for r in ours.select(columns).to_pylist())
        hudi_rows = sorted(repr(sorted(_plain(r).items())) for r in theirs.select(columns).to_pylist())
        assert mine_rows == hudi_rows, f"{what}: rows only we read {sorted(set(mine_rows) - set(hudi_rows))[:2]}, " \
            f"only Hudi {sorted(set(hudi_rows) - set(mine_rows))[:2]}"
        return
    mine, hudi = keyed(ours, columns, what + " (ours)"), keyed(theirs, columns, what + " (Hudi)")
    assert mine.keys() == hudi.keys(), (
        f"{what}: keys only we read {sorted(mine.keys() - hudi.keys())[:5]}, "
        f"only Hudi {sorted(hudi.keys() - mine.keys())[:5]}"
    )
    differ = [k for k in mine if mine[k] != hudi[k]]
    if differ:
        k = differ[0]
        cols = [c for c in columns if mine[k][c] != hudi[k][c]]
        raise AssertionError(
            f"{what}: {len(differ)} rows differ; {k}: ours {[mine[k][c] for c in cols]} "
            f"Hudi {[hudi[k][c] for c in cols]} in {cols}"
        )


def assert_model(ours: pa.Table, model: dict[str, Row], layout: Layout, what: str) -> None:
    columns = [f.name for f in layout.schema if f.name != "_hoodie_is_deleted"]
    got = keyed(ours, columns, what)
    want = {k: {c: _plain(r[c]) for c in columns} for k, r in model.items()}
    assert got.keys() == want.keys(), (
        f"{what}: keys only read {sorted(got.keys() - want.keys())[:5]}, "
        f"only in the model {sorted(want.keys() - got.keys())[:5]}"
    )
    differ = [k for k in got if got[k] != want[k]]
    assert not differ, (
        f"{what}: {len(differ)} rows differ from the model, e.g. {differ[0]}: {got[differ[0]]} != {want[differ[0]]}"
    )


# -- writing --------------------------------------------------------------------------------------


def create_ours(layout: Layout, path: Path):
    """The table, created by upsertlake (Hudi creates it with its first write)."""
    return create_table(
        path,
        "t",
        record_key=layout.record_key,
        precombine_field="ts",
        partition_fields=layout.partition_fields,
        hive_style_partitioning=layout.hive,
        table_type=layout.table_type,
        options=layout.our_create_options(),
    )


def write(
    actor: str,
    layout: Layout,
    path: Path,
    operation: str,
    data: pa.Table,
    hudi=None,
    spark=None,
    extra: dict[str, str] | None = None,
) -> None:
    """One write of `data` by `actor`: "hudi" (Hudi's Spark datasource), "ours" (in process) or
    "spark" (`upsertlake.spark`), with the layout's options and `extra` ones."""
    if actor == "hudi":
        hudi.write(path, data, {**layout.hudi_options(operation), **(extra or {})})
        return
    options = {**layout.index_options(), **(extra or {})}
    if actor == "spark":
        import upsertlake.spark as uls

        getattr(uls, operation)(spark.createDataFrame(data), str(path), **options)
    else:
        getattr(open_table(path), operation)(data, options)


# Hudi schedules a compaction once hoodie.compact.inline.max.delta.commits (5) deltacommits have
# passed; the tests compact on demand, as `upsertlake compact` does.
COMPACT_NOW = "hoodie.compact.inline.max.delta.commits=1"


# -- failed writes --------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
OUR_KILLED_WRITE = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {root!r})
    import pyarrow as pa
    from upsertlake import open_table
    from upsertlake.engine import write_client

    def die(*args, **kwargs):
        os.kill(os.getpid(), 9)  # every file written, the commit never comes

    write_client.WriteClient.commit = die
    open_table({path!r}).upsert(pa.ipc.open_file({data!r}).read_all(), {options!r})
    """
)


def pending(path: Path) -> list[str]:
    """The writes started and not completed (a compaction's plan aside)."""
    return [i.time for i in open_table(path).timeline() if not i.is_completed and i.action is not Action.COMPACTION]


def base_files_of(path: Path, instant: str) -> list[Path]:
    """Base files a write `instant` left in the partitions (a rolled back merge-on-read write's
    log files may stay, voided by a rollback block, as Hudi leaves them)."""
    return list(path.rglob(f"*_{instant}.parquet"))


def new_data_files(path: Path, before: set[Path]) -> list[Path]:
    """The base and log files in the partitions that are not in `before`."""
    return [
        p
        for p in path.rglob("*")
        if p.is_file()
        and p not in before
        and ".hoodie" not in p.parts
        and not p.name.endswith(".crc")
        and (p.suffix == ".parquet" or ".log." in p.name)
    ]


def killed_write(actor: str, layout: Layout, path: Path, data: pa.Table, hudi=None) -> bool:
    """An upsert of `data` whose writer dies (SIGKILL) after writing files, before its commit:
    Hudi's driver (JVM included) once its instant is pending and a data file of it exists, ours
    at its commit. Returns False when Hudi's write completed before it could be killed."""
    if actor == "hudi":
        before = {p for p in path.rglob("*") if p.is_file()}
        return bool(hudi.killed_write(
            path, data, layout.hudi_options("upsert"),
            until=lambda: bool(pending(path)) and bool(new_data_files(path, before)),
        ))
    file = path.parent / "killed.arrow"
    with pa.OSFile(str(file), "wb") as sink, pa.ipc.new_file(sink, data.schema) as writer:
        writer.write_table(data)
    script = OUR_KILLED_WRITE.format(root=str(REPO), path=str(path), data=str(file), options=layout.index_options())
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr
    return True

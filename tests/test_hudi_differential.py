"""Apache Hudi and upsertlake on one table, step by step, with Hudi as the judge.

Each seeded sequence builds one table layout (copy-on-write or merge-on-read; table version 6 with
Hudi 0.15, 8 with Hudi 1.1; an index among SIMPLE, BLOOM, GLOBAL_SIMPLE and BUCKET; one partition
field, two, or none; event-time or commit-time ordering; nullable columns of every type Hudi maps)
and takes random steps, each done by Apache Hudi's Spark datasource or by upsertlake (in process or
through `upsertlake.spark`): upserts with updates, new keys, late rows (smaller ordering values),
in-batch duplicates and, under a global index, partition moves; inserts; bulk inserts; deletes;
`_hoodie_is_deleted` rows; compaction (inline with a write, or on its own), clean and clustering.

After every step the rows are the same through Hudi's Spark reader and ours, and equal the model
(tests/table_model.py): the snapshot, the read-optimized view of merge-on-read tables, time travel
to a random completed write and an incremental read from a random instant; hudi-rs reads the same
where it can read the table (it cannot read timestamp columns, so only the layouts without them).
All five meta columns are compared too, so a file name, a commit time or a sequence number that
differs is caught.

`UPSERTLAKE_HUDI_SEEDS=N` runs N sequences of every layout below (the suite runs one each).
"""

from __future__ import annotations

import datetime as dt
import os
import random
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from helpers import hudi_read
from table_model import Row, TableModel
from upsertlake import create_table, open_table

UTC = dt.timezone.utc
META = ["_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name"]
EVENT_TIME, COMMIT_TIME = "EVENT_TIME_ORDERING", "COMMIT_TIME_ORDERING"
SEEDS = int(os.environ.get("UPSERTLAKE_HUDI_SEEDS", "1"))
STEPS = int(os.environ.get("UPSERTLAKE_HUDI_STEPS", "8"))

PLAIN = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("p", pa.string()), ("q", pa.int32()),
                   ("v", pa.float64()), ("_hoodie_is_deleted", pa.bool_())])
TYPES = pa.schema([
    ("dec", pa.decimal128(12, 3)),
    ("day", pa.date32()),
    ("at", pa.timestamp("us", tz="UTC")),
    ("bin", pa.binary()),
    ("nested", pa.struct([("a", pa.int32()), ("b", pa.string())])),
    ("items", pa.list_(pa.int64())),
    ("attrs", pa.map_(pa.string(), pa.int32())),
])


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
        return (f"{kind}-v{self.version}-{self.index.lower()}-{self.partitioning}-"
                f"{'event' if self.event_time else 'commit'}{'-hive' if self.hive else ''}{'-types' if self.all_types else ''}")

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
            options |= {"hoodie.bucket.index.num.buckets": "2", "hoodie.bucket.index.hash.field": "id",
                        "hoodie.index.bucket.engine": "SIMPLE"}
        if self.is_global:
            options |= {"hoodie.simple.index.update.partition.path": "true",
                        "hoodie.bloom.index.update.partition.path": "true"}
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
        if self.version == 6:
            payload = "DefaultHoodieRecordPayload" if self.event_time else "OverwriteWithLatestAvroPayload"
            options["hoodie.datasource.write.payload.class"] = f"org.apache.hudi.common.model.{payload}"
        else:
            options |= {"hoodie.write.table.version": str(self.version), "hoodie.record.merge.mode": self.ordering,
                        "hoodie.write.auto.upgrade": "false"}
        return options

    def our_create_options(self) -> dict[str, object]:
        return {"hoodie.write.table.version": self.version, "hoodie.record.merge.mode": self.ordering,
                "hoodie.datasource.write.keygenerator.class": self.keygen}


# -- batches --------------------------------------------------------------------------------------


def partition_of(key: int) -> tuple[str, int]:
    return f"p{key % 3}", key % 2


def make_row(rng: random.Random, key: int, ts: int, step: int, p: str | None = None, deleted: bool = False) -> Row:
    home, q = partition_of(key)
    row: Row = {"id": f"k{key:04d}", "ts": ts, "p": p or home, "q": q, "v": float(step * 10000 + key),
                "_hoodie_is_deleted": deleted}

    def maybe(value: object) -> object:
        return None if rng.random() < 0.15 else value

    row.update({
        "dec": maybe(Decimal(f"{rng.randint(-99999, 99999)}.{rng.randint(0, 999):03d}")),
        "day": maybe(dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 900))),
        "at": maybe(dt.datetime(2024, 6, 1, tzinfo=UTC) + dt.timedelta(microseconds=rng.randint(0, 10**12))),
        "bin": maybe(rng.randbytes(rng.randint(0, 6))),
        "nested": maybe({"a": maybe(rng.randint(-5, 5)), "b": maybe(f"s{step}")}),
        "items": maybe([rng.randint(0, 9) for _ in range(rng.randint(0, 3))]),
        "attrs": maybe([(f"k{j}", rng.randint(0, 9)) for j in range(rng.randint(0, 2))]),
    })
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


def assert_rows(ours: pa.Table, theirs: pa.Table, what: str) -> None:
    """Hudi's rows and ours: the same columns and, by key, the same values (meta columns too)."""
    if theirs.num_columns == 0:  # nothing to read gives no schema
        assert ours.num_rows == 0, f"{what}: Hudi reads nothing, we read {ours.num_rows} rows"
        return
    assert sorted(ours.column_names) == sorted(theirs.column_names), what
    columns = ours.column_names
    mine, hudi = keyed(ours, columns, what + " (ours)"), keyed(theirs, columns, what + " (Hudi)")
    assert mine.keys() == hudi.keys(), (
        f"{what}: keys only we read {sorted(mine.keys() - hudi.keys())[:5]}, only Hudi {sorted(hudi.keys() - mine.keys())[:5]}")
    differ = [k for k in mine if mine[k] != hudi[k]]
    if differ:
        k = differ[0]
        cols = [c for c in columns if mine[k][c] != hudi[k][c]]
        raise AssertionError(f"{what}: {len(differ)} rows differ; {k}: ours {[mine[k][c] for c in cols]} "
                             f"Hudi {[hudi[k][c] for c in cols]} in {cols}")


def assert_model(ours: pa.Table, model: dict[str, Row], layout: Layout, what: str) -> None:
    columns = [f.name for f in layout.schema if f.name != "_hoodie_is_deleted"]
    got = keyed(ours, columns, what)
    want = {k: {c: _plain(r[c]) for c in columns} for k, r in model.items()}
    assert got.keys() == want.keys(), (
        f"{what}: keys only read {sorted(got.keys() - want.keys())[:5]}, only in the model {sorted(want.keys() - got.keys())[:5]}")
    differ = [k for k in got if got[k] != want[k]]
    assert not differ, f"{what}: {len(differ)} rows differ from the model, e.g. {differ[0]}: {got[differ[0]]} != {want[differ[0]]}"


# -- the sequence ---------------------------------------------------------------------------------


class Sequence:
    """One table, its model, and the steps taken on it."""

    def __init__(self, layout: Layout, path: Path, hudi, spark, rng: random.Random) -> None:
        self.layout, self.path, self.hudi, self.spark, self.rng = layout, path, hudi, spark, rng
        self.model = TableModel(event_time=layout.event_time)
        self.next_key = 0
        self.step_no = 0
        self.log: list[str] = []
        self.cleaned = False

    # batches
    def new_rows(self, n: int, ts: int = 1) -> list[Row]:
        keys = range(self.next_key, self.next_key + n)
        self.next_key += n
        return [make_row(self.rng, k, ts, self.step_no) for k in keys]

    def stored(self, lo: int, hi: int) -> list[Row]:
        keys = sorted(self.model.rows)
        return [self.model.rows[k] for k in self.rng.sample(keys, min(len(keys), self.rng.randint(lo, hi)))]

    def batch(self, rows: list[Row]) -> pa.Table:
        return pa.Table.from_pylist(rows, schema=self.layout.schema)

    # writers
    def write(self, actor: str, operation: str, rows: list[Row], extra: dict[str, str] | None = None) -> None:
        data = self.batch(rows)
        options = {**self.layout.index_options(), **(extra or {})}
        if actor == "hudi":
            self.hudi.write(self.path, data, {**self.layout.hudi_options(operation), **(extra or {})})
        elif actor == "spark":
            import upsertlake.spark as uls

            getattr(uls, operation)(self.spark.createDataFrame(data), str(self.path), **options)
        else:
            getattr(open_table(self.path), operation)(data, options)

    def create(self, actor: str) -> None:
        if actor != "hudi":
            create_table(self.path, "t", record_key=self.layout.record_key, precombine_field="ts",
                         partition_fields=self.layout.partition_fields, hive_style_partitioning=self.layout.hive,
                         table_type=self.layout.table_type, options=self.layout.our_create_options())

    def committed(self) -> None:
        """Remember the model's rows as of the write that just completed."""
        latest = [i for i in open_table(self.path).timeline() if i.is_completed and i.action != "clean"][-1]
        visible = latest.time if self.layout.version == 6 else latest.completion
        self.model.committed(latest.time, visible)

    # steps
    def step(self, actor: str, op: str) -> None:
        self.step_no += 1
        self.log.append(f"{actor}:{op}")
        rng, lay = self.rng, self.layout
        if op == "upsert":
            rows = [dict(r, **self.changed(r)) for r in self.stored(1, 6)] + self.new_rows(rng.randint(0, 3))
            if lay.event_time and rows and rng.random() < 0.3:  # an in-batch duplicate with a smaller ts
                first = rows[0]
                rows.append(dict(make_row(rng, int(str(first["id"])[1:]), int(first["ts"]) - 1, self.step_no), p=first["p"]))
            self.write(actor, "upsert", rows)
            self.model.upsert(rows)
        elif op == "late":  # rows with smaller ordering values than stored
            rows = [dict(make_row(rng, int(str(r["id"])[1:]), int(r["ts"]) - rng.randint(1, 3), self.step_no), p=r["p"])
                    for r in self.stored(1, 4)]
            self.write(actor, "upsert", rows)
            self.model.upsert(rows)
        elif op in ("insert", "bulk_insert"):
            rows = self.new_rows(rng.randint(2, 7))
            self.write(actor, op, rows)
            self.model.insert(rows)
        elif op == "delete":
            rows = self.stored(1, 3)
            self.write(actor, "delete", rows)
            self.model.delete([str(r["id"]) for r in rows])
        elif op == "is_deleted":
            rows = [dict(make_row(rng, int(str(r["id"])[1:]), int(r["ts"]) + rng.choice([0, 1]), self.step_no, deleted=True),
                         p=r["p"]) for r in self.stored(1, 3)]
            self.write(actor, "upsert", rows)
            self.model.upsert(rows)
        elif op == "compact":
            self.compact(actor)
            return
        elif op == "clean":
            self.clean(actor)
            return
        elif op == "cluster":
            self.cluster(actor)
            return
        else:
            raise AssertionError(op)
        self.committed()

    def changed(self, row: Row) -> dict[str, object]:
        """An update of a stored row: a larger (or equal) ts, new values, under a global index
        sometimes another partition."""
        fresh = make_row(self.rng, int(str(row["id"])[1:]), int(row["ts"]) + self.rng.choice([0, 1, 2]), self.step_no)
        fresh["p"] = row["p"]
        if self.layout.is_global and self.layout.partition_fields and self.rng.random() < 0.3:
            fresh["p"] = self.rng.choice([p for p in ("p0", "p1", "p2") if p != row["p"]])
        return fresh

    def compact(self, actor: str) -> None:
        if actor == "hudi":
            self.hudi.call(self.path, "run_compaction", op="scheduleAndExecute")
        else:
            open_table(self.path).compact()

    def clean(self, actor: str) -> None:
        if actor == "hudi":
            self.hudi.call(self.path, "run_clean", retain_commits=2)
        else:
            open_table(self.path).clean("KEEP_LATEST_COMMITS", 2)
        self.cleaned = True

    def cluster(self, actor: str) -> None:
        if actor == "hudi":
            self.hudi.call(self.path, "run_clustering")
        else:
            open_table(self.path).cluster({"hoodie.clustering.plan.strategy.small.file.limit": 1 << 30})
        self.committed()

    # checks
    def check(self) -> None:
        what = f"{self.layout} after {' '.join(self.log)}"
        table = open_table(self.path)
        ours = table.read()
        assert_model(ours, self.model.rows, self.layout, f"{what}: our snapshot")
        assert_rows(ours, self.hudi.snapshot(self.path), f"{what}: snapshot")
        if self.layout.merge_on_read:
            ro = table.read(query_type="read_optimized")
            assert_rows(ro, self.hudi.read_optimized(self.path), f"{what}: read-optimized")
        writes = self.model.history if not self.cleaned else self.model.history[-2:]
        if writes:
            _, visible, _ = self.rng.choice(writes)
            as_of = table.read(as_of=visible)
            assert_model(as_of, self.model.as_of(visible), self.layout, f"{what}: ours as of {visible}")
            assert_rows(as_of, self.hudi.as_of(self.path, visible), f"{what}: as of {visible}")
            begin = self.rng.choice(["000", *(v for _, v, _ in writes[:-1])])
            assert_rows(table.read_incremental(begin), self.hudi.incremental(self.path, begin), f"{what}: incremental from {begin}")
        if not self.layout.all_types:
            assert_rows(ours, hudi_read(self.path), f"{what}: hudi-rs snapshot")


def operations(layout: Layout) -> list[tuple[str, int]]:
    ops = [("upsert", 6), ("insert", 2), ("bulk_insert", 1), ("delete", 2), ("is_deleted", 1), ("clean", 1)]
    if layout.event_time:
        ops.append(("late", 2))
    if layout.merge_on_read:
        ops.append(("compact", 2))
    if layout.index != "BUCKET":
        ops.append(("cluster", 1))
    return ops


def run(layout: Layout, path: Path, hudi, spark, seed: int) -> None:
    rng = random.Random(f"{layout}-{seed}")
    seq = Sequence(layout, path, hudi, spark, rng)
    actors = ["hudi", "ours", "spark"] if spark is not None else ["hudi", "ours"]
    first = rng.choice(actors)
    seq.create(first)
    seq.step(first, "insert")
    seq.check()
    ops, weights = zip(*operations(layout))
    for _ in range(STEPS):
        seq.step(rng.choice(actors), rng.choices(ops, weights)[0])
        seq.check()


# One sequence per layout in the suite; together they cover every value of every dimension.
LAYOUTS = [
    Layout("COPY_ON_WRITE", 8, "SIMPLE", "one"),
    Layout("MERGE_ON_READ", 8, "BLOOM", "two", COMMIT_TIME),
    Layout("COPY_ON_WRITE", 6, "GLOBAL_SIMPLE", "one", hive=True),
    Layout("MERGE_ON_READ", 6, "SIMPLE", "none", all_types=False),
    Layout("MERGE_ON_READ", 8, "BUCKET", "one", all_types=False),
    Layout("COPY_ON_WRITE", 6, "BUCKET", "two", COMMIT_TIME),
    Layout("MERGE_ON_READ", 8, "GLOBAL_SIMPLE", "one"),
    Layout("COPY_ON_WRITE", 8, "BLOOM", "none", COMMIT_TIME, all_types=False),
]


@pytest.mark.hudi
@pytest.mark.parametrize("seed", range(SEEDS))
@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_hudi_and_upsertlake_read_the_same_after_every_step(layout: Layout, seed: int, tmp_path: Path, hudi_references, spark) -> None:
    run(layout, tmp_path / "t", hudi_references.for_table_version(layout.version), spark, seed)

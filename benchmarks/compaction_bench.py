"""Compaction benchmark: a merge-on-read slice set of 1M base rows (20 partitions, one file group
each) with 100K uniform updates in Avro log blocks, compacted, against the copy-on-write upsert
of the same 100K updates into the same 1M rows (which rewrites the same 20 files). Each timed run
is a fresh process on a fresh copy of the table.

The write path of merge-on-read tables is not in upsertlake yet, so the logged updates are written
with the log codec (`upsertlake.logfile`) as one completed deltacommit, as Hudi's append handle
writes them: one Avro data block per file group, in a log file of the group's slice.

    python benchmarks/compaction_bench.py [--rows 1000000] [--updates 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workloads import PARTITIONS, make_rows  # noqa: E402

OPTS = {"hoodie.parquet.small.file.limit": 0, "hoodie.clean.automatic": False, "hoodie.archive.automatic": False}
EVENT_TIME_PAYLOAD = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"


def build(folder: Path, rows: int, updates: int) -> tuple[Path, Path]:
    """(the copy-on-write table, the same table as merge-on-read with the updates logged)."""
    import upsertlake
    from upsertlake.logfile import append_blocks, data_block
    from upsertlake.logfile.avro_records import with_meta_fields
    from upsertlake.timeline.active import Timeline, create_requested, transition
    from upsertlake.timeline.commit_metadata import CommitMetadata, WriteStat
    from upsertlake.timeline.instant import Action, State

    rng = np.random.default_rng(7)
    cow = folder / "cow"
    table = upsertlake.create_table(cow, name="bench", record_key="key", precombine_field="ts", partition_fields=["part"])
    table.bulk_insert(make_rows(np.arange(rows), rows, 1, rng, PARTITIONS), OPTS)
    batch = make_rows(rng.choice(rows, updates, replace=False), rows, 2, rng, PARTITIONS)
    batch_path = folder / "updates.parquet"
    import pyarrow.parquet as pq

    pq.write_table(batch, batch_path)
    mor = folder / "mor"
    shutil.copytree(cow, mor)
    props = mor / ".hoodie" / "hoodie.properties"
    text = props.read_text("latin-1").replace("hoodie.table.type=COPY_ON_WRITE", "hoodie.table.type=MERGE_ON_READ")
    props.write_text(text + f"hoodie.compaction.payload.class={EVENT_TIME_PAYLOAD}\n", "latin-1")

    # The updates as one deltacommit: per file group, a log file of its slice with one Avro block.
    table = upsertlake.open_table(mor)
    storage = table.storage
    where = table.read(columns=["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name"])
    located = batch.join(where, "key", "_hoodie_record_key", join_type="inner")
    requested = create_requested(storage, Action.DELTA_COMMIT)
    inflight = transition(storage, requested, State.INFLIGHT)
    t = requested.time
    schema_json = Timeline.load(storage).latest_schema()
    writer_schema = json.dumps(with_meta_fields(json.loads(schema_json)))
    stats: dict[str, list[WriteStat]] = {}
    names = located["_hoodie_file_name"]
    for name in pc.unique(names).to_pylist():
        rows_of = located.filter(pc.equal(names, name))
        file_id, _, base_instant = name.removesuffix(".parquet").split("_")
        partition = rows_of["_hoodie_partition_path"][0].as_py()
        n = rows_of.num_rows
        records = pa.table({
            "_hoodie_commit_time": pa.array([t] * n),
            "_hoodie_commit_seqno": pc.binary_join_element_wise(f"{t}_0_", pc.cast(pa.array(np.arange(n)), pa.string()), ""),
            "_hoodie_record_key": rows_of["key"],
            "_hoodie_partition_path": rows_of["_hoodie_partition_path"],
            "_hoodie_file_name": pa.array([file_id] * n),
            **{c: rows_of[c] for c in batch.column_names},
        })
        log = f"{partition}/.{file_id}_{base_instant}.log.1_0-1-0"
        (mor / log).write_bytes(append_blocks([data_block(t, records, writer_schema)]))
        size = (mor / log).stat().st_size
        stats.setdefault(partition, []).append(WriteStat(
            fileId=file_id, path=log, partitionPath=partition, prevCommit=base_instant, numWrites=n,
            numUpdateWrites=n, totalWriteBytes=size, fileSizeInBytes=size,
        ))
    meta = CommitMetadata(stats, "UPSERT", {"schema": schema_json})
    transition(storage, inflight, State.COMPLETED, meta.to_json_bytes())
    return cow, mor


def timed(phase: str, path: Path, batch: Path) -> float:
    """One run of `phase` in a fresh process; its seconds."""
    code = f"""
import time, pyarrow.parquet as pq, upsertlake
t = upsertlake.open_table({str(path)!r})
batch = pq.read_table({str(batch)!r})
start = time.perf_counter()
if {phase!r} == "cow":
    t.upsert(batch, {OPTS!r})
elif {phase!r} == "compact":
    r = t.compact()
    assert r.operations == {PARTITIONS}, r
else:
    t.read()
print(time.perf_counter() - start)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--updates", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cow, mor = build(root / "built", args.rows, args.updates)
        batch = root / "built" / "updates.parquet"
        times: dict[str, list[float]] = {"cow upsert": [], "mor snapshot read (logs)": [], "compaction": [],
                                         "mor snapshot read (compacted)": []}
        for i in range(args.repeat):
            run = root / f"run{i}"
            shutil.copytree(cow, run / "cow")
            shutil.copytree(mor, run / "mor")
            times["cow upsert"].append(timed("cow", run / "cow", batch))
            times["mor snapshot read (logs)"].append(timed("read", run / "mor", batch))
            times["compaction"].append(timed("compact", run / "mor", batch))
            times["mor snapshot read (compacted)"].append(timed("read", run / "mor", batch))
            shutil.rmtree(run)
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"{k:32s} median {med[k]:.3f} s  min {best[k]:.3f} s   runs {', '.join(f'{x:.3f}' for x in v)}")
    for label, t in (("median", med), ("min", best)):
        print(f"{label}: compaction / cow upsert = {t['compaction'] / t['cow upsert']:.2f} (goal <= 1.25); "
              f"snapshot with logs / compacted = {t['mor snapshot read (logs)'] / t['mor snapshot read (compacted)']:.2f}")


if __name__ == "__main__":
    main()

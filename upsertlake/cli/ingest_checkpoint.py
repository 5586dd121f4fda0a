"""The ingest checkpoint: which input files a table's completed commits recorded as ingested.

One checkpoint whatever wrote it: the one-shot `upsertlake ingest` and every micro-batch of
`--continuous` / `--once` record the files they read, with the size and modification time they had
then (on an object store, the listing's size and last-modified time), in the commit's
extraMetadata under `upsertlake.ingest.files`, as Hudi's DeltaStreamer checkpoints by modification
time. Any mode then skips what any other ingested, and reads again a file rewritten since.

Commits of earlier versions recorded paths only: such a file counts as ingested unless it was
modified after the instant time of the commit that recorded it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from upsertlake.cli.input_files import InputFile
from upsertlake.errors import TableNotFoundError
from upsertlake.table.open import open_table
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.instant_time import parse_instant_time

INGESTED_KEY = "upsertlake.ingest.files"


@dataclass(frozen=True)
class SourceFile:
    """An input file as ingested: its path (or URI) and the size and modification time it had then
    (on an object store, the listing's size and last-modified time)."""

    path: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, f: InputFile) -> SourceFile:
        return cls(f.uri, f.size, f.mtime_ns)

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "size": self.size, "mtime_ns": self.mtime_ns}


@dataclass
class Checkpoint:
    """What completed commits recorded as ingested: files with their size and modification time,
    and (commits of earlier versions) bare paths with the instant time that recorded them."""

    files: set[SourceFile] = field(default_factory=set)
    paths: dict[str, int] = field(default_factory=dict)  # path -> latest instant recording it, epoch ns

    def has(self, f: SourceFile) -> bool:
        """Whether `f`, as it is now, was ingested: same path, size and modification time."""
        return f in self.files or f.mtime_ns <= self.paths.get(f.path, -1)

    def seen_paths(self) -> set[str]:
        return set(self.paths) | {f.path for f in self.files}


def checkpoint(table_path: str, storage_options: Mapping[str, str] | None = None) -> Checkpoint:
    """Every input file a completed commit of the table recorded as ingested."""
    done = Checkpoint()
    try:
        timeline = Timeline.load(open_table(table_path, storage_options=storage_options).storage)
    except TableNotFoundError:
        return done
    for inst in timeline.completed_writes():
        recorded = timeline.commit_metadata(inst).extra_metadata.get(INGESTED_KEY)
        for entry in json.loads(recorded) if recorded else ():
            if isinstance(entry, str):  # a path-only checkpoint: as of the instant that recorded it
                at = int(parse_instant_time(inst.time).timestamp() * 1000) * 1_000_000
                done.paths[entry] = max(done.paths.get(entry, -1), at)
            else:
                done.files.add(SourceFile(entry["path"], int(entry["size"]), int(entry["mtime_ns"])))
    return done


def recorded(files: list[SourceFile]) -> dict[str, str]:
    """The extraMetadata entry of a commit that ingested `files`."""
    return {INGESTED_KEY: json.dumps([f.to_json() for f in files])}

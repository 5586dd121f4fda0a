"""Commit metadata: the document of a completed commit or replacecommit (HoodieCommitMetadata).

Timeline layout 1 (table version 6) stores it as JSON, layout 2 (table version 8) as an Avro
container file with Hudi's schema (`avro/HoodieCommitMetadata.avsc`, the writer schema of the
files Hudi 1.0 writes; `HoodieReplaceCommitMetadata` for replacecommits). Field names are the same
in both, so one document model serves both; readers tell the two apart by the Avro magic bytes.
Field names are Hudi's, so Hudi's readers (and ours) find the files each commit wrote.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

from upsertlake.errors import CorruptTableError
from upsertlake.timeline import documents
from upsertlake.timeline.column_stats import FileColumnStats, recorded

AVRO_MAGIC = b"Obj\x01"
COMMIT_SCHEMA = "HoodieCommitMetadata"
REPLACE_SCHEMA = "HoodieReplaceCommitMetadata"


@dataclass(frozen=True)
class WriteStat:
    """What one file group's write produced (HoodieWriteStat)."""

    fileId: str
    path: str
    partitionPath: str
    prevCommit: str = "null"
    numWrites: int = 0
    numDeletes: int = 0
    numUpdateWrites: int = 0
    numInserts: int = 0
    totalWriteBytes: int = 0
    totalWriteErrors: int = 0
    fileSizeInBytes: int = 0
    # What a compaction read (Hudi's compaction write stat fields; zero on other writes).
    totalLogRecords: int = 0
    totalLogFilesCompacted: int = 0
    totalLogSizeCompacted: int = 0
    totalUpdatedRecordsCompacted: int = 0
    totalLogBlocks: int = 0
    totalCorruptLogBlock: int = 0
    totalRollbackBlocks: int = 0
    totalLogReadTimeMs: int | None = None
    prevBaseFile: str | None = None
    runtimeStats: dict[str, int] | None = field(default=None, compare=False, hash=False)
    # Not Hudi's: the written file's column statistics, recorded in the commit's extraMetadata
    # (`column_stats.commit_entries`), as Hudi's write stats carry theirs to its metadata table.
    column_stats: FileColumnStats | None = field(default=None, compare=False, hash=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        # A DeltaWriteStat adds its own fields; the column statistics go to extraMetadata instead.
        values = {f.name: getattr(self, f.name) for f in fields(WriteStat) if f.name != "column_stats"}
        return write_stat_json(**{k: v for k, v in values.items() if v is not None or k in _HUDI_WRITE_STAT_FIELDS})

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> WriteStat:
        kind = DeltaWriteStat if doc.get("logFiles") is not None else WriteStat
        names = {f.name for f in fields(kind)}
        values = {k: v for k, v in doc.items() if k in names and v is not None}
        values.setdefault("fileId", "")
        values.setdefault("path", "")
        values.setdefault("partitionPath", "")
        if "logFiles" in values:
            values["logFiles"] = tuple(values["logFiles"])
        return kind(**values)


@dataclass(frozen=True)
class DeltaWriteStat(WriteStat):
    """What one append to a merge-on-read file slice produced (HoodieDeltaWriteStat): `path` is
    the log file written; `baseFile` the slice's base file name ("" in a log-only group)."""

    logVersion: int = 1
    logOffset: int = 0
    baseFile: str = ""
    logFiles: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        # Hudi's Jackson order: the HoodieWriteStat fields, then the delta ones.
        return {
            **super().to_json(),
            "logVersion": self.logVersion,
            "logOffset": self.logOffset,
            "baseFile": self.baseFile,
            "logFiles": list(self.logFiles),
            "recordsStats": {"val": None},
        }


# Every field of a HoodieWriteStat as Hudi's Jackson writes it, in its order, with the values of a
# freshly built stat: tools expecting Hudi's documents find every field.
_HUDI_WRITE_STAT_FIELDS: dict[str, Any] = {
    "fileId": "",
    "path": None,
    "cdcStats": None,
    "prevCommit": "null",
    "numWrites": 0,
    "numDeletes": 0,
    "numUpdateWrites": 0,
    "numInserts": 0,
    "totalWriteBytes": 0,
    "totalWriteErrors": 0,
    "tempPath": None,
    "partitionPath": None,
    "totalLogRecords": 0,
    "totalLogFilesCompacted": 0,
    "totalLogSizeCompacted": 0,
    "totalUpdatedRecordsCompacted": 0,
    "totalLogBlocks": 0,
    "totalCorruptLogBlock": 0,
    "totalRollbackBlocks": 0,
    "fileSizeInBytes": 0,
    "minEventTime": None,
    "maxEventTime": None,
    "runtimeStats": None,
}


# Fields Hudi writes only on some stats (a compaction's), after the others, when they are set.
_OPTIONAL_WRITE_STAT_FIELDS = ("totalLogReadTimeMs", "prevBaseFile")


def write_stat_json(**values: Any) -> dict[str, Any]:
    """A write stat document in Hudi's field order; unnamed fields keep a fresh stat's values."""
    unknown = values.keys() - _HUDI_WRITE_STAT_FIELDS.keys() - set(_OPTIONAL_WRITE_STAT_FIELDS)
    if unknown:
        raise ValueError(f"not HoodieWriteStat fields: {sorted(unknown)}")
    return {**_HUDI_WRITE_STAT_FIELDS, **values}


@dataclass(frozen=True)
class CommitMetadata:
    """A completed write's metadata; `partition_to_replace_file_ids` is set for replacecommits."""

    partition_to_write_stats: dict[str, list[WriteStat]]
    operation_type: str
    extra_metadata: dict[str, str] = field(default_factory=dict)
    partition_to_replace_file_ids: dict[str, list[str]] | None = None
    compacted: bool = False

    @property
    def schema(self) -> str | None:
        return self.extra_metadata.get("schema") or None

    @cached_property
    def column_stats(self) -> dict[str, FileColumnStats]:
        """The column statistics this commit recorded, by file path (parsed once per document)."""
        return recorded(self.extra_metadata)

    def write_stats(self) -> list[WriteStat]:
        return [s for stats in self.partition_to_write_stats.values() for s in stats]

    @cached_property
    def written_files(self) -> tuple[tuple[tuple[str, str], str], ...]:
        """((partition folder, fileId), path) of every file this commit wrote, computed once per
        (cached) document: every read checks them against the listing."""
        return tuple(((s.path.rpartition("/")[0], s.fileId), s.path) for s in self.write_stats() if s.path)

    def file_groups(self) -> set[tuple[str, str]]:
        """The (partition, fileId) pairs this commit wrote or replaced: what a conflict check compares."""
        touched = {(s.partitionPath, s.fileId) for s in self.write_stats()}
        for partition, ids in (self.partition_to_replace_file_ids or {}).items():
            touched.update((partition, fid) for fid in ids)
        return touched

    @property
    def total_bytes_written(self) -> int:
        return sum(s.totalWriteBytes for s in self.write_stats())

    @property
    def total_records_written(self) -> int:
        return sum(s.numWrites for s in self.write_stats())

    def to_json_bytes(self) -> bytes:
        doc: dict[str, Any] = {
            "partitionToWriteStats": {
                p: [s.to_json() for s in stats] for p, stats in self.partition_to_write_stats.items()
            },
            "compacted": self.compacted,
            "extraMetadata": self.extra_metadata,
            "operationType": self.operation_type,
        }
        if self.partition_to_replace_file_ids is not None:
            doc["partitionToReplaceFileIds"] = self.partition_to_replace_file_ids
        return json.dumps(doc, indent=2).encode()

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "commit metadata") -> CommitMetadata:
        """Parse a commit file, JSON or Avro; `source` names the file in the error a corrupt one raises."""
        try:
            if data.startswith(AVRO_MAGIC):
                doc = documents.decode(data, source)
            else:
                doc = json.loads(data.decode("utf-8")) if data.strip() else {}
            stats = {
                p: [WriteStat.from_json(s) for s in (lst or [])]
                for p, lst in (doc.get("partitionToWriteStats") or {}).items()
            }
            replaced = doc.get("partitionToReplaceFileIds")
            return cls(
                partition_to_write_stats=stats,
                operation_type=doc.get("operationType") or "UNKNOWN",
                extra_metadata=dict(doc.get("extraMetadata") or {}),
                partition_to_replace_file_ids=(
                    {p: list(ids or []) for p, ids in replaced.items()} if replaced is not None else None
                ),
                compacted=bool(doc.get("compacted", False)),
            )
        except (ValueError, TypeError, AttributeError) as exc:
            raise CorruptTableError(f"cannot parse {source}: {exc}") from exc


def json_to_avro(data: bytes, replace: bool, source: str = "commit metadata") -> bytes:
    """A commit document in JSON (layout 1) as the Avro container file layout 2 stores.

    Every field the Avro schema has is carried over (absent ones are null), so a converted
    document says what the JSON said; JSON-only fields Hudi's Avro schema lacks are dropped as
    Hudi's own conversion (`CommitMetadataSerDeV2`) drops them.
    """
    try:
        doc = json.loads(data.decode("utf-8")) if data.strip() else {}
    except ValueError as exc:
        raise CorruptTableError(f"cannot parse {source}: {exc}") from exc
    name = REPLACE_SCHEMA if replace else COMMIT_SCHEMA
    return documents.encode(name, conform(doc, documents.schema(name)))


def conform(value: Any, schema: Any) -> Any:
    """`value` (parsed JSON) shaped to an Avro schema: record fields picked by name, nulls kept
    (the archived timeline shapes commit documents to its entries' records the same way)."""
    if isinstance(schema, list):  # a union: null or the one other branch
        if value is None:
            return None
        other = next(s for s in schema if s != "null")
        return conform(value, other)
    if isinstance(schema, dict):
        kind = schema["type"]
        if kind == "record":
            return {f["name"]: conform(value.get(f["name"]), f["type"]) for f in schema["fields"]}
        if kind == "map":
            return {k: conform(v, schema["values"]) for k, v in value.items()}
        if kind == "array":
            return [conform(v, schema["items"]) for v in value]
        return conform(value, kind)
    if schema == "string":
        return value if isinstance(value, str) else str(value)
    return value

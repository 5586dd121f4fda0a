"""Input files of the writing commands and of `ingest`, on a local disk or an object store, found
through the storage layer (so `s3://`, `gs://` and `abfs://` sources work as folders do), each with
the size and modification time its listing gave (what `ingest`'s checkpoint compares).

An input's store takes `--input-storage-option KEY=VALUE` when given (a source bucket with other
credentials or another endpoint than the table's), else the table's `--storage-option` settings:
most sources sit in the same account as the table. The options replace, not extend, the table's,
so settings of one cloud never reach another's store.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass

from upsertlake.cli.output import CliError, parse_options, store_options
from upsertlake.storage import Storage, parse_location
from upsertlake.storage.requests import RequestCounts
from upsertlake.util.spelled import Spelled

_WILDCARD = re.compile(r"[*?[]")
HIDDEN = (".", "_")  # Spark's and Hudi's markers and temporary files (`_SUCCESS`, `.crc`)


class FileFormat(Spelled):
    """A data file's format, read (the inputs of upsert and ingest) or written (`read --output`), by
    `--format` or by its extension. JSON is an array of objects or one object a line; NDJSON
    (`.ndjson`, `.jsonl`) one object a line only, so files of either read as JSON (as Spark's json
    source reads them)."""

    PARQUET = "parquet"
    CSV = "csv"
    JSON = "json"
    NDJSON = "ndjson"

    @classmethod
    def of_suffix(cls, suffix: str) -> FileFormat | None:
        """The format a file extension (lower-case, with its dot) says, if any."""
        return next((f for f, own in _OWN_EXTENSIONS.items() if suffix in own), None)

    @property
    def extensions(self) -> tuple[str, ...]:
        """The extensions of the files read as this format."""
        if self is FileFormat.JSON:
            return _OWN_EXTENSIONS[FileFormat.JSON] + _OWN_EXTENSIONS[FileFormat.NDJSON]
        return _OWN_EXTENSIONS[self]


_OWN_EXTENSIONS = {
    FileFormat.PARQUET: (".parquet", ".pq"),
    FileFormat.CSV: (".csv",),
    FileFormat.JSON: (".json",),
    FileFormat.NDJSON: (".ndjson", ".jsonl"),
}
INGEST_FORMATS = (FileFormat.CSV, FileFormat.JSON, FileFormat.PARQUET)  # Spark's readers


@dataclass(frozen=True)
class InputFile:
    """A file found in a source: the storage of the folder it was found in, its path relative to
    that folder, and its size and modification time (ns) as listed."""

    storage: Storage
    rel: str
    size: int
    mtime_ns: int

    @property
    def uri(self) -> str:
        return self.storage.full_path(self.rel)

    @property
    def name(self) -> str:
        return self.rel.rsplit("/", 1)[-1]

    @property
    def suffix(self) -> str:
        dot = self.name.rfind(".")
        return self.name[dot:].lower() if dot > 0 else ""

    def has_format(self, fmt: FileFormat) -> bool:
        """Is this a file of format `fmt`, by its extension?"""
        return self.suffix in fmt.extensions


def add_input_store_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--input-storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="a setting of the object store the input files are on (repeatable); default: the --storage-option "
             "settings",
    )


def input_store_options(args: argparse.Namespace) -> dict[str, str]:
    """The input files' store settings: their own when given, else the table's."""
    own = getattr(args, "input_storage_option", None)
    return parse_options(own, "--input-storage-option") if own else store_options(args)


def find(
    source: str, options: Mapping[str, str] | None = None, requests: RequestCounts | None = None
) -> list[InputFile]:
    """The files `source` names, sorted by URI: the file itself; every file below a folder
    (recursively); or every file a glob matches (`*`, `?` and `[...]` within a name, `**` across
    folders). In folders and globs, names starting with '.' or '_' are skipped. Empty when there
    is nothing; StorageError when the store cannot be read (a missing bucket, denied access).
    `requests`: where the storages of the files count their requests (their own by default)."""
    location = parse_location(source)
    wildcard = _WILDCARD.search(location.uri)
    if wildcard:
        base = location.uri[:location.uri.rfind("/", 0, wildcard.start())]
        if len(base) < len(location.root):
            raise CliError(f"{source}: a wildcard may not name the bucket")
        pattern = _glob_regex(location.uri[len(base) + 1:])
        return [f for f in _listed(Storage(base or "/", options, requests)) if pattern.fullmatch(f.rel)]
    parent, _, name = location.uri.rpartition("/")
    if name and location.uri != location.root:
        folder = Storage(parent or "/", options, requests)
        entry = folder.stat(name)
        if entry is not None:
            return [InputFile(folder, name, entry.size, entry.mtime_ns)]
    return _listed(Storage(location.uri, options, requests))


def _listed(folder: Storage) -> list[InputFile]:
    """Every file below the folder (none when there is no such folder), hidden names skipped."""
    try:
        entries = folder.list("", recursive=True)
    except NotADirectoryError:  # a local file where a folder was expected: it holds no files
        return []
    files = [
        InputFile(folder, e.path, e.size, e.mtime_ns)
        for e in entries if not e.is_dir and not e.name.startswith(HIDDEN)
    ]
    return sorted(files, key=lambda f: f.rel)


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob as `glob.glob(recursive=True)` reads it, for paths relative to its base folder."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2:]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1:end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))

"""Log file names: `.{fileId}_{instant}.log.{version}_{writeToken}[.cdc]`, as Hudi's FSUtils parses
them (LOG_FILE_PATTERN), and the order of a slice's log files (HoodieLogFile's comparator).

The instant is the slice's base instant on table version 6 and the deltacommit's own instant on
version 8; either way it is the name's second part, and the order below is Hudi's for both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from upsertlake.errors import CorruptTableError

LOG_EXTENSION = "log"
CDC_SUFFIX = ".cdc"

# Hudi: ^\.(.+)_(.*)\.(log|archive)\.(\d+)(_((\d+)-(\d+)-(\d+))(.cdc)?)? ; archive logs are timeline
# files, not slices, so only `log` is a log file here, and the whole name must match.
_PATTERN = re.compile(
    r"\.(?P<file_id>.+)_(?P<instant>[^_]*)\.log\.(?P<version>\d+)_(?P<token>\d+-\d+-\d+)(?P<suffix>\.cdc)?"
)


@dataclass(frozen=True)
class LogFileName:
    """The parts of a log file's name; `format()` and `parse()` are exact inverses."""

    file_id: str
    instant: str
    version: int
    write_token: str
    suffix: str = ""

    @staticmethod
    def parse(name: str) -> LogFileName | None:
        """The parts of `name` (a bare file name, no directory), or None if it is no log file."""
        m = _PATTERN.fullmatch(name)
        if m is None:
            return None
        return LogFileName(m["file_id"], m["instant"], int(m["version"]), m["token"], m["suffix"] or "")

    def format(self) -> str:
        return f".{self.file_id}_{self.instant}.{LOG_EXTENSION}.{self.version}_{self.write_token}{self.suffix}"

    def sort_key(self) -> tuple[str, int, str, str]:
        """Hudi's LogFileComparator: instant, then version, then write token (as strings), then suffix."""
        return (self.instant, self.version, self.write_token, self.suffix)

    @property
    def is_cdc(self) -> bool:
        """CDC log files hold change records for incremental CDC queries; slice readers skip them."""
        return self.suffix == CDC_SUFFIX

    def next_version(self, write_token: str) -> LogFileName:
        """The name a writer rolls over to (HoodieLogFile.rollOver): same slice, version + 1."""
        return LogFileName(self.file_id, self.instant, self.version + 1, write_token, self.suffix)


def log_instant(path: str) -> str:
    """The instant that names the log file at `path` (refused by name when it is not one)."""
    name = LogFileName.parse(path.rpartition("/")[2])
    if name is None:
        raise CorruptTableError(f"{path} is not a log file's name")
    return name.instant


def is_log_path(path: str) -> bool:
    """Does a table-relative path (or a bare name) name a log file?"""
    return LogFileName.parse(path.rpartition("/")[2]) is not None


def sort_log_files(names: list[LogFileName]) -> list[LogFileName]:
    """A slice's log files in the order their blocks apply (oldest first)."""
    return sorted(names, key=LogFileName.sort_key)

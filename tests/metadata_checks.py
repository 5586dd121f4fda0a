"""What the metadata table must list: storage's files of completed writes, no file of a pending
or failed one (shared by the metadata tests)."""

from __future__ import annotations

from upsertlake.layout.file_system_view import Listing
from upsertlake.timeline.active import Timeline


def committed_files(timeline: Timeline, listing: Listing) -> set[tuple[str, int]]:
    """(path, size) of the listed base and log files that completed writes wrote."""
    done = {i.time for i in timeline.completed_writes()}
    return ({(f.path, f.size) for f in listing.base_files if f.instant_time in done}
            | {(f.path, f.size) for f in listing.log_files if f.name.instant in done})

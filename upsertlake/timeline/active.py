"""The active timeline: the instants in the timeline folder (`.hoodie/` in layout 1,
`.hoodie/timeline/` in layout 2), read as one snapshot, and its state changes.

An instant's state is the most advanced of its files present (a completed instant keeps its
`.requested` and `.inflight` siblings). Every state change creates a new file with
write-if-absent, so two writers can never both complete the same instant, and nothing is ever
overwritten. In layout 2 completing an instant gives it a completion time later than every time
on the timeline, and its commit document is stored in Avro.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from upsertlake.errors import CorruptTableError, MergeOnReadError, UpsertlakeError
from upsertlake.storage import FileEntry, Storage
from upsertlake.storage.cache import Lru
from upsertlake.timeline import digest
from upsertlake.timeline.archived import LEGACY_FOLDER, listed_archive, load_archived
from upsertlake.timeline.commit_metadata import AVRO_MAGIC, CommitMetadata, json_to_avro
from upsertlake.timeline.documents import decode as decode_document
from upsertlake.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from upsertlake.timeline.instant_time import next_instant_time
from upsertlake.timeline.layouts import LAYOUT_1, METAFOLDER, TimelineLayout, listed_layout, table_layout

PREFETCH_THREADS = 8  # commit documents read at once from an object store
DOCUMENTS_KEPT = 4096  # commit documents a process keeps (a few KB each)


@dataclass(frozen=True)
class Timeline:
    """An immutable snapshot of the timeline, instants sorted by time: the active ones and the
    archived ones (completed, their documents in `archived`), so reads reach back past archival."""

    storage: Storage
    instants: tuple[Instant, ...]
    archived: Mapping[Instant, bytes] = field(default_factory=dict, compare=False, repr=False)
    layout: TimelineLayout = LAYOUT_1
    # The store's version (ETag) of each active instant's file as listed; empty on a local disk.
    versions: Mapping[Instant, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def load(cls, storage: Storage, layout: TimelineLayout | None = None) -> Timeline:
        """The timeline as listed now, in the layout `hoodie.properties` declares (or `layout`)."""
        # One listing of `.hoodie/` answers the layout 1 instants, the version of hoodie.properties
        # (so the layout costs no read of its own once known) and whether anything was archived.
        metafolder = storage.list(METAFOLDER) if layout is None or layout.folder == METAFOLDER else None
        if layout is None:
            layout = listed_layout(storage, metafolder or [])
        entries = metafolder if metafolder is not None and layout.folder == METAFOLDER else storage.list(layout.folder)
        latest: dict[tuple[str, Action], Instant] = {}
        versions: dict[Instant, str] = {}
        for entry, inst in _instants_in(entries, layout):
            key = (inst.time, inst.action)
            seen = latest.get(key)
            if seen is None or inst.state.rank > seen.state.rank:
                latest[key] = inst
                if entry.version:
                    versions[inst] = entry.version
        active = [key for key, inst in latest.items() if inst.is_completed]
        archived = listed_archive(storage, layout, active, _archive_shown(layout, metafolder, entries))
        for inst in archived:
            latest.setdefault((inst.time, inst.action), inst)
        if not layout.delta_commits:
            _refuse_delta_commits(storage, latest.values())
        return cls(storage, tuple(sorted(latest.values())), archived, layout, versions)

    def path(self, instant: Instant) -> str:
        """The table-relative path of an (active) instant's file in its state."""
        return self.layout.path(instant)

    # -- queries -----------------------------------------------------------------------------
    def filter(
        self, actions: Iterable[Action] = WRITE_ACTIONS, states: Iterable[State] | None = None
    ) -> list[Instant]:
        acts, sts = set(actions), set(states) if states is not None else None
        return [i for i in self.instants if i.action in acts and (sts is None or i.state in sts)]

    def completed_writes(self) -> list[Instant]:
        """Completed commits and replacecommits: the instants whose files readers see."""
        return self.filter(WRITE_ACTIONS, [State.COMPLETED])

    def pending_writes(self) -> list[Instant]:
        return self.filter(WRITE_ACTIONS, [State.REQUESTED, State.INFLIGHT])

    def pending_compactions(self) -> list[Instant]:
        """Compaction plans not yet completed (requested or inflight), oldest first. A completed
        compaction is a `commit` at the plan's time, its `.compaction.requested`/`.inflight` kept."""
        done = {i.time for i in self.filter([Action.COMMIT], [State.COMPLETED])}
        return [i for i in self.filter([Action.COMPACTION]) if i.time not in done]

    def shown(self) -> list[Instant]:
        """The active instants as Hudi's timeline shows them: a completed compaction is its commit
        alone, so that whatever counts the pending instants counts only those."""
        pending = {i.time for i in self.pending_compactions()}
        return [i for i in self.active() if i.action is not Action.COMPACTION or i.time in pending]

    def latest_completed_write(self) -> Instant | None:
        done = self.completed_writes()
        return done[-1] if done else None

    def last_time(self) -> str | None:
        """The newest time on the timeline, requested or completion: new instants come after it."""
        return max((t for i in self.instants for t in (i.time, i.completion) if t), default=None)

    def completed_between(self, begin: str, end: str | None) -> list[Instant]:
        """Completed writes that completed in (begin, end], in completion order: what an
        incremental read from `begin` to `end` returns (layout 1: completion = requested time)."""
        done = [i for i in self.completed_writes() if i.completed_at > begin and (end is None or i.completed_at <= end)]
        return sorted(done, key=lambda i: i.completed_at)

    def get(self, time: str, action: Action | None = None) -> Instant | None:
        for inst in self.instants:
            if inst.time == time and (action is None or inst.action is action):
                return inst
        return None

    def commit_metadata(self, instant: Instant) -> CommitMetadata:
        """The metadata of a completed commit or replacecommit (cached: completed files never change)."""
        if not instant.is_completed:
            raise UpsertlakeError(f"instant {instant.time} is not completed")
        if instant in self.archived:
            return _parse_archived(self.storage, self.archived[instant], f"archived {instant.time}")
        try:
            return _read_commit_metadata(self.storage, self.path(instant), self.versions.get(instant, ""))
        except (CorruptTableError, FileNotFoundError):
            # Archived by another process since this timeline was listed: a concurrent writer's
            # archival must not fail this one (the archive is written before the files go).
            late = load_archived(self.storage, self.layout).get(instant)
            if late is None:
                raise
            return _parse_archived(self.storage, late, f"archived {instant.time}")

    def prefetch_documents(self, instants: Iterable[Instant]) -> None:
        """Read the documents of `instants` (completed, active) several at once, and those the
        digest holds in one request. On an object store each is a GET, and a fresh process reading
        a long timeline (the missing-file and damaged-table checks read every commit, the cleaner
        every clean) would otherwise wait for them one by one; once read they are cached. A
        failure is left to the read that follows, which raises it."""
        if not self.storage.expensive_requests:
            return
        documents = _documents(self.storage)

        def unread(among: Iterable[Instant]) -> list[Instant]:
            return [i for i in among if (self.path(i), self.versions.get(i, "")) not in documents]

        todo = unread(i for i in instants if i.is_completed and i not in self.archived)
        if len(todo) < 2:
            return
        if len(todo) >= digest.REFRESH:  # fewer are the newest instants, which the digest seldom holds
            # One GET of the digest answers for every document it holds, not only these.
            wanted = {self.path(i): self.versions[i] for i in unread(self.digested())}
            for rel, data in digest.read(self.storage, wanted).items():
                documents.put((rel, wanted[rel]), data)
            todo = unread(todo)

        def read(inst: Instant) -> None:
            with contextlib.suppress(UpsertlakeError, OSError):
                self.document(inst)

        if todo:
            with ThreadPoolExecutor(max_workers=min(PREFETCH_THREADS, len(todo))) as pool:
                list(pool.map(read, todo))

    def digested(self) -> list[Instant]:
        """The completed active instants whose documents every writer reads, as listed with their
        versions: commits (the missing-file and damaged-table checks) and cleans (the retained
        window). The digest holds these."""
        return [
            i for i in self.filter([*WRITE_ACTIONS, Action.CLEAN], [State.COMPLETED])
            if i not in self.archived and i in self.versions
        ]

    def refresh_digest(self) -> None:
        """A writer's part (object stores): replace the digest once `digest.REFRESH` of the
        documents it should hold are outside the one this process last read or wrote, so that a
        fresh process reads the timeline's documents in one request, not one per instant."""
        if not self.storage.expensive_requests:
            return
        done = self.digested()
        listed = {self.path(i): self.versions[i] for i in done}
        if digest.outside(self.storage, listed) < digest.REFRESH:
            return
        self.prefetch_documents(done)
        documents = {}
        for inst in done:
            try:  # only documents that parse go in
                if inst.action is Action.CLEAN:
                    decode_document(self.document(inst), f"clean {inst.time}")
                else:
                    self.commit_metadata(inst)
            except (UpsertlakeError, OSError):
                continue
            rel, version = self.path(inst), self.versions[inst]
            data = _documents(self.storage).get((rel, version))
            if data is not None:
                documents[rel] = (version, data)
        digest.write(self.storage, documents)

    def document(self, instant: Instant) -> bytes:
        """The bytes of an instant's file in its state (archived instants: their completed file).
        On an object store a completed file is read once per process: it never changes under the
        version (ETag) the listing showed (every write looks at the cleans' documents)."""
        if instant in self.archived:
            return self.archived[instant]
        rel, version = self.path(instant), self.versions.get(instant)
        if not (instant.is_completed and version):
            return self.storage.read_bytes(rel)
        documents = _documents(self.storage)
        data = documents.get((rel, version))
        if data is None:
            data = self.storage.read_bytes(rel)
            documents.put((rel, version), data)
        return data

    def with_instant(self, instant: Instant) -> Timeline:
        """This timeline with `instant` added, or moved to its state: what a listing would show
        after the caller, holding the lock since this timeline was listed, created its file."""
        others = [i for i in self.instants if (i.time, i.action) != (instant.time, instant.action)]
        return replace(self, instants=tuple(sorted([*others, instant])))

    def active(self) -> list[Instant]:
        """The instants still in the timeline folder (not archived)."""
        return [i for i in self.instants if i not in self.archived]

    def latest_schema(self) -> str | None:
        """The Avro schema JSON of the newest completed write that recorded one."""
        for inst in reversed(self.completed_writes()):
            schema = self.commit_metadata(inst).schema
            if schema:
                return schema
        return None


def _refuse_delta_commits(storage: Storage, instants: Iterable[Instant]) -> None:
    """Only merge-on-read tables write deltacommits: whatever `hoodie.properties` says (a damaged
    file read as is, a hand edit), such a timeline is never read as copy-on-write."""
    delta = min((i.time for i in instants if i.action is Action.DELTA_COMMIT), default=None)
    if delta is not None:
        raise MergeOnReadError(
            f"the timeline of {storage.base} holds deltacommits (the first at {delta}), which only "
            "merge-on-read tables write, but hoodie.table.type is not MERGE_ON_READ: reading it as "
            "copy-on-write would leave its log files out (check hoodie.table.type in .hoodie/hoodie.properties)"
        )


def _documents(storage: Storage) -> Lru[Any]:
    """The bytes of the completed instants' documents read from an object store, by (path,
    version), kept by the storage: the commit documents are what the commit digest is written from."""
    return storage.cache("timeline documents", DOCUMENTS_KEPT)


def _read_commit_metadata(storage: Storage, rel: str, version: str) -> CommitMetadata:
    """A completed commit's metadata, parsed once per version and kept by the storage. Keyed by a
    version, so a table deleted and re-created at the same path is read again: on an object store
    the ETag its listing showed (instant files are created once, by a conditional PUT, and never
    replaced: no HEAD), locally size and modification time."""
    if not storage.expensive_requests:
        info = storage.stat(rel)
        if info is None:
            raise CorruptTableError(f"commit file missing: {storage.full_path(rel)}")
        version = f"{info.size}:{info.mtime_ns}"
    parsed = storage.cache("commit metadata", DOCUMENTS_KEPT)
    meta = parsed.get((rel, version))
    if meta is None:
        documents = _documents(storage)
        data = documents.get((rel, version))
        if data is None:
            try:
                data = storage.read_bytes(rel)
            except FileNotFoundError as exc:
                raise CorruptTableError(f"commit file missing: {storage.full_path(rel)}") from exc
            if storage.expensive_requests:
                documents.put((rel, version), data)
        meta = CommitMetadata.from_bytes(data, source=storage.full_path(rel))
        parsed.put((rel, version), meta)
    return meta


def _parse_archived(storage: Storage, data: bytes, source: str) -> CommitMetadata:
    """An archived commit's metadata, parsed once and kept by the storage: every read checks the
    write stats of every commit against the listing, archived ones too."""
    parsed = storage.cache("archived commit metadata", DOCUMENTS_KEPT)
    meta = parsed.get(data)
    if meta is None:
        meta = CommitMetadata.from_bytes(data, source=source)
        parsed.put(data, meta)
    return meta


def _archive_shown(layout: TimelineLayout, metafolder: list[FileEntry] | None, entries: list[FileEntry]) -> bool | None:
    """Whether the listings of `.hoodie/` and of the timeline folder show an archive folder,
    Hudi's of the layout or the legacy one (None: `.hoodie/` was not listed). On an object store
    a prefix is listed only while an object lies below it: a table never archived costs no
    listing of its archive."""
    if metafolder is None:
        return None
    shown = {e.path for e in (*metafolder, *entries) if e.is_dir}
    return LEGACY_FOLDER in shown or layout.archive in shown


def _instants_in(entries: Iterable[FileEntry], layout: TimelineLayout) -> Iterable[tuple[FileEntry, Instant]]:
    for entry in entries:
        if not entry.is_dir:
            inst = layout.parse(entry.name)
            if inst is not None:
                yield entry, inst


# -- state changes ---------------------------------------------------------------------------
def create_requested(
    storage: Storage,
    action: Action,
    content: bytes = b"",
    clustering: bool = False,
    before: Callable[[str], object] | None = None,
    timeline: Timeline | None = None,
) -> Instant:
    """Create `<t>.<action>.requested` with a fresh instant time later than any on the timeline.

    Call under the table lock: the time is chosen from the timeline as listed now, and
    write-if-absent guards against a writer that does not hold the lock. `before(t)` runs once the
    time is chosen and before the file exists (a writer starts its heartbeat there, so no one
    sees its instant without one); it runs again for the next time if `t` was taken meanwhile.
    `timeline`: one the caller listed under the lock it still holds (else it is listed now).
    """
    timeline = timeline or Timeline.load(storage)
    last = timeline.last_time()
    while True:
        instant = Instant(next_instant_time(last, timeline.layout.zone), action, State.REQUESTED, clustering=clustering)
        if before is not None:
            before(instant.time)
        if storage.write_if_absent(timeline.path(instant), content):
            return instant
        last = instant.time


def transition(
    storage: Storage,
    instant: Instant,
    to: State,
    content: bytes = b"",
    layout: TimelineLayout | None = None,
    timeline: Timeline | None = None,
) -> Instant:
    """Move an instant to `to` by creating its file; refuses if that file already exists.

    Commit documents are given as Hudi's JSON; layout 2 stores them in Avro. Completing an
    instant in layout 2 names it with a fresh completion time: creating that file exclusively is
    the commit point, so the instant must not be completed under any completion time already.
    Call under the table lock. `timeline`: one the caller listed under the lock it still holds,
    with `instant` on it; else `layout`, the table's as the caller read it under the lock (else
    read now), and the timeline is listed only where a completion time must be chosen.
    """
    if to.rank <= instant.state.rank:
        raise UpsertlakeError(f"cannot move instant {instant.time} from {instant.state} to {to}")
    if timeline is None and (layout is None or (layout.has_completion_times and to is State.COMPLETED)):
        timeline = Timeline.load(storage, layout)
    layout = timeline.layout if timeline is not None else layout
    assert layout is not None
    target = instant.with_state(to)
    if timeline is not None and layout.has_completion_times and to is State.COMPLETED:
        done = timeline.get(instant.time, instant.action)
        if done is not None and done.is_completed:
            raise CorruptTableError(f"instant {instant.time} is already completed ({layout.path(done)})")
        last = max(timeline.last_time() or "", instant.time)
        target = instant.with_state(to, completion=next_instant_time(last, layout.zone))
    if layout.version == 2 and content and not content.startswith(AVRO_MAGIC) and instant.action in WRITE_ACTIONS:
        content = json_to_avro(content, instant.action is Action.REPLACE_COMMIT, f"commit {instant.time}")
    if not storage.write_if_absent(layout.path(target), content):
        raise CorruptTableError(f"instant file already exists: {target.file_name(layout.version)}")
    return target


def delete_instant_files(
    storage: Storage, instant: Instant, layout: TimelineLayout | None = None, listed: list[FileEntry] | None = None
) -> None:
    """Remove an instant's files, most advanced state first, so a crash midway leaves it pending;
    then the temporary files of a writer that died while creating one (write_if_absent's).
    `listed`: a listing of the timeline folder made under the lock (for many instants at once)."""
    layout = layout or table_layout(storage)
    entries = storage.list(layout.folder) if listed is None else listed
    mine = sorted(
        (i for _, i in _instants_in(entries, layout) if (i.time, i.action) == (instant.time, instant.action)),
        key=lambda i: -i.state.rank,
    )
    for inst in mine:
        if inst.state.rank <= instant.state.rank:
            storage.delete(layout.path(inst))
    for entry in entries:
        if entry.name.startswith(f".{instant.time}") and entry.name.endswith(".tmp"):
            storage.delete(entry.path)

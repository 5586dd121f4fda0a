"""Object stores bill per request: the requests of one upsert, counted by the S3 server itself,
grow with the partitions and file groups the batch touches, not with the table's untouched
partitions or the length of its timeline."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pyarrow as pa

from upsertlake import create_table, open_table
from upsertlake.storage import Storage
from upsertlake.timeline import digest
from upsertlake.timeline.active import Timeline
from upsertlake.timeline.digest import REFRESH

# Services stay out of the count: no clean and no archival is due in these tables.
KEEP = {"hoodie.cleaner.commits.retained": "1000", "hoodie.keep.min.commits": "1000", "hoodie.keep.max.commits": "1010"}


def rows(ids: range | list[int], partitions: int, ts: int) -> pa.Table:
    ids = list(ids)
    return pa.table({
        "uuid": [f"k{i:06d}" for i in ids],
        "ts": [ts] * len(ids),
        "part": [f"p{i % partitions:04d}" for i in ids],
        "fare": [float(i + ts) for i in ids],
    })


def server_counts(s3_server) -> dict[str, int]:
    """The server's counts by kind since the last call (which reset them)."""
    with urllib.request.urlopen(f"{s3_server.endpoint}/__requests") as resp:
        return json.loads(resp.read())


def upsert_requests(s3_server, partitions: int, instants: int) -> dict[str, int]:
    """The requests of one upsert of 4 records in 2 partitions (updates of 2 existing ones and
    2 inserts), on a table of `partitions` partitions with `instants` completed instants."""
    uri = f"s3://{s3_server.new_bucket()}/t"
    table = create_table(uri, "t", "uuid", "ts", "part", options=KEEP, storage_options=s3_server.options)
    table.bulk_insert(rows(range(3 * partitions), partitions, 1))
    for ts in range(2, instants + 1):  # small upserts elsewhere than the measured batch's partitions
        table.upsert(rows([2 + (ts % (partitions - 2))], partitions, ts))
    table = open_table(uri, options=KEEP, storage_options=s3_server.options)
    # A long-lived writer: opening the table for writes checks it once (the doctor's check lists
    # the whole table and reads every active commit), so the measured upsert is its second.
    table.upsert(rows([2], partitions, 999))
    touched = [0, 1, 3 * partitions, 3 * partitions + 1]  # p0000 and p0001: one update, one insert each
    server_counts(s3_server)
    result = table.upsert(rows(touched, partitions, 1000))
    counted = server_counts(s3_server)
    assert (result.num_updates, result.num_inserts) == (2, 2)
    # The write's own count (what `upsert` on the command line prints) agrees with the server's
    # (uploads aside: the server sees a multipart upload's parts, the client one upload).
    assert {k: result.store_requests[k] for k in ("LIST", "GET", "HEAD")} == {
        k: counted.get(k, 0) for k in ("LIST", "GET", "HEAD")
    }
    assert sorted(r["uuid"] for r in table.read(columns=["uuid"], filters=[("ts", "=", 1000)]).to_pylist()) == [
        f"k{i:06d}" for i in sorted(touched)
    ]
    return counted


def test_upsert_requests_do_not_grow_with_untouched_partitions(s3_server) -> None:
    """2 vs 400 partitions (about 1,600 objects: a listing of the whole table takes two requests
    of 1,000 keys), the batch touching 2: the same requests, kind by kind."""
    few = upsert_requests(s3_server, partitions=3, instants=1)
    many = upsert_requests(s3_server, partitions=400, instants=1)
    assert many == few
    assert few["LIST"] <= 20 and few.get("HEAD", 0) <= 4


def test_upsert_requests_do_not_grow_with_the_timeline(s3_server) -> None:
    """3 vs 40 completed instants: the same requests, kind by kind (the timeline is one listing
    of .hoodie/ however long; hoodie.properties is read once per version)."""
    few = upsert_requests(s3_server, partitions=4, instants=3)
    many = upsert_requests(s3_server, partitions=4, instants=40)
    assert many == few
    # The whole budget (the old code: LIST 29, GET 22, HEAD 6, PUT 19). LIST: the timeline at
    # start (under the lock; the schema and the plan take it from there) and at commit (under the
    # lock; the services after it decide on it); the 2 partitions; the metadata-table check; the
    # markers' delete.
    # HEAD: none (the written files were checked at commit, one HEAD each, until the commit
    # trusted a heartbeat that never lapsed). PUT: lock and release twice, the fence, the
    # heartbeat, 3 instant files, the 2 file groups' files, and for all of them one marker batch
    # (with MARKERS.type) and one key summary sidecar.
    assert {k: few.get(k, 0) for k in ("LIST", "GET", "HEAD", "PUT")} == {"LIST": 6, "GET": 7, "HEAD": 0, "PUT": 14}


# Services on, their periods short: a clean after every commit, archival every 3 commits.
SERVICES = {"hoodie.cleaner.commits.retained": "2", "hoodie.keep.min.commits": "3", "hoodie.keep.max.commits": "5"}


def one_record_upserts(s3_server, table, commits: int, start: int, n: int) -> tuple[int, list[dict[str, int]]]:
    """Upsert one record a commit until the table has `start` commits (of `commits` now), then `n`
    more, whose requests are counted by the server (and checked against each write's own count);
    returns the commits now and those counts."""
    while commits < start:
        commits += 1
        table.upsert(rows([commits % 8], 4, commits))
    counts = []
    for _ in range(n):
        commits += 1
        server_counts(s3_server)
        result = table.upsert(rows([commits % 8], 4, commits))
        counted = server_counts(s3_server)
        assert (result.num_updates, result.num_inserts) == (1, 0)
        counted["DELETE"] = counted.pop("POST(multipart)", 0) + counted.get("DELETE", 0)  # batch deletes are POSTs
        assert result.store_requests == {k: counted.get(k, 0) for k in result.store_requests}, (result, counted)
        counts.append(result.store_requests)
    return commits, counts


def explain_requests(s3_server, uri: str, batch: pa.Table, folder) -> dict[str, int]:
    """The requests of `upsertlake explain upsert` in a new process, as the server counts them; the
    count the command prints is checked to be the same."""
    import pyarrow.parquet as pq

    pq.write_table(batch, folder / "batch.parquet")
    store = [arg for k, v in s3_server.options.items() for arg in ("--storage-option", f"{k}={v}")]
    server_counts(s3_server)
    command = ["explain", "upsert", uri, str(folder / "batch.parquet"), "--json", *store]
    run = subprocess.run([sys.executable, "-m", "upsertlake.cli", *command], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=300)
    counted = server_counts(s3_server)
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)["store_requests"]
    assert printed == {k: counted.get(k, 0) for k in printed}, (printed, counted)
    return printed


def test_upsert_requests_do_not_grow_with_the_cleans(s3_server, table_version) -> None:
    """A clean after every commit (no archival): a long-lived writer's one-record upserts cost the
    same requests, kind by kind, after 6 commits as after 46. Every clean read every earlier clean's
    document again (a GET each: 29 after 45 commits); they are read once per process now (their
    files never change under the ETag the listing shows). Windows of 4 upserts, the period of the
    commit digest's rewrite (one more PUT)."""
    uri = f"s3://{s3_server.new_bucket()}/t"
    options = {**SERVICES, "hoodie.keep.min.commits": "1000", "hoodie.keep.max.commits": "1010"}
    table = create_table(uri, "t", "uuid", "ts", "part", options=options, storage_options=s3_server.options)
    table.bulk_insert(rows(range(8), 4, 1))
    commits, short = one_record_upserts(s3_server, table, 1, 6, 4)
    commits, long = one_record_upserts(s3_server, table, commits, 46, 4)
    assert long == short
    # LIST: the timeline at start, at commit and at clean (each under the lock); the partition, the
    # metadata-table check (at start and at clean), the markers' delete, the clean's listing of the
    # table. GET: the lock and hoodie.properties at each of the three, the schema's commit, the
    # touched file, the latest clean. PUT: the write's 13 and the clean's lock, release and 3
    # instant files; one more for the digest every 4 commits. DELETE: the markers, the heartbeat,
    # the cleaned file.
    assert max(short, key=lambda c: c["PUT"]) == {"LIST": 8, "GET": 9, "HEAD": 0, "PUT": 19, "DELETE": 3}
    assert len([i for i in Timeline.load(Storage(uri, s3_server.options)).instants if i.action.value == "clean"]) > 40


def test_requests_stay_flat_with_clean_and_archival_on(s3_server, table_version, tmp_path) -> None:
    """With the cleaner and archival running after every commit (automatic, as by default), a
    long-lived writer's one-record upserts cost the same requests, kind by kind, after 27 commits
    as long after, and so does `explain` in a new process, whose count is the server's, but for
    the archive files it reads once each. Every step of a write used to list `.hoodie/` and
    `.hoodie/archived/` (8 times each); a process reads an archive file once (they are never
    rewritten) and lists the archive again only once an instant left the active timeline.

    Each upsert's requests repeat with the services' periods (archival every 3 commits, the commit
    digest rewritten every 9; version 6 merges its small archive log files, version 8's LSM
    timeline its first layer every 10 archivals), so two windows a common period apart (54
    commits at 6, 90 at 8) see the same sequence."""
    uri = f"s3://{s3_server.new_bucket()}/t"
    table = create_table(uri, "t", "uuid", "ts", "part", options=SERVICES, storage_options=s3_server.options)
    storage = Storage(uri, s3_server.options)
    table.bulk_insert(rows(range(8), 4, 1))
    commits, short = one_record_upserts(s3_server, table, 1, 27, 9)
    explained_short = explain_requests(s3_server, uri, rows([1, 9], 4, 10_000), tmp_path)
    files_short = archive_files(storage)
    commits, long = one_record_upserts(s3_server, table, commits, 81 if table_version == 6 else 117, 9)
    explained_long = explain_requests(s3_server, uri, rows([1, 9], 4, 10_000), tmp_path)
    files_long = archive_files(storage)
    assert long == short
    # a new process reads each archive file once: Hudi's formats keep their number small (version
    # 6: small files merged, 8: the LSM timeline's layers of at most 10 files)
    assert explained_long == {**explained_short, "GET": explained_short["GET"] + files_long - files_short}
    assert files_long < 20
    # The ceiling: an upsert that cleans (every one), archives (every third, writing Hudi's format:
    # each archived instant's plan and metadata read) and merges the archive files.
    ceiling = {k: max(c[k] for c in short) for k in short[0]}
    assert ceiling == CEILING[table_version], ceiling
    assert len(Timeline.load(storage).archived) > 100


CEILING = {6: {"LIST": 19, "GET": 34, "HEAD": 0, "PUT": 24, "DELETE": 35},
           8: {"LIST": 19, "GET": 34, "HEAD": 0, "PUT": 27, "DELETE": 26}}


def archive_files(storage: Storage) -> int:
    """The files of the table's archived timeline (version 6: archive log files, 8: the LSM
    timeline's latest snapshot)."""
    from upsertlake.timeline import archived_log, archived_lsm
    from upsertlake.timeline.layouts import table_layout

    layout = table_layout(storage)
    if layout.version == 1:
        return len(archived_log.archive_log_files(storage.list(layout.archive)))
    latest = archived_lsm.latest_version(storage, layout.archive)
    return len(archived_lsm.read_manifest(storage, layout.archive, latest))


FRESH_UPSERT = """
import json, sys
import pyarrow as pa
from upsertlake import open_table
uri, options, keep = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
table = open_table(uri, options=keep, storage_options=options)
result = table.upsert(pa.table({"uuid": ["k000000", "k900000"], "ts": [2000, 2000], "part": ["p0000", "p0000"],
                                "fare": [1.0, 2.0]}))
assert (result.num_updates, result.num_inserts) == (1, 1), result
"""


def fresh_process_requests(s3_server, instants: int) -> dict[str, int]:
    """The requests of an upsert in a new process (nothing cached), on a table whose `instants`
    completed instants one long-lived writer made."""
    uri = f"s3://{s3_server.new_bucket()}/t"
    table = create_table(uri, "t", "uuid", "ts", "part", options=KEEP, storage_options=s3_server.options)
    table.bulk_insert(rows(range(12), 4, 1))
    for ts in range(2, instants + 1):
        table.upsert(rows([2 + ts % 8], 4, ts))
    server_counts(s3_server)
    subprocess.run([sys.executable, "-c", FRESH_UPSERT, uri, json.dumps(s3_server.options), json.dumps(KEEP)],
                   check=True, stdin=subprocess.DEVNULL, timeout=300)
    return server_counts(s3_server)


def test_a_fresh_process_reads_the_timeline_in_requests_that_do_not_grow_with_it(s3_server) -> None:
    """A new process has nothing cached: without the commit digest it read every completed
    commit's document, one GET each (the missing-file and damaged-table checks need them all).
    The writers keep the digest (one object) within digest.REFRESH commits of the timeline, so
    12 and 28 instants cost the same requests: the digest, and the 4 documents outside it."""
    few = fresh_process_requests(s3_server, instants=12)
    many = fresh_process_requests(s3_server, instants=28)
    assert 12 % REFRESH == 28 % REFRESH == 4
    assert many == few
    # GET: the digest and the 4 documents outside it, and what the long-lived writer's upsert
    # reads too (hoodie.properties, the lease, the touched file): 7. Without the digest, every
    # document: 12 + 7 here, 28 + 7 there.
    assert few["GET"] == 12


def test_the_commit_digest_is_used_only_where_the_listing_shows_the_same_version(s3_server, table_version) -> None:
    """A document in the digest whose instant file changed (its ETag differs) or is gone is read
    from the timeline, not from the digest: a stale digest cannot hide a rollback or a damaged file.
    Both timeline layouts (version 8: `.hoodie/timeline/`, Avro documents)."""
    uri = f"s3://{s3_server.new_bucket()}/t"
    table = create_table(uri, "t", "uuid", "ts", "part", options=KEEP, storage_options=s3_server.options)
    for ts in range(1, REFRESH + 2):
        table.upsert(rows([ts], 4, ts))
    storage = Storage(uri, s3_server.options)
    timeline = Timeline.load(storage)
    done = timeline.completed_writes()
    listed = {timeline.path(i): timeline.versions[i] for i in done}
    held = digest.read(storage, listed)
    assert len(held) >= REFRESH and all(held[p] == storage.read_bytes(p) for p in held)
    victim = sorted(held)[0]
    assert victim.rsplit("/", 1)[0] == (".hoodie/timeline" if table_version == 8 else ".hoodie")
    storage.write_bytes(victim, b"{not json")  # a damaged instant file: a new ETag
    reread = Timeline.load(storage)
    assert victim not in digest.read(storage, {timeline.path(i): reread.versions[i] for i in reread.completed_writes()})
    assert {p for p in held if p != victim} <= set(
        digest.read(storage, {reread.path(i): reread.versions[i] for i in reread.completed_writes()}))
    code = f"from upsertlake import open_table; open_table({uri!r}, storage_options={s3_server.options!r}).upsert(" \
           "__import__('pyarrow').table({'uuid': ['k1'], 'ts': [99], 'part': ['p0001'], 'fare': [1.0]}))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                         timeout=300)
    assert run.returncode != 0 and "cannot parse s3://" in run.stderr and victim.rsplit("/", 1)[-1] in run.stderr


def test_missing_files_are_found_by_folder_listings_and_lone_heads(s3_server, s3_table) -> None:
    """A commit's check that every file it wrote is still there: one LIST per folder holding
    several of them, a HEAD for a lone one; each missing file named, present ones not."""
    from upsertlake.storage import Storage

    storage = Storage(s3_table, s3_server.options)
    for path in ("a/1.parquet", "a/2.parquet", "a/3.parquet", "b/1.parquet", "c/1.parquet"):
        storage.write_bytes(path, b"x")
    storage.delete("a/2.parquet")
    storage.delete("c/1.parquet")
    server_counts(s3_server)
    wanted = ["a/1.parquet", "a/2.parquet", "a/3.parquet", "b/1.parquet", "c/1.parquet", "d/1.parquet", "d/2.parquet"]
    assert sorted(storage.missing(wanted)) == ["a/2.parquet", "c/1.parquet", "d/1.parquet", "d/2.parquet"]
    counted = server_counts(s3_server)
    assert (counted.get("LIST", 0), counted.get("HEAD", 0)) == (2, 2)  # folders a and d listed; b and c HEADed


def test_the_table_listing_skips_the_timeline_folder(s3_server, s3_table) -> None:
    """The whole table's listing (a write touching many partitions, the doctor) leaves `.hoodie/`
    out: a page that ends inside `.hoodie/` is the last of its listing, and a second one starts
    after its last key, so 2,100 timeline objects (three pages of 1,000 in a plain listing) cost
    no request of their own; a table that fits one page is listed in one request."""
    from concurrent.futures import ThreadPoolExecutor

    from upsertlake.storage import Storage

    storage = Storage(s3_table, s3_server.options)
    outside = ["!first/a.parquet", "-1/b.parquet", ".abc_x.log.1_0-1-0", ".hoodie0", "p=1/c.parquet", "z/d.parquet"]
    inside = [f".hoodie/{i:05d}.commit" for i in range(2100)] + [".hoodie/.aux/x", ".hoodie/~last"]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda p: storage.write_bytes(p, b"x"), outside + inside))
    server_counts(s3_server)
    assert sorted(e.path for e in storage.list_outside(".hoodie")) == sorted(outside)
    assert server_counts(s3_server)["LIST"] == 2  # up to .hoodie/, then after it
    assert len(storage.list("", recursive=True)) == len(outside) + len(inside)
    assert server_counts(s3_server)["LIST"] == 3  # a plain listing: 3 pages
    storage.delete_dir(".hoodie")
    storage.write_bytes(".hoodie/hoodie.properties", b"x")
    server_counts(s3_server)
    assert sorted(e.path for e in storage.list_outside(".hoodie")) == sorted(outside)
    assert server_counts(s3_server)["LIST"] == 1

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
    # start (under the lock), for the schema and the plan, at commit (under the lock), and once
    # after it for the services; the 2 partitions; the metadata-table check; the markers' delete.
    # HEAD: none (the written files were checked at commit, one HEAD each, until the commit
    # trusted a heartbeat that never lapsed). PUT: lock and release twice, the fence, the
    # heartbeat, 3 instant files, the 2 file groups' files, and for all of them one marker batch
    # (with MARKERS.type) and one key summary sidecar.
    assert {k: few.get(k, 0) for k in ("LIST", "GET", "HEAD", "PUT")} == {"LIST": 8, "GET": 7, "HEAD": 0, "PUT": 14}


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

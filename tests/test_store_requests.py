"""Object stores bill per request: the requests of one upsert, counted by the S3 server itself,
grow with the partitions and file groups the batch touches, not with the table's untouched
partitions or the length of its timeline."""

from __future__ import annotations

import json
import urllib.request

import pyarrow as pa

from upsertlake import create_table, open_table

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
    # start (under the lock), for the schema, for the plan and at commit (under the lock), and once
    # after it for the services; the 2 partitions; the metadata-table check; the markers' delete.
    # HEAD: the 2 written files. PUT: lock and release twice, the
    # fence, the heartbeat, 3 instant files, and per file group its file, marker and key summary.
    assert {k: few[k] for k in ("LIST", "GET", "HEAD", "PUT")} == {"LIST": 9, "GET": 7, "HEAD": 2, "PUT": 15}


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

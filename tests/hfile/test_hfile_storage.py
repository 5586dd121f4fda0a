"""HFiles read through the table's storage: a local file, and an object on the S3 test server,
where a point lookup in a file larger than the tail a first GET brings costs one ranged GET."""

from __future__ import annotations

import random

from upsertlake.hfile import HFileReader, write_hfile
from upsertlake.storage import Storage
from upsertlake.storage.object_files import TAIL_BYTES

REL = ".hoodie/metadata/record_index/record-index-0000-0_0-1-0_001.hfile"


def big_hfile() -> tuple[list[tuple[str, bytes]], bytes]:
    """An uncompressed file of about 14 MB in 64 KiB blocks."""
    rng = random.Random(3)
    entries = [(f"{i:012d}-{rng.getrandbits(64):016x}", rng.randbytes(100)) for i in range(100_000)]
    return entries, write_hfile(entries, block_size=64 * 1024, file_creation_time=0)


def test_local_storage(tmp_path) -> None:
    entries, data = big_hfile()
    storage = Storage(tmp_path)
    storage.write_bytes(REL, data)
    with storage.open_input(REL) as file:
        reader = HFileReader(file, REL)
        assert reader.get(entries[4242][0]) == entries[4242][1]
        assert [k for k, _ in reader.scan(entries[99_998][0][:12])] == [entries[99_998][0].encode()]


def test_a_point_lookup_on_s3_is_one_ranged_get(s3_server) -> None:
    entries, data = big_hfile()
    assert len(data) > TAIL_BYTES * 3 // 2
    storage = Storage(f"s3://{s3_server.new_bucket()}/t", s3_server.options)
    storage.write_bytes(REL, data)
    before = storage.requests.snapshot()
    with storage.open_input(REL) as file:
        reader = HFileReader(file, REL)
        assert storage.requests.since(before)["GET"] == 1  # the tail: trailer and load-on-open section
        assert reader.get(entries[10][0]) == entries[10][1]
        assert storage.requests.since(before)["GET"] == 2  # one block
        wanted = [entries[i][0] for i in (20_000, 30_000, 99_999)]  # two blocks before the tail, one in it
        assert reader.get_many(wanted) == {k.encode(): dict(entries)[k] for k in wanted}
        assert storage.requests.since(before)["GET"] == 4
    assert storage.requests.since(before)["HEAD"] == 0 and storage.requests.since(before)["LIST"] == 0

"""Tables on Azure Blob Storage, against Azurite (the Azure storage emulator, from npm) on loopback,
started once per test session (conftest's `azurite`). No mocks: every request crosses a socket.

- the engine's writes and reads on `az://` and `abfs://` give what they give locally;
- a completed instant is a conditional create (`If-None-Match: *` on Azure): one winner, and a
  second completion of the same instant is refused with the first one's bytes unchanged;
- the storage-based lock (Hudi 1.1's lease, replaced by ETag-matched PUTs, `If-Match` on Azure)
  is acquired, renewed, released, and fences a holder whose lease another owner took.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import create_table, open_table
from upsertlake.concurrency.lock import make_lock
from upsertlake.concurrency.storage_lock import LOCK_FILE
from upsertlake.config import Config
from upsertlake.errors import CorruptTableError, LockLostError, StorageError
from upsertlake.storage import Storage
from upsertlake.timeline.active import Timeline, transition
from upsertlake.timeline.instant import State

from helpers import assert_one_winner_per_name

LOCK_OPTIONS = {
    "hoodie.write.lock.storage.validity.timeout.secs": "10",
    "hoodie.write.lock.storage.heartbeat.poll.secs": "1",
    "hoodie.write.lock.wait_time_ms": "30000",
}


def batch(keys: list[str], ts: int, fare: float) -> pa.Table:
    return pa.table({"uuid": keys, "ts": [ts] * len(keys), "city": [("sf", "la")[int(k[1:]) % 2] for k in keys],
                     "fare": [fare + int(k[1:]) for k in keys]})


def writes_and_reads(path: str, storage_options: dict | None) -> dict[str, object]:
    t = create_table(path, name="trips", record_key="uuid", precombine_field="ts", partition_fields=["city"],
                     storage_options=storage_options)
    first = t.upsert(batch([f"k{i}" for i in range(20)], 1, 10.0))
    t.upsert(batch([f"k{i}" for i in range(10, 30)], 2, 20.0))
    t.delete(pa.table({"uuid": ["k0"], "city": ["sf"]}))
    reopened = open_table(path, storage_options=storage_options)
    return {
        "rows": sorted(reopened.read().select(["uuid", "ts", "city", "fare"]).to_pylist(), key=lambda r: r["uuid"]),
        "as_of_first": reopened.read(as_of=first.instant_time).num_rows,
        "actions": [(i.action.value, i.state.value) for i in reopened.timeline()],
    }


def test_writes_and_reads_on_azure_give_what_they_give_locally(azurite, az_table, tmp_path: Path) -> None:
    local = writes_and_reads(str(tmp_path / "t"), None)
    assert writes_and_reads(az_table, azurite.options) == local
    assert len(local["rows"]) == 29 and local["as_of_first"] == 20
    # the abfs:// form names the account in the host; the endpoint option still points at Azurite
    container = azurite.new_container()
    abfs = f"abfs://{container}@{azurite.ACCOUNT}.dfs.core.windows.net/tables/t"
    assert writes_and_reads(abfs, azurite.options) == local
    files = open_table(abfs, storage_options=azurite.options).files()
    assert files and all(f.startswith(abfs + "/") for f in files)


def test_a_completed_instant_is_created_once(azurite, az_table) -> None:
    t = create_table(az_table, name="t", record_key="uuid", precombine_field="ts", storage_options=azurite.options,
                     options={"hoodie.write.table.version": "6"})
    done = t.upsert(batch(["k1"], 1, 1.0))
    storage = Storage(az_table, azurite.options)
    timeline = Timeline.load(storage)
    completed = timeline.get(done.instant_time)
    path = timeline.path(completed)
    before = storage.read_bytes(path)
    with pytest.raises(CorruptTableError, match="instant file already exists"):
        transition(storage, completed.with_state(State.INFLIGHT), State.COMPLETED, b"{}")
    assert storage.read_bytes(path) == before
    assert_one_winner_per_name(storage, rounds=10)


def test_the_storage_lock_acquires_renews_releases_and_fences(azurite, az_table) -> None:
    storage = Storage(az_table, azurite.options)
    lock = make_lock(storage, Config.resolve(LOCK_OPTIONS))
    assert type(lock.provider).__name__ == "StorageLockProvider"  # the default on an object store
    with lock.hold():
        held = json.loads(storage.read_bytes(LOCK_FILE))
        assert set(held) == {"expired", "validUntil", "owner"} and held["expired"] is False
        assert held["owner"] == lock.provider.owner
        assert 8_000 < held["validUntil"] - time.time() * 1000 <= 10_000
        time.sleep(1.5)
        lock.fence()  # still ours: renewed by an ETag-matched PUT
        assert json.loads(storage.read_bytes(LOCK_FILE))["validUntil"] > held["validUntil"]
    released = json.loads(storage.read_bytes(LOCK_FILE))
    assert released == {**released, "expired": True, "owner": held["owner"]}
    with lock.hold():
        taken = {"expired": False, "validUntil": int(time.time() * 1000) + 60_000, "owner": "took-it-over"}
        storage.write_bytes(LOCK_FILE, json.dumps(taken).encode())
        with pytest.raises(LockLostError, match="no longer held"):
            lock.fence()
    assert json.loads(storage.read_bytes(LOCK_FILE))["owner"] == "took-it-over"  # release did not touch theirs


def test_a_missing_container_is_a_named_error_and_writes_nothing(azurite) -> None:
    refusal = "no such container .no-such-container. .ContainerNotFound: The specified container does not exist"
    with pytest.raises(StorageError, match=refusal):
        create_table("az://no-such-container/t", name="t", record_key="id", storage_options=azurite.options)


def test_the_emulator_switch_reaches_azurite(azurite, monkeypatch) -> None:
    """`azure_storage_use_emulator` (Azurite's well-known account), with the emulator's address in
    the environment variable object_store reads for it, read at the client's first use."""
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", f"http://127.0.0.1:{azurite.port}")
    path = f"az://{azurite.new_container()}/t"
    t = create_table(path, name="t", record_key="uuid", precombine_field="ts",
                     storage_options={"azure_storage_use_emulator": "true"})
    t.upsert(batch(["k1", "k2"], 1, 1.0))
    assert sorted(open_table(path, storage_options=azurite.options).read().column("uuid").to_pylist()) == ["k1", "k2"]

"""Tables on object storage, against a real S3 API: moto's server on loopback (tests/scripts/s3_server.py),
started once per test session. No mocks in this process: every request crosses a socket.

- the engine's operations on `s3://` give exactly what they give on a local folder;
- Apache Hudi's reader reads what we wrote there;
- unsupported schemes are refused with nothing created;
- commits are conditional creates (one winner), and the storage-based lock follows Hudi 1.1's
  lease format, holds us back while another owner's lease is live, and fences a holder that lost it.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest

from upsertlake import create_table, open_table
from upsertlake.concurrency.lock import make_lock
from upsertlake.concurrency.storage_lock import LOCK_FILE
from upsertlake.config import Config
from upsertlake.errors import LockLostError, LockTimeoutError, UnsupportedSchemeError
from upsertlake.storage import Storage

from helpers import SCRIPTS, assert_one_winner_per_name

DATA = ["uuid", "ts", "city", "fare"]


def batch(keys: list[str], ts: int, fare: float, cities: tuple[str, ...] = ("sf", "nyc", "la")) -> pa.Table:
    return pa.table({
        "uuid": keys,
        "ts": [ts] * len(keys),
        "city": [cities[int(k[1:]) % len(cities)] for k in keys],
        "fare": [fare + int(k[1:]) for k in keys],
    })


def snapshot(table: pa.Table) -> list[dict]:
    return sorted(table.select(DATA).to_pylist(), key=lambda r: r["uuid"])


def run_sequence(path: str, storage_options: dict | None) -> dict[str, object]:
    """Every kind of operation once, returning what each read gave (instant times aside)."""
    out: dict[str, object] = {}
    t = create_table(path, name="trips", record_key="uuid", precombine_field="ts", partition_fields=["city"],
                     storage_options=storage_options)
    first = t.upsert(batch([f"k{i}" for i in range(30)], 1, 10.0))
    t.upsert(batch([f"k{i}" for i in range(20, 50)], 2, 20.0))
    t.delete(pa.table({"uuid": ["k0", "k1"], "city": ["sf", "nyc"]}))
    out["snapshot"] = snapshot(t.read())
    out["as_of_first"] = snapshot(t.read(as_of=first.instant_time))
    out["incremental"] = snapshot(t.read_incremental(begin=first.instant_time))
    out["filtered"] = snapshot(t.read(filters=[("city", "=", "la")]))
    saved = t.savepoint()
    t.upsert(batch([f"k{i}" for i in range(40, 60)], 3, 30.0))
    bad = t.upsert(batch(["k5"], 9, 99.0))
    t.rollback(bad.instant_time)
    out["after_rollback"] = snapshot(t.read())
    t.cluster({"hoodie.clustering.plan.strategy.small.file.limit": str(10 * 2**20)})
    out["after_cluster"] = snapshot(t.read())
    out["cleaned"] = len(t.clean(retained=1).files_deleted) > 0
    out["after_clean"] = snapshot(t.read())
    t.restore(saved.time)
    out["restored"] = snapshot(t.read())
    t.upsert(batch([f"k{i}" for i in range(55, 70)], 4, 40.0))
    out["final"] = snapshot(open_table(path, storage_options=storage_options).read())
    out["actions"] = [(i.action.value, i.state.value) for i in t.timeline()]
    return out


def test_every_operation_on_s3_gives_what_it_gives_locally(s3_server, s3_table, tmp_path: Path) -> None:
    local = run_sequence(str(tmp_path / "t"), None)
    remote = run_sequence(s3_table, s3_server.options)
    assert remote == local
    assert len(local["final"]) == 63 and local["restored"] == local["snapshot"] and local["cleaned"]
    # Apache Hudi's reader (hudi-rs) reads the table we wrote, from the S3 server, as we read it
    from hudi import HudiReadOptions, HudiTableBuilder

    hudi = HudiTableBuilder.from_base_uri(s3_table).with_storage_options(
        {"aws_endpoint_url": s3_server.endpoint, "aws_allow_http": "true", **s3_server.env}).build()
    assert snapshot(pa.Table.from_batches(hudi.read(HudiReadOptions()))) == remote["final"]


def test_storage_options_or_the_environment_reach_the_store(s3_server, s3_table) -> None:
    """The standard AWS variables alone are enough (read at first use, in a fresh process)."""
    code = (
        "import sys, pyarrow as pa, upsertlake\n"
        "t = upsertlake.create_table(sys.argv[1], name='t', record_key='uuid', precombine_field='ts')\n"
        "t.upsert(pa.table({'uuid': ['a'], 'ts': [1], 'city': ['sf'], 'fare': [1.0]}))\n"
    )
    import os

    env = {**os.environ, **s3_server.env}
    subprocess.run([sys.executable, "-c", code, s3_table], env=env, check=True, capture_output=True)
    assert snapshot(open_table(s3_table, storage_options=s3_server.options).read()) == [
        {"uuid": "a", "ts": 1, "city": "sf", "fare": 1.0}
    ]


@pytest.mark.parametrize("uri", ["hdfs://namenode/t", "wasb://c@a.blob.core.windows.net/t", "ftp://h/t", "HDFS://x/t"])
def test_unsupported_schemes_are_refused_and_nothing_is_created(uri: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    scheme = uri.split(":")[0].lower()
    for call in (lambda: create_table(uri, name="t", record_key="id"), lambda: open_table(uri)):
        with pytest.raises(UnsupportedSchemeError, match=f"unsupported URI scheme '{scheme}://'"):
            call()
    proc = subprocess.run([sys.executable, "-m", "upsertlake.cli", "create", uri, "--name", "t", "--record-key", "id"],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and f"unsupported URI scheme '{scheme}://'" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", ["s3:/lake/t", "s3:lake/t", "gs:/lake/t", "abfs:/c/t", "hdfs:/x"])
def test_a_scheme_with_a_slash_missing_is_refused_not_a_local_folder(path: str, tmp_path: Path, monkeypatch) -> None:
    """`s3:/lake/t` (one slash) created a local folder `s3:`; it is refused by name, with what was
    meant, and nothing is created (a folder of that name is `./s3:/...`). Hadoop's `file:/path`
    is a local path."""
    monkeypatch.chdir(tmp_path)
    scheme = path.split(":")[0]
    for call in (lambda: create_table(path, name="t", record_key="id"), lambda: open_table(path)):
        with pytest.raises(UnsupportedSchemeError, match=f"'{path}' starts with '{scheme}:' but not '{scheme}://'"):
            call()
    run = subprocess.run([sys.executable, "-m", "upsertlake.cli", "create", path, "--name", "t", "--record-key", "id"],
                         capture_output=True, text=True)
    meant = f"{scheme}://{path.split(':', 1)[1].lstrip('/')}"
    assert run.returncode == 2 and f"a URI needs two slashes ({meant})" in run.stderr
    assert list(tmp_path.iterdir()) == []
    create_table(f"./{path}", name="t", record_key="id")  # a folder so named, when written so
    assert (tmp_path / path.split("/")[0]).is_dir()
    assert create_table(f"file:{tmp_path}/h", name="h", record_key="id").path == str(tmp_path / "h")


def test_storage_options_are_strings_and_a_local_path_says_it_ignores_them(s3_server, tmp_path: Path) -> None:
    """`{"aws_region": 5}` was sent as "5"; storage_options take strings (as delta-rs and obstore),
    others are refused by name. On a local path they configure nothing: accepted, as delta-rs and
    pyiceberg do, with a warning naming them (the command line prints it as one line)."""
    from upsertlake import ConfigError, UpsertlakeWarning

    for bad in ({"aws_region": 5}, {"allow_http": True}, {"aws_endpoint": None}):
        with pytest.raises(ConfigError, match=f"storage_options take strings.*not '{next(iter(bad))}': "):
            create_table("s3://lake/t", name="t", record_key="id", storage_options=bad)
    with pytest.raises(ConfigError, match="storage_options must be a mapping"):
        open_table("s3://lake/t", storage_options=["aws_region"])
    with pytest.warns(UpsertlakeWarning, match=rf"storage_options \['aws_region', 'aws_secret_access_key'\] are "
                      rf"ignored: {tmp_path}/t is a local path"):
        create_table(tmp_path / "t", name="t", record_key="id",
                     storage_options={"aws_region": "us-east-1", "AWS_SECRET_ACCESS_KEY": "x"})
    with pytest.warns(UpsertlakeWarning, match="are ignored"):
        open_table(tmp_path / "t", storage_options={"aws_region": "us-east-1"})
    run = subprocess.run([sys.executable, "-m", "upsertlake.cli", "show", str(tmp_path / "t"), "--storage-option",
                          "aws_region=us-east-1"], capture_output=True, text=True)
    assert run.returncode == 0
    assert run.stderr == (f"warning: storage_options ['aws_region'] are ignored: {tmp_path}/t is a local path "
                          "(they configure object stores: s3://, gs://, abfs://)\n")


def test_a_missing_bucket_is_a_named_error_and_writes_nothing(s3_server) -> None:
    with pytest.raises(Exception) as err:
        create_table("s3://no-such-bucket-here/t", name="t", record_key="id", storage_options=s3_server.options)
    assert type(err.value).__name__ == "StorageError"
    assert "no-such-bucket-here" in str(err.value)


@pytest.fixture
def s3_server_with_auth():
    """A second S3 server that checks credentials (moto's IAM: the tests' keys are unknown to it)."""
    import os

    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    proc = subprocess.Popen([sys.executable, str(SCRIPTS / "s3_server.py")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        yield f"http://127.0.0.1:{int(proc.stdout.readline())}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_store_failures_say_what_happened_then_the_stores_detail(s3_server, s3_server_with_auth, tmp_path) -> None:
    """The store's error came as raw text cut at 300 characters, mid-word (`<Message>The speci`,
    `Generic { store: "S3", source: ListRe`). It says what happened first now, then the store's
    code and message and the request, whole; nothing is created."""
    from upsertlake.errors import StorageError

    def failure(uri: str, options: dict, call=create_table) -> str:
        with pytest.raises(StorageError) as err:
            call(uri, name="t", record_key="id", storage_options=options) if call is create_table else call()
        return str(err.value)

    missing = failure("s3://no-such-bucket-here/t", s3_server.options)
    assert missing.startswith("cannot read s3://no-such-bucket-here/t: no such bucket 'no-such-bucket-here' "
                              "(NoSuchBucket: The specified bucket does not exist; GET http://127.0.0.1:"), missing
    denied = failure("s3://any/t", {**s3_server.options, "aws_endpoint": s3_server_with_auth})
    assert denied.startswith("cannot read s3://any/t: access denied to bucket 'any': check the credentials and "
                             "their permissions (InvalidAccessKeyId: The AWS Access Key Id you provided does not "
                             "exist in our records.; GET http://127.0.0.1:"), denied
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down = {**s3_server.options, "aws_endpoint": f"http://127.0.0.1:{port}"}
    refused = failure("s3://b/t", down)
    assert refused.startswith(f"cannot read s3://b/t: connection refused by the endpoint 127.0.0.1:{port}: nothing "
                              "answers there (check the endpoint and that it is up) "
                              f"(GET http://127.0.0.1:{port}/b?"), refused
    assert refused.endswith(" retries)")
    put = failure("", {}, call=lambda: Storage("s3://b/t", down).write_bytes("x", b"x"))
    assert put.startswith(f"write_bytes s3://b/t/x failed: connection refused by the endpoint 127.0.0.1:{port}")
    assert all("Debug source" not in m and "Generic" not in m for m in (missing, denied, refused, put))
    assert "no-such-bucket-here" not in {b["Name"] for b in s3_server.client.list_buckets()["Buckets"]}


def test_conditional_create_has_exactly_one_winner(s3_server, s3_table) -> None:
    storage = Storage(s3_table, s3_server.options)
    assert_one_winner_per_name(storage, rounds=20)


# -- the storage-based lock -----------------------------------------------------------------------

LOCK_OPTIONS = {
    "hoodie.write.lock.storage.validity.timeout.secs": "10",
    "hoodie.write.lock.storage.heartbeat.poll.secs": "1",
    "hoodie.write.lock.wait_time_ms": "30000",
}


def lease(s3_server, s3_table: str) -> dict:
    bucket, _, prefix = s3_table[len("s3://"):].partition("/")
    body = s3_server.client.get_object(Bucket=bucket, Key=f"{prefix}/{LOCK_FILE}")["Body"].read()
    return json.loads(body)


def put_lease(s3_server, s3_table: str, data: dict) -> None:
    bucket, _, prefix = s3_table[len("s3://"):].partition("/")
    s3_server.client.put_object(Bucket=bucket, Key=f"{prefix}/{LOCK_FILE}", Body=json.dumps(data).encode())


def test_the_lease_is_hudis_format_and_released_as_expired(s3_server, s3_table) -> None:
    storage = Storage(s3_table, s3_server.options)
    lock = make_lock(storage, Config.resolve(LOCK_OPTIONS))
    assert type(lock.provider).__name__ == "StorageLockProvider"  # the default on an object store
    with lock.hold():
        held = lease(s3_server, s3_table)
        assert set(held) == {"expired", "validUntil", "owner"} and held["expired"] is False
        assert held["owner"] == lock.provider.owner
        assert 8_000 < held["validUntil"] - time.time() * 1000 <= 10_000
    released = lease(s3_server, s3_table)
    assert released["expired"] is True and released["owner"] == held["owner"]


def test_a_live_foreign_lease_holds_the_commit_back_until_it_expires(s3_server, s3_table) -> None:
    t = create_table(s3_table, name="t", record_key="uuid", precombine_field="ts", storage_options=s3_server.options,
                     options={**LOCK_OPTIONS, "hoodie.write.concurrency.mode": "optimistic_concurrency_control"})
    until = int(time.time() * 1000) + 3000
    put_lease(s3_server, s3_table, {"expired": False, "validUntil": until, "owner": "a-hudi-writer"})
    t.upsert(batch(["k1"], 1, 1.0))
    done = time.time() * 1000
    assert done > until + 500  # held back past validUntil and the clock-drift margin
    assert lease(s3_server, s3_table)["owner"] != "a-hudi-writer"
    short = {**LOCK_OPTIONS, "hoodie.write.lock.wait_time_ms": "500"}
    put_lease(s3_server, s3_table, {"expired": False, "validUntil": int(time.time() * 1000) + 60_000, "owner": "x"})
    with pytest.raises(LockTimeoutError, match="owner x"):
        open_table(s3_table, options=short, storage_options=s3_server.options).upsert(batch(["k2"], 1, 1.0))


def test_a_holder_that_lost_its_lease_does_not_commit(s3_server, s3_table) -> None:
    storage = Storage(s3_table, s3_server.options)
    lock = make_lock(storage, Config.resolve(LOCK_OPTIONS))
    with lock.hold():
        lock.fence()  # still ours: renewed
        put_lease(s3_server, s3_table, {"expired": False, "validUntil": int(time.time() * 1000) + 60_000,
                                        "owner": "took-it-over"})
        with pytest.raises(LockLostError, match="no longer held"):
            lock.fence()
    assert lease(s3_server, s3_table)["owner"] == "took-it-over"  # release did not touch theirs


# -- writers in several processes -----------------------------------------------------------------

OCC_WRITER = """
import json, sys, time, pyarrow as pa, upsertlake
from upsertlake.errors import WriteConflictError
path, me, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
opts = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control",
        "hoodie.write.lock.storage.validity.timeout.secs": "10",
        "hoodie.write.lock.storage.heartbeat.poll.secs": "1"}
t = upsertlake.open_table(path, options=opts)
for r in range(rounds):
    ts = time.time_ns()
    keys = [f"{me}-{r}", f"shared-{r % 3}"]
    b = pa.table({"uuid": keys, "ts": [ts, ts], "city": ["sf", "sf"], "fare": [float(r), float(r)],
                  "writer": [me, me]})
    try:
        res = t.upsert(b)
        print(json.dumps({"ok": True, "keys": keys, "ts": ts, "instant": res.instant_time}), flush=True)
    except WriteConflictError:
        print(json.dumps({"ok": False, "keys": keys, "ts": ts}), flush=True)
"""


def test_writers_in_two_processes_under_occ_lose_nothing_acknowledged(s3_server, s3_table) -> None:
    import os

    t = create_table(s3_table, name="t", record_key="uuid", precombine_field="ts", partition_fields=["city"],
                     storage_options=s3_server.options)
    t.upsert(pa.table({"uuid": ["seed"], "ts": [0], "city": ["sf"], "fare": [0.0], "writer": ["seed"]}))
    env = {**os.environ, **s3_server.env}
    procs = [subprocess.Popen([sys.executable, "-c", OCC_WRITER, s3_table, name, "8"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        results += [json.loads(line) for line in out.splitlines()]
    acked = [r for r in results if r["ok"]]
    assert len(results) == 16 and len(acked) >= 8  # at least one writer wins each clash
    rows = {r["uuid"]: r for r in open_table(s3_table, storage_options=s3_server.options).read().to_pylist()}
    for r in results:  # every acknowledged write is there; no failed write's own key is
        assert (r["keys"][0] in rows) == r["ok"], r
    for shared in {k for r in results for k in r["keys"] if k.startswith("shared")}:
        latest = max((r["ts"] for r in acked if shared in r["keys"]), default=None)
        assert (rows[shared]["ts"] if shared in rows else None) == latest, shared
    commits = [i for i in t.timeline() if i.action.value == "commit" and i.state.value == "completed"]
    assert len(commits) == 1 + len(acked)


PAUSED_HOLDER = """
import sys, time
from upsertlake.concurrency.lock import make_lock
from upsertlake.config import Config
from upsertlake.errors import LockLostError
from upsertlake.storage import Storage
storage = Storage(sys.argv[1])
lock = make_lock(storage, Config.resolve({"hoodie.write.lock.storage.validity.timeout.secs": "10",
                                          "hoodie.write.lock.storage.heartbeat.poll.secs": "1"}))
with lock.hold():
    print("held", flush=True)
    sys.stdin.readline()  # the test stops us here (SIGSTOP), lets the lease lapse, then resumes us
    try:
        lock.fence()
        print("committed", flush=True)
    except LockLostError:
        print("fenced", flush=True)
"""


def test_a_paused_holder_loses_the_lock_and_does_not_commit_over_the_next_writer(s3_server, s3_table) -> None:
    import os
    import signal

    t = create_table(s3_table, name="t", record_key="uuid", precombine_field="ts", storage_options=s3_server.options,
                     options={**LOCK_OPTIONS, "hoodie.write.concurrency.mode": "optimistic_concurrency_control"})
    holder = subprocess.Popen([sys.executable, "-c", PAUSED_HOLDER, s3_table], env={**os.environ, **s3_server.env},
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        os.kill(holder.pid, signal.SIGSTOP)
        t.upsert(batch(["k1"], 1, 1.0))  # waits out the paused holder's lease, then takes it over
        assert snapshot(t.read()) == [{"uuid": "k1", "ts": 1, "city": "nyc", "fare": 2.0}]
        os.kill(holder.pid, signal.SIGCONT)
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "fenced"
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.wait(timeout=30)


# -- a faulty network -----------------------------------------------------------------------------


@contextmanager
def fault_proxy(s3_server, share: str, seed: str, drop_reply_suffix: str = "") -> Iterator[str]:
    """A proxy in front of the server (tests/scripts/s3_fault_proxy.py); yields its endpoint."""
    port = s3_server.endpoint.rsplit(":", 1)[1]
    args = [sys.executable, str(SCRIPTS / "s3_fault_proxy.py"), port, share, seed, drop_reply_suffix]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    try:
        yield f"http://127.0.0.1:{int(proc.stdout.readline())}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def faulty_endpoint(s3_server):
    """A proxy in front of the server that fails 10% of requests (503, 500, dropped connections)."""
    with fault_proxy(s3_server, "0.1", "3") as endpoint:
        yield endpoint


WAITS = "this single writer waits"  # the warning of a single writer that finds another write in flight


def test_writes_through_a_faulty_network_succeed_or_fail_cleanly(
    s3_server, s3_table, faulty_endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    """Every upsert through a network failing 10% of requests commits or fails leaving nothing
    visible, and none waits for another: a create whose reply was dropped after the server stored
    it is retried and tells its own object (with a 2 s heartbeat window, a create left behind would
    show as a 120 s wait)."""
    from upsertlake.errors import UpsertlakeError

    faulty = {**s3_server.options, "aws_endpoint": faulty_endpoint}
    t = create_table(s3_table, name="t", record_key="uuid", precombine_field="ts", partition_fields=["city"],
                     storage_options=faulty)
    model: dict[str, dict] = {}
    outcomes = []
    for n in range(12):
        keys = [f"k{(n * 7 + i) % 40}" for i in range(10)]
        b = batch(keys, n + 1, float(n))
        try:
            with caplog.at_level("WARNING", logger="upsertlake.engine.instants"):
                t.upsert(b)
        except UpsertlakeError as exc:  # a clean failure: nothing of it may be visible
            outcomes.append(type(exc).__name__)
            continue
        outcomes.append("ok")
        model.update({r["uuid"]: r for r in b.to_pylist()})
    assert outcomes.count("ok") >= 10, outcomes
    assert not [r for r in caplog.records if WAITS in r.getMessage()]
    direct = open_table(s3_table, storage_options=s3_server.options)
    assert snapshot(direct.read()) == sorted(model.values(), key=lambda r: r["uuid"])
    assert snapshot(t.read()) == snapshot(direct.read())
    assert [i for i in direct.timeline() if not i.is_completed] == []


def test_a_requested_instant_whose_reply_was_dropped_holds_no_write_back(
    s3_server, s3_table, caplog: pytest.LogCaptureFixture
) -> None:
    """The conditional create of a write's `.requested` file lands, its reply is lost, and the
    store's retry finds the object. An empty object could be anyone's: the writer took the next
    instant time and left its first one requested, with a heartbeat that no longer beat, so the
    next single write waited out the heartbeat window (120 s). The create carries a token of its
    own in the object's metadata: the writer knows the object is its own and goes on under it."""
    t = create_table(s3_table, name="t", record_key="uuid", precombine_field="ts", storage_options=s3_server.options)
    t.upsert(batch(["k1"], 1, 1.0))
    with fault_proxy(s3_server, "0", "1", ".commit.requested") as endpoint:
        faulty = open_table(s3_table, storage_options={**s3_server.options, "aws_endpoint": endpoint})
        first = faulty.upsert(batch(["k2"], 1, 2.0))
        began = time.monotonic()
        with caplog.at_level("WARNING", logger="upsertlake.engine.instants"):
            second = faulty.upsert(batch(["k3"], 1, 3.0))
        assert time.monotonic() - began < 30 and not [r for r in caplog.records if WAITS in r.getMessage()]
    timeline = open_table(s3_table, storage_options=s3_server.options).timeline()
    last = [(first.instant_time, True), (second.instant_time, True)]
    assert [(i.time, i.is_completed) for i in timeline][-2:] == last
    assert len(timeline) == 3  # no instant left behind
    assert [r["uuid"] for r in snapshot(t.read())] == ["k1", "k2", "k3"]


KILLED_WRITER = """
import sys, pyarrow as pa, upsertlake
path = sys.argv[1]
keys = range(1000, 21000)
batch = pa.table({"uuid": [f"k{i}" for i in keys], "ts": [2] * len(keys), "city": [f"c{i % 4}" for i in keys],
                  "fare": [float(i) for i in keys]})
t = upsertlake.open_table(path, {"hoodie.parquet.max.file.size": 32 * 1024,
                                 "hoodie.client.heartbeat.interval_in_ms": "1000"})
t.upsert(batch)
print("COMMITTED", flush=True)
"""


def test_a_writer_killed_mid_write_leaves_nothing_visible_and_the_next_one_goes_on(s3_server, s3_table) -> None:
    import os
    import signal

    t = create_table(s3_table, name="t", record_key="uuid", precombine_field="ts", partition_fields=["city"],
                     storage_options=s3_server.options)
    t.upsert(pa.table({"uuid": ["k1", "k2"], "ts": [1, 1], "city": ["c1", "c2"], "fare": [1.0, 2.0]}))
    before = snapshot(t.read())
    bucket, _, prefix = s3_table[len("s3://"):].partition("/")
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, s3_table], env={**os.environ, **s3_server.env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    done = {i.time for i in t.timeline()}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # kill it once it is writing data files
        if (
            sum(k.endswith(".parquet") and k.rsplit("_", 1)[1][:17] not in done for k in s3_server.keys(bucket, prefix))
            >= 2
        ):
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert snapshot(open_table(s3_table, storage_options=s3_server.options).read()) == before
    began = time.monotonic()
    nxt = open_table(s3_table, options={"hoodie.client.heartbeat.interval_in_ms": "1000"},
                     storage_options=s3_server.options)
    nxt.upsert(pa.table({"uuid": ["k3"], "ts": [1], "city": ["c3"], "fare": [3.0]}))
    assert time.monotonic() - began < 60
    assert snapshot(nxt.read()) == [*before, {"uuid": "k3", "ts": 1, "city": "c3", "fare": 3.0}]
    states = [(i.action.value, i.state.value) for i in nxt.timeline()]
    # the killed instant is gone, its rollback recorded as Hudi's writers record it
    assert states == [("commit", "completed"), ("rollback", "completed"), ("commit", "completed")]
    leftovers = [k for k in s3_server.keys(bucket, prefix) if k.endswith(".parquet")
                 and k.rsplit("_", 1)[1][:17] not in {i.time for i in nxt.timeline()}]
    assert leftovers == []  # the killed write's data files went with its rollback


def test_the_command_line_on_s3(s3_server, s3_table, tmp_path: Path) -> None:
    """Every kind of command with --storage-option (no environment): create, upsert, read, explain
    (with its request count), files, timeline, stats, doctor, clean, rollback."""
    import pyarrow.parquet as pq

    store = [arg for k, v in s3_server.options.items() for arg in ("--storage-option", f"{k}={v}")]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "upsertlake.cli", *args, *store], capture_output=True, text=True,
                              env={k: v for k, v in __import__("os").environ.items() if not k.startswith("AWS_")})

    def ok(*args: str) -> str:
        run = cli(*args)
        assert run.returncode == 0, run.stderr
        return run.stdout

    first, second = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(batch(["k1", "k2", "k3"], 1, 1.0), first)
    pq.write_table(batch(["k2", "k4"], 2, 5.0), second)
    ok(
        "create",
        s3_table,
        "--name",
        "t",
        "--record-key",
        "uuid",
        "--precombine-field",
        "ts",
        "--partition-fields",
        "city",
    )
    ok("upsert", s3_table, str(first))
    explained = ok("explain", "upsert", s3_table, str(second))
    assert "updates 1" in explained and "inserts 1" in explained
    assert "store requests of this dry run (opening the table and reading the inputs included): LIST" in explained
    assert "store requests: LIST" in ok("upsert", s3_table, str(second))
    rows = json.loads(ok("read", s3_table, "--json"))
    assert sorted((r["uuid"], r["fare"]) for r in rows) == [("k1", 2.0), ("k2", 7.0), ("k3", 4.0), ("k4", 9.0)]
    files = ok("files", s3_table, "--current").split()
    assert files and all(f.startswith(s3_table + "/") and f.endswith(".parquet") for f in files)
    assert ok("timeline", s3_table).count("commit") >= 2
    ok("stats", s3_table)
    assert "no problems found" in ok("doctor", s3_table)
    ok("clean", s3_table)
    ok("rollback", s3_table)
    rows = json.loads(ok("read", s3_table, "--json"))
    assert sorted(r["uuid"] for r in rows) == ["k1", "k2", "k3"]
    denied = cli("read", s3_table.replace("s3://", "s3://no-such-bucket-"), "--json")
    assert denied.returncode != 0 and "StorageError" in denied.stderr


# -- Spark on an object store ---------------------------------------------------------------------


@pytest.mark.spark
def test_spark_writes_and_reads_an_s3_table_through_our_storage(spark, s3_server, s3_table) -> None:
    """The session's JVM has no S3 connector: tasks read and write through our storage layer, with
    the store's settings travelling with them (no AWS environment is needed on the executors)."""
    import upsertlake.spark as uls

    store = s3_server.options
    rows = [(f"k{i}", 1, ("sf", "nyc", "la")[i % 3], float(i)) for i in range(300)]
    base = spark.createDataFrame(rows, "uuid string, ts long, city string, fare double")
    keys = dict(table="t", record_key="uuid", precombine_field="ts", partition_fields="city", storage_options=store)
    uls.bulk_insert(base, s3_table, **keys)
    changes = spark.createDataFrame([(f"k{i}", 2, ("sf", "nyc", "la")[i % 3], -1.0) for i in range(0, 300, 10)]
                                    + [("new", 2, "sf", 7.0)], "uuid string, ts long, city string, fare double")
    uls.upsert(changes, s3_table, **keys)
    uls.delete(spark.createDataFrame([("k1", "nyc")], "uuid string, city string"), s3_table, **keys)
    expected = {f"k{i}": (-1.0 if i % 10 == 0 else float(i)) for i in range(300) if i != 1} | {"new": 7.0}
    ours = open_table(s3_table, storage_options=store).read()
    assert dict(zip(ours.column("uuid").to_pylist(), ours.column("fare").to_pylist())) == expected
    read = uls.read(spark, s3_table, storage_options=store).select("uuid", "fare").collect()
    assert {r.uuid: r.fare for r in read} == expected
    source = spark.read.format("upsertlake")
    for k, v in store.items():
        source = source.option(k, v)
    assert {r.uuid: r.fare for r in source.load(s3_table).select("uuid", "fare").collect()} == expected
    more = spark.createDataFrame([("k2", 3, "la", 22.0)], "uuid string, ts long, city string, fare double")
    sink = more.write.format("upsertlake").mode("append")
    for k, v in store.items():
        sink = sink.option(k, v)
    sink.option("hoodie.datasource.write.operation", "upsert").save(s3_table)
    after = open_table(s3_table, storage_options=store).read(filters=[("uuid", "=", "k2")])
    assert after.column("fare").to_pylist() == [22.0]
    bucket, _, prefix = s3_table[len("s3://"):].partition("/")
    staged = [k for k in s3_server.keys(bucket, prefix) if "spark-staging" in k or ".staging/" in k]
    assert not staged  # the source's staged rows and the upserts' staged tagged records went with their writes


def test_a_store_that_fails_every_request_gives_a_named_error(s3_server, tmp_path: Path) -> None:
    """After obstore's retries, a failure is a StorageError naming the operation and the object,
    never a raw obstore exception (nothing listens on port 9 of loopback)."""
    from upsertlake.errors import StorageError

    down = {**s3_server.options, "aws_endpoint": "http://127.0.0.1:9"}
    storage = Storage("s3://bucket-down/t", down)
    with pytest.raises(StorageError, match=r"write_bytes s3://bucket-down/t/\.hoodie/x failed"):
        storage.write_bytes(".hoodie/x", b"x")
    with pytest.raises(StorageError, match=r"list s3://bucket-down/t/\.hoodie failed"):
        storage.list(".hoodie")
    with pytest.raises(StorageError, match="cannot read s3://bucket-down/t"):
        open_table("s3://bucket-down/t", storage_options=down)


def test_a_heartbeat_outlives_a_beat_the_store_failed(s3_server, s3_table) -> None:
    """A beat that fails after obstore's retries (a StorageError, not an OSError) is a missed beat:
    the thread goes on, and the next beat lands. Before, the thread died and a live write was
    later taken for dead."""
    from upsertlake.concurrency.heartbeat import Heartbeat, last_heartbeat_ms

    storage = Storage(s3_table, s3_server.options)
    beat = Heartbeat(storage, "20260101000000000", 200).start()
    try:
        beat.storage = Storage(s3_table, {**s3_server.options, "aws_endpoint": "http://127.0.0.1:9"})
        time.sleep(2.5)  # at least one beat fails against the closed port
        beat.storage = storage
        first = last_heartbeat_ms(storage, "20260101000000000")
        deadline = time.monotonic() + 20
        while last_heartbeat_ms(storage, "20260101000000000") == first and time.monotonic() < deadline:
            time.sleep(0.2)
        assert beat._thread.is_alive()
        assert last_heartbeat_ms(storage, "20260101000000000") > first
    finally:
        beat.stop()


def test_files_uploaded_behind_their_writers_are_all_stored_when_the_block_ends(s3_server, s3_table) -> None:
    """`Storage.uploading`: a closed file uploads while its writer goes on; the block's end waits
    for every upload, a file whose own block raised is not uploaded, and an upload that failed is
    a named error when the block ends."""
    from upsertlake.errors import StorageError

    storage = Storage(s3_table, s3_server.options)
    with storage.uploading() as behind:
        for i in range(20):
            with behind.open_output(f"p/f{i}") as f:
                f.write(bytes([i]) * 300_000)
        with pytest.raises(RuntimeError, match="encoding failed"), behind.open_output("p/broken") as f:
            f.write(b"half a file")
            raise RuntimeError("encoding failed")
    assert sorted(e.name for e in storage.list("p")) == sorted(f"f{i}" for i in range(20))
    assert all(storage.read_bytes(f"p/f{i}") == bytes([i]) * 300_000 for i in range(20))

    down = Storage("s3://bucket-down/t", {**s3_server.options, "aws_endpoint": "http://127.0.0.1:9"})
    with pytest.raises(StorageError, match=r"write_bytes s3://bucket-down/t/a failed"), \
            down.uploading() as behind, behind.open_output("a") as f:
        f.write(b"x")
    local = Storage(s3_table.replace("s3://", "/tmp/never-"))
    with local.uploading() as same:
        assert same is local


def test_uploads_to_aws_itself_are_not_hashed_for_their_signature(monkeypatch) -> None:
    """On AWS's own endpoint (HTTPS) a PUT's body is sent as UNSIGNED-PAYLOAD, as AWS's SDKs do
    over HTTPS, sparing a SHA-256 pass over every uploaded byte; a custom endpoint (maybe plain
    HTTP, maybe a store without it) and the user's own choice keep what they say."""
    from upsertlake.storage.clients import object_store
    from upsertlake.storage.location import parse_location

    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_UNSIGNED_PAYLOAD"):
        monkeypatch.delenv(name, raising=False)
    location = parse_location("s3://bucket/t")
    assert object_store(location, {"aws_region": "us-east-1"}).config["unsigned_payload"] == "true"
    chosen = object_store(location, {"aws_region": "us-east-1", "aws_unsigned_payload": "false"})
    assert chosen.config["unsigned_payload"] == "false"
    custom = object_store(location, {"aws_region": "us-east-1", "aws_endpoint": "https://minio.example:9000"})
    assert "unsigned_payload" not in custom.config
    monkeypatch.setenv("AWS_UNSIGNED_PAYLOAD", "false")
    assert object_store(location, {"aws_region": "us-east-1"}).config.get("unsigned_payload") != "true"


def test_uploads_hold_no_more_encoded_bytes_than_their_budget() -> None:
    """Writers that encode faster than the store takes their files wait once the files waiting
    for upload reach the budget (a file larger than the budget goes alone); every file is put."""
    import threading

    from upsertlake.storage.object_files import Uploads

    done, lock, gate = [], threading.Lock(), threading.Event()

    def put(data: memoryview) -> None:
        gate.wait(5)  # the store is slow until the writers have queued what the budget allows
        with lock:
            done.append(data.nbytes)

    def submit(uploads: Uploads, size: int) -> None:
        uploads.submit(put, memoryview(bytes(size)))

    with Uploads(limit=4, budget=1000) as uploads:
        writers = [threading.Thread(target=submit, args=(uploads, 300)) for _ in range(10)]
        for w in writers:
            w.start()
        time.sleep(0.3)
        assert uploads._pending == 900  # three files wait; the other writers wait for room
        gate.set()
        for w in writers:
            w.join()
        submit(uploads, 5000)  # larger than the budget: alone
    assert sorted(done) == [300] * 10 + [5000]


def test_timeline_shows_what_is_known_of_completion_on_s3(s3_server, table_version, capsys) -> None:
    """Version 8 names a completed instant by its completion time: exact. Version 6 has none, and an
    object store keeps a file's time to the second: `timeline` showed it as a millisecond time,
    often before the instant's own time (a duration of -0.3 s). It shows that second (14 digits)
    and the duration's upper bound now, never a negative duration."""
    from upsertlake.timeline.instant_time import parse_instant_time

    from helpers import cli_in_process

    uri = f"s3://{s3_server.new_bucket()}/t"
    table = create_table(uri, "t", "uuid", "ts", storage_options=s3_server.options)
    for ts in range(3):
        table.upsert(batch(["k1", "k2"], ts, 1.0))
    store = [arg for k, v in s3_server.options.items() for arg in ("--storage-option", f"{k}={v}")]
    code, out, err = cli_in_process(capsys, "timeline", uri, "--json", *store)
    assert code == 0, err
    rows = json.loads(out)
    assert [(r["action"], r["state"]) for r in rows] == [("commit", "completed")] * 3
    for r in rows:
        if table_version == 8:
            assert len(r["completion"]) == 17 and r["completion"] > r["instant"]
            assert r["seconds"] == round((parse_instant_time(r["completion"]) - parse_instant_time(r["instant"]))
                                         .total_seconds(), 3) and r["seconds_at_most"] is None
        else:
            assert len(r["completion"]) == 14 and r["completion"] >= r["instant"][:14], r
            assert r["seconds"] is None and 0 < r["seconds_at_most"] <= 60, r
            whole = parse_instant_time(r["completion"] + "000")
            assert r["seconds_at_most"] == round((whole - parse_instant_time(r["instant"])).total_seconds() + 1, 3)
    code, out, _ = cli_in_process(capsys, "timeline", uri, *store)
    bounded = [bool(re.search(r" < [0-9.]+ (ms|s)$", line)) for line in out.splitlines()[1:4]]
    assert bounded == [table_version == 6] * 3, out
    assert ("a 14-digit completion names the second it fell in" in out) == (table_version == 6)


def test_timeline_of_a_table_with_archived_instants(tmp_path: Path, capsys) -> None:
    """`timeline` lists the active timeline (as Table.timeline() does): on version 6 it failed with
    a KeyError once instants were archived (it looked for their files' times)."""
    from helpers import cli_in_process

    keep = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3", "hoodie.cleaner.commits.retained": "1"}
    table = create_table(tmp_path / "t", "t", "uuid", "ts", options=keep)
    for ts in range(6):
        table.upsert(batch(["k1"], ts, 1.0))
    code, out, err = cli_in_process(capsys, "timeline", tmp_path / "t", "--json")
    assert code == 0, err
    listed = [(r["instant"], r["action"]) for r in json.loads(out)]
    assert listed == [(i.time, i.action.value) for i in table.timeline()]
    assert all(r["seconds"] >= 0 and len(r["completion"]) == 17 for r in json.loads(out))

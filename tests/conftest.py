"""Shared fixtures: Hudi-written tables unzipped per test, a run per table version, one Spark
session, and the loopback S3 and Azure servers of the test session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from helpers import SCRIPTS, tree_digest, unzip_hudi_table, unzip_mor_table  # noqa: F401 (tree_digest: older imports)


@pytest.fixture
def hudi_table(tmp_path: Path):
    """A function that unzips a reference table into this test's temporary folder."""
    return lambda name: unzip_hudi_table(name, tmp_path)


@pytest.fixture(params=[6, 8], ids=["v6", "v8"])
def table_version(request, monkeypatch) -> int:
    """Runs a test once per writable table version: tables it creates without naming
    hoodie.write.table.version get this version (the option's default is patched for the test)."""
    from dataclasses import replace

    from upsertlake.config import options as opt

    monkeypatch.setattr(opt, "WRITE_TABLE_VERSION", replace(opt.WRITE_TABLE_VERSION, default=request.param))
    return request.param


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole test run (start-up costs seconds)."""
    from pyspark.sql import SparkSession

    import upsertlake.spark

    os.environ["PYSPARK_PYTHON"] = sys.executable  # RDD jobs read this, not spark.pyspark.python
    session = (
        SparkSession.builder.master("local[2]")
        .appName("upsertlake-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", sys.executable)  # workers run the interpreter with our packages
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    upsertlake.spark.register(session)
    yield session
    session.stop()


class S3Server:
    """The loopback S3 server of this test session (tests/scripts/s3_server.py, its own process)."""

    def __init__(self, port: int) -> None:
        self.endpoint = f"http://127.0.0.1:{port}"
        self.env = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
        # storage_options in the keys delta-rs and obstore take
        self.options = {"aws_endpoint": self.endpoint, "aws_access_key_id": "testing",
                        "aws_secret_access_key": "testing", "aws_region": "us-east-1"}
        self._buckets = 0

    @property
    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="testing",
                            aws_secret_access_key="testing", region_name="us-east-1")

    def new_bucket(self) -> str:
        self._buckets += 1
        name = f"bucket-{os.getpid()}-{self._buckets}"
        self.client.create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> dict[str, str]:
        """Every object below prefix with its ETag: 'the table is exactly as it was'."""
        out: dict[str, str] = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            out.update({o["Key"]: o["ETag"] for o in page.get("Contents", [])})
        return out


@pytest.fixture(scope="session")
def s3_server():
    """One S3-compatible server (moto, writes serialised) on loopback for the whole run."""
    import subprocess

    proc = subprocess.Popen([sys.executable, str(SCRIPTS / "s3_server.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = int(proc.stdout.readline())
        yield S3Server(port)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def s3_table(s3_server: S3Server) -> str:
    """The URI of a table in a new bucket of the test server."""
    return f"s3://{s3_server.new_bucket()}/tables/t"


# Azurite, the Azure storage emulator, from the npm registry: `npx` installs it into ~/.npm on
# the first run (about 11 s here), then starts it from that cache (under 1 s). Pinned, so the cache
# is hit and the suite tests one known emulator.
AZURITE = "azurite@3.35.0"
AZURITE_START_SECONDS = 300


class AzuriteServer:
    """The loopback Azurite blob service of this test session, with its well-known account."""

    ACCOUNT = "devstoreaccount1"
    KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

    def __init__(self, port: int) -> None:
        self.port = port
        self.endpoint = f"http://127.0.0.1:{port}/{self.ACCOUNT}"
        # storage_options in the keys obstore (and delta-rs) take
        self.options = {"azure_storage_account_name": self.ACCOUNT, "azure_storage_account_key": self.KEY,
                        "azure_endpoint": self.endpoint, "allow_http": "true"}
        self._containers = 0

    def new_container(self) -> str:
        """Create a container (obstore has no call for it): a Put Container request, SharedKey-signed."""
        import base64
        import hashlib
        import hmac
        import urllib.request
        from email.utils import formatdate

        self._containers += 1
        name = f"container-{os.getpid()}-{self._containers}"
        headers = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": "2021-12-02"}
        signed = "PUT" + "\n" * 12 + "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
        signed += f"/{self.ACCOUNT}/{self.ACCOUNT}/{name}\nrestype:container"
        mac = hmac.new(base64.b64decode(self.KEY), signed.encode(), hashlib.sha256).digest()
        headers["Authorization"] = f"SharedKey {self.ACCOUNT}:{base64.b64encode(mac).decode()}"
        request = urllib.request.Request(f"{self.endpoint}/{name}?restype=container", method="PUT", headers=headers)
        with urllib.request.urlopen(request, timeout=30) as reply:
            assert reply.status == 201
        return name


@pytest.fixture(scope="session")
def azurite():
    """One Azurite blob service (in memory) on a free loopback port for the whole run; skipped,
    saying why, only where node's npx is missing."""
    import queue
    import re
    import shutil
    import signal
    import subprocess
    import threading

    npx = shutil.which("npx")
    if npx is None:
        pytest.skip("Azurite (the Azure storage emulator) needs node's npx, which is not on PATH")
    proc = subprocess.Popen(
        [npx, "--yes", "--package", AZURITE, "azurite-blob", "--inMemoryPersistence", "--blobHost", "127.0.0.1",
         "--blobPort", "0", "--disableTelemetry", "--silent"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
        start_new_session=True,  # npx runs a shell that runs node: stop the whole group at the end
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def drain() -> None:  # read every line, so a full pipe never blocks the emulator
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=drain, daemon=True).start()
    said: list[str] = []
    try:
        port = None
        while port is None:
            line = lines.get(timeout=AZURITE_START_SECONDS)
            if line is None:
                raise RuntimeError(f"Azurite did not start: {''.join(said)[-2000:]}")
            said.append(line)
            found = re.search(r"listens on http://127\.0\.0\.1:(\d+)", line)
            port = int(found.group(1)) if found else None
        yield AzuriteServer(port)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


@pytest.fixture
def az_table(azurite: AzuriteServer) -> str:
    """The URI of a table in a new container of the Azurite server."""
    return f"az://{azurite.new_container()}/tables/t"


class HudiReferences:
    """Apache Hudi's Spark datasource, one server per Hudi version, started on first use and
    stopped at the end of the session (see tests/hudi_reference)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.started: dict[str, object] = {}

    def for_version(self, hudi):
        from hudi_reference import HudiReference, ReferenceUnavailable

        if hudi.version not in self.started:
            workdir = self.workdir / f"hudi-{hudi.version}"
            workdir.mkdir(exist_ok=True)
            try:
                self.started[hudi.version] = HudiReference(hudi, workdir)
            except ReferenceUnavailable as error:  # fail with the reason; never skip
                pytest.fail(f"Apache Hudi {hudi.version} cannot run here: {error}", pytrace=False)
        return self.started[hudi.version]

    def for_table_version(self, table_version: int):
        """The Hudi release that is the reference for a table version (0.15 for 6, 1.1 for 8, 9)."""
        from hudi_reference import HUDI_0_15, HUDI_1_1

        return self.for_version(HUDI_0_15 if table_version in HUDI_0_15.table_versions else HUDI_1_1)

    def close(self) -> None:
        for version, reference in self.started.items():
            spent = ", ".join(f"{k} {v:.0f} s" for k, v in sorted(reference.seconds.items()))
            print(f"\nApache Hudi {version}: {spent}", file=sys.stderr)
            reference.close()


@pytest.fixture(scope="session")
def hudi_references(tmp_path_factory):
    references = HudiReferences(tmp_path_factory.mktemp("hudi-reference"))
    yield references
    references.close()

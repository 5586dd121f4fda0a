"""The tests' handle on Apache Hudi: a server process running Hudi's Spark datasource (server.py).

One server per Hudi version per test session (a JVM with Hudi takes seconds to start); batches go
to it as parquet files, its reads come back as parquet, and a request that fails raises
`HudiError` with Hudi's own message and the tail of the server's log.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from hudi_reference.environment import HudiVersion, bundle_jar, reference_python

SERVER = Path(__file__).with_name("server.py")


class HudiError(AssertionError):
    """Apache Hudi refused or failed a request."""


class HudiReference:
    """Apache Hudi `version`'s Spark datasource in a server process of its own."""

    def __init__(self, hudi: HudiVersion, workdir: Path) -> None:
        self.hudi = hudi
        self.workdir = workdir
        self.python = reference_python()
        self.jar = bundle_jar(hudi)
        self.log = workdir / "server.log"
        self._names = itertools.count()
        self.seconds: dict[str, float] = {}  # time spent per kind of request, for the suite's budget
        self._process, self._answers = self._start()
        self.versions = self._request({"cmd": "ping"}, timeout=300)

    def _argv(self) -> list[str]:
        local = self.workdir / "spark-local"
        local.mkdir(exist_ok=True)
        return [str(self.python), str(SERVER), "--jar", str(self.jar), "--local-dir", str(local)]

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_", "PYTHONPATH"))}
        env["PYSPARK_PYTHON"] = str(self.python)
        env["TZ"] = "UTC"
        return env

    def _start(self) -> tuple[subprocess.Popen[bytes], int]:
        read_end, write_end = os.pipe()
        with open(self.log, "ab") as log:
            process = subprocess.Popen(
                [*self._argv(), "--answers", str(write_end)],
                stdin=subprocess.PIPE, stdout=log, stderr=log, pass_fds=(write_end,), env=self._env(),
                start_new_session=True,
            )
        os.close(write_end)
        return process, read_end

    def _request(self, request: Mapping[str, object], timeout: float = 900) -> object:
        assert self._process.stdin is not None
        self._process.stdin.write((json.dumps(request) + "\n").encode())
        self._process.stdin.flush()
        started = time.monotonic()
        line = self._read_line(timeout, request)
        self.seconds[str(request["cmd"])] = self.seconds.get(str(request["cmd"]), 0.0) + time.monotonic() - started
        outcome = json.loads(line)
        if not outcome["ok"]:
            raise HudiError(f"Apache Hudi {self.hudi.version} failed {request['cmd']}: {outcome['error']}")
        return outcome["result"]

    def _read_line(self, timeout: float, request: Mapping[str, object]) -> str:
        chunks = b""
        deadline = time.monotonic() + timeout
        while not chunks.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._answers], [], [], max(left, 0))
            data = os.read(self._answers, 1 << 16) if ready else b""
            if not data:
                self.close()
                why = "timed out" if not ready else "died"
                raise HudiError(f"Apache Hudi {self.hudi.version}'s server {why} on {request}:\n{self.log_tail()}")
            chunks += data
        return chunks.decode()

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(text[-lines:])

    def close(self) -> None:
        if self._process.poll() is None:
            try:
                assert self._process.stdin is not None
                self._process.stdin.write(b'{"cmd": "exit"}\n')
                self._process.stdin.flush()
                self._process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                _kill_group(self._process)
        os.close(self._answers) if self._answers >= 0 else None
        self._answers = -1

    # -- requests ---------------------------------------------------------------------------------

    def _data_file(self, data: pa.Table) -> str:
        file = self.workdir / f"batch-{next(self._names)}.parquet"
        pq.write_table(data, file)
        return str(file)

    def write(self, path: str | Path, data: pa.Table, options: Mapping[str, str], mode: str = "append") -> None:
        """A write through Hudi's Spark datasource (`df.write.format("hudi")`)."""
        self._request(
            {"cmd": "write", "path": str(path), "data": self._data_file(data), "options": dict(options), "mode": mode}
        )

    def start_write(self, path: str | Path, data: pa.Table, options: Mapping[str, str]) -> str:
        """The same write started on a thread of the server; `wait(handle)` joins it."""
        request = {
            "cmd": "write",
            "path": str(path),
            "data": self._data_file(data),
            "options": dict(options),
            "async": True,
        }
        return str(self._request(request)["handle"])  # type: ignore[index]

    def wait(self, handle: str) -> None:
        self._request({"cmd": "wait", "handle": handle})

    def read(self, path: str | Path, options: Mapping[str, str] | None = None, where: str | None = None) -> pa.Table:
        """Rows of Hudi's Spark reader, with the options of a query type (snapshot by default);
        `where`: a Spark SQL condition the frame is filtered by (data skipping plans with it)."""
        out = self.workdir / f"read-{next(self._names)}.arrow"
        request = {"cmd": "read", "path": str(path), "options": dict(options or {}), "out": str(out)}
        if where:
            request["where"] = where
        self._request(request)
        with pa.memory_map(str(out)) as source:
            table = pa.ipc.open_file(source).read_all()
        out.unlink()
        return table

    def snapshot(self, path: str | Path) -> pa.Table:
        return self.read(path, {"hoodie.datasource.query.type": "snapshot"})

    def read_optimized(self, path: str | Path) -> pa.Table:
        return self.read(path, {"hoodie.datasource.query.type": "read_optimized"})

    def as_of(self, path: str | Path, instant: str) -> pa.Table:
        return self.read(path, {"as.of.instant": instant})

    def incremental(self, path: str | Path, begin: str, end: str | None = None) -> pa.Table:
        options = {"hoodie.datasource.query.type": "incremental", "hoodie.datasource.read.begin.instanttime": begin}
        if end is not None:
            options["hoodie.datasource.read.end.instanttime"] = end
        return self.read(path, options)

    def sql(self, statement: str) -> list[list[str | None]]:
        """One Spark SQL statement, e.g. `CALL run_clean(...)`: its rows as strings."""
        return self._request({"cmd": "sql", "statement": statement})  # type: ignore[return-value]

    def call(
        self, path: str | Path, procedure: str, conf: Mapping[str, str] | None = None, **args: object
    ) -> list[list[str | None]]:
        """A Hudi procedure (`CALL run_clean(table => ..., retain_commits => 2)`) on the table at
        `path`, with `conf` (hoodie.* settings its write client takes) in the session while it
        runs: its rows as strings."""
        request = {"cmd": "call", "path": str(path), "procedure": procedure, "args": args, "conf": dict(conf or {})}
        return self._request(request)  # type: ignore[return-value]

    def stream(self, source: Path, path: str | Path, checkpoint: Path, options: Mapping[str, str]) -> int:
        """Hudi's streaming sink over the parquet files in `source` (trigger availableNow): the
        number of micro-batches it ran."""
        files = sorted(source.glob("*.parquet"))
        request = {"cmd": "stream", "source": str(source), "schema_from": str(files[0]), "path": str(path),
                   "checkpoint": str(checkpoint), "options": dict(options)}
        return int(self._request(request)["batches"])  # type: ignore[index]

    def hfile(self, file: str | Path) -> list[tuple[bytes, bytes]]:
        """Every key and value of an HFile as Hudi's own HFile reader reads them."""
        entries = self._request({"cmd": "hfile", "file": str(file)})
        return [(bytes.fromhex(k), bytes.fromhex(v)) for k, v in entries]  # type: ignore[union-attr]

    def killed_write(
        self,
        path: str | Path,
        data: pa.Table,
        options: Mapping[str, str],
        until: Callable[[], bool],
        timeout: float = 300,
    ) -> bool:
        """Start the write in a process of its own and kill it (SIGKILL, JVM included) once
        `until()` holds: a writer whose driver died mid-write. Returns False when the write
        finished before `until()` held."""
        request = self.workdir / f"once-{next(self._names)}.json"
        request.write_text(
            json.dumps({"cmd": "write", "path": str(path), "data": self._data_file(data), "options": dict(options)})
        )
        with open(self.log, "ab") as log:
            process = subprocess.Popen([*self._argv(), "--once", str(request)], stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=log, env=self._env(), start_new_session=True)
        deadline = time.monotonic() + timeout
        try:
            while process.poll() is None:
                if until():
                    _kill_group(process)
                    return True
                if time.monotonic() > deadline:
                    raise HudiError(
                        f"the write to kill neither reached its point nor ended in {timeout} s:\n{self.log_tail()}"
                    )
                time.sleep(0.02)
            return False
        finally:
            _kill_group(process)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill a server and its JVM (PySpark starts the JVM as a child process)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()

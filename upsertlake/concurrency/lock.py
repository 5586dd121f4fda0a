"""The table lock: it serialises instant creation, rollbacks of failed writes and commits.

`hoodie.write.lock.provider` picks the implementation by Hudi's class name, or by the dotted path
of a user's own class (constructed with the table's Storage and Config, offering `try_lock` and
`unlock`):

- `FlockLockProvider` (our default): `fcntl.flock` on `.hoodie/.lock`; the kernel releases it when
  the holder dies, so a crashed writer never leaves a stale lock (docs/DESIGN.md §8). Local file systems.
- Hudi's `FileSystemBasedLockProvider`: atomic create of `<hoodie.write.lock.filesystem.path or
  .hoodie>/lock`, as Hudi does, so it also excludes Hudi's own writers using that provider. A lock
  older than `hoodie.write.lock.filesystem.expire` minutes, or held by a dead process on this host,
  is stale and is taken over.
- Hudi's `InProcessLockProvider`: one lock per table path inside this process (threads only).
"""

from __future__ import annotations

import fcntl
import importlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, Protocol, cast

from upsertlake.concurrency.storage_lock import StorageLockProvider
from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.errors import ConfigError, LockTimeoutError
from upsertlake.storage import Storage

HUDI_PACKAGE = "org.apache.hudi.client.transaction.lock."
FLOCK_PROVIDER = "upsertlake.concurrency.lock.FlockLockProvider"
FILE_SYSTEM_PROVIDER = HUDI_PACKAGE + "FileSystemBasedLockProvider"
IN_PROCESS_PROVIDER = HUDI_PACKAGE + "InProcessLockProvider"
STORAGE_PROVIDER = HUDI_PACKAGE + "StorageBasedLockProvider"
FLOCK_FILE = ".hoodie/.lock"
POLL_SECONDS = 0.005


class LockProvider(Protocol):
    """What a lock provider offers; bring your own by naming its class in the option."""

    def try_lock(self, timeout_ms: int) -> bool:
        """Acquire within `timeout_ms`; False when it could not."""

    def unlock(self) -> None: ...

    def describe_holder(self) -> str:
        """Who holds the lock now, for the timeout error ('' if unknown)."""


class TableLock:
    """A provider with the wait time of the table's config and a clear timeout error."""

    def __init__(self, provider: LockProvider, wait_ms: int) -> None:
        self.provider = provider
        self.wait_ms = wait_ms

    @contextmanager
    def hold(self) -> Iterator[None]:
        if not self.provider.try_lock(self.wait_ms):
            holder = self.provider.describe_holder()
            raise LockTimeoutError(
                f"could not acquire the table lock ({type(self.provider).__name__}) within {self.wait_ms} ms "
                f"(hoodie.write.lock.wait_time_ms){'; held by ' + holder if holder else ''}"
            )
        try:
            yield
        finally:
            self.provider.unlock()

    def fence(self) -> None:
        """Called under the lock right before a commit's write: a lease-based lock checks that it
        is still held (LockLostError otherwise); locks that cannot be lost need nothing."""
        fence = getattr(self.provider, "fence", None)
        if fence is not None:
            fence()


def make_lock(storage: Storage, cfg: Config) -> TableLock:
    """The table lock named by `hoodie.write.lock.provider`."""
    name = cfg.get(opt.LOCK_PROVIDER)
    builtin = {
        FLOCK_PROVIDER: FlockLockProvider,
        FILE_SYSTEM_PROVIDER: FileSystemLockProvider,
        IN_PROCESS_PROVIDER: InProcessLockProvider,
        STORAGE_PROVIDER: StorageLockProvider,
    }
    if storage.os_path(FLOCK_FILE) is None and not cfg.is_set(opt.LOCK_PROVIDER):
        name = STORAGE_PROVIDER  # flock needs a file the OS opens: on an object store, Hudi's storage lock
    cls = builtin.get(name) or _import_class(name)
    return TableLock(cls(storage, cfg), cfg.get(opt.LOCK_WAIT_TIME_MS))


def _import_class(name: str) -> type:
    module, _, attr = name.rpartition(".")
    try:
        return cast(type, getattr(importlib.import_module(module), attr))
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(
            f"hoodie.write.lock.provider: cannot load lock provider class {name!r} ({exc}); use "
            f"{FLOCK_PROVIDER}, {FILE_SYSTEM_PROVIDER}, {IN_PROCESS_PROVIDER}, {STORAGE_PROVIDER} or an "
            "importable class"
        ) from exc


def _poll(attempt: Callable[[], bool], timeout_ms: int) -> bool:
    """Call `attempt()` until it returns True or the time is up."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        if attempt():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)


class FlockLockProvider:
    """An exclusive `flock` on `.hoodie/.lock`, released by the kernel if the holder dies."""

    def __init__(self, storage: Storage, cfg: Config | None = None) -> None:
        self.path = storage.full_path(FLOCK_FILE)
        self._held = threading.local()  # one client may be shared by threads: each holds its own

    def try_lock(self, timeout_ms: int) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

        def attempt() -> bool:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                return False

        if _poll(attempt, timeout_ms):
            self._held.fd = fd
            return True
        os.close(fd)
        return False

    def unlock(self) -> None:
        fd = getattr(self._held, "fd", None)
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the flock
            self._held.fd = None

    def describe_holder(self) -> str:
        return ""


class FileSystemLockProvider:
    """Hudi's file-system lock: whoever creates the lock file holds the lock.

    The file holds JSON naming its owner (host, pid, creation time in ms). Taking over a stale
    lock renames it aside first and checks that what was moved is the lock judged stale, so two
    writers that both see it stale cannot both end up holding the lock.
    """

    def __init__(self, storage: Storage, cfg: Config) -> None:
        folder = cfg.get(opt.LOCK_FILESYSTEM_PATH) or storage.full_path(".hoodie")
        os.makedirs(folder, exist_ok=True)
        self.path = os.path.join(folder, "lock")
        self.expire_ms = cfg.get(opt.LOCK_EXPIRE_MINUTES) * 60_000
        self._held = threading.local()

    def try_lock(self, timeout_ms: int) -> bool:
        token = uuid.uuid4().hex
        return _poll(lambda: self._create(token) or self._take_over_stale(), timeout_ms)

    def _create(self, token: str) -> bool:
        info = {"host": socket.gethostname(), "pid": os.getpid(), "created_ms": int(time.time() * 1000), "token": token}
        tmp = f"{self.path}.{token}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(info, f)
        try:
            os.link(tmp, self.path)
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        self._held.token = token
        return True

    def _take_over_stale(self) -> bool:
        """Move a stale lock aside; returns False (so the caller retries the create)."""
        owner = self._owner()
        if owner is None or not self._is_stale(owner):
            return False
        aside = f"{self.path}.stale.{uuid.uuid4().hex}"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False
        moved = _read_json(aside)
        if moved is not None and moved.get("token") != owner.get("token"):
            # Someone took the stale lock over and locked it again meanwhile: give theirs back.
            with suppress(FileExistsError):
                os.link(aside, self.path)
        os.unlink(aside)
        return False

    def _is_stale(self, owner: dict[str, Any]) -> bool:
        age_ms = time.time() * 1000 - owner.get("created_ms", 0)
        if self.expire_ms > 0 and age_ms > self.expire_ms:
            return True
        return owner.get("host") == socket.gethostname() and not _alive(owner.get("pid", -1))

    def _owner(self) -> dict[str, Any] | None:
        return _read_json(self.path)

    def unlock(self) -> None:
        token = getattr(self._held, "token", None)
        owner = self._owner()
        if token is not None and owner is not None and owner.get("token") == token:
            os.unlink(self.path)
        self._held.token = None

    def describe_holder(self) -> str:
        owner = self._owner()
        if owner is None:
            return ""
        age = (time.time() * 1000 - owner.get("created_ms", 0)) / 1000
        return f"pid {owner.get('pid')} on {owner.get('host')} for {age:.1f} s ({self.path})"


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_IN_PROCESS: dict[str, threading.Lock] = {}
_IN_PROCESS_GUARD = threading.Lock()


class InProcessLockProvider:
    """One lock per table path shared by the threads of this process (Hudi's in-process lock)."""

    def __init__(self, storage: Storage, cfg: Config | None = None) -> None:
        with _IN_PROCESS_GUARD:
            self._lock = _IN_PROCESS.setdefault(storage.base, threading.Lock())

    def try_lock(self, timeout_ms: int) -> bool:
        return self._lock.acquire(timeout=timeout_ms / 1000)

    def unlock(self) -> None:
        self._lock.release()

    def describe_holder(self) -> str:
        return "another thread of this process"

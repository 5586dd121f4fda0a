"""The table lock that serialises instant creation and commits across threads and processes.

The default holds `fcntl.flock` on `.hoodie/.lock`: the kernel releases it when the holder dies,
so a crashed writer can never leave a stale lock behind (DESIGN.md §7).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

from upsertlake.errors import LockTimeoutError
from upsertlake.storage import Storage

LOCK_FILE = ".hoodie/.lock"


class LockProvider(Protocol):
    """What a lock must offer: a context manager that holds the table lock for its body."""

    def hold(self) -> AbstractContextManager[None]: ...


class FileLock:
    """An exclusive `flock` on the table's lock file, waited for up to `timeout_ms`."""

    def __init__(self, storage: Storage, timeout_ms: int = 60000, poll_ms: int = 5) -> None:
        self.path = storage.full_path(LOCK_FILE)
        self.timeout_ms = timeout_ms
        self.poll_ms = poll_ms

    @contextmanager
    def hold(self) -> Iterator[None]:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + self.timeout_ms / 1000
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LockTimeoutError(
                            f"could not lock {self.path} within {self.timeout_ms} ms "
                            "(hoodie.write.lock.wait_time_ms)"
                        ) from None
                    time.sleep(self.poll_ms / 1000)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

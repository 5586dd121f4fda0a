"""Apache Hudi 1.1's storage-based lock: a lease object on the table's own store.

`flock` means nothing on S3, so writers on an object store exclude each other through one object,
`.hoodie/.locks/table_lock.json`, holding `{"expired": bool, "validUntil": epoch ms, "owner":
uuid}` exactly as Hudi's `StorageBasedLockProvider` writes it, so Hudi's writers and ours exclude
each other. Acquire: create it if absent (`If-None-Match: *`), or take over a lease that is expired
or past `validUntil` plus Hudi's 500 ms clock-drift margin by an ETag-matched replace; a 412 means
another writer won. A thread renews the lease every `heartbeat.poll.secs`, each renewal
ETag-matched; release writes `expired: true`.

What Hudi lacks, fencing: `fence()` renews the lease just before a commit's PUT and refuses when
the lease is gone or has too little validity left, so a holder that was paused past its lease
(a long GC, SIGSTOP) never commits over the writer that took the lock meanwhile.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from typing import Any

from upsertlake.config import Config
from upsertlake.config import options as opt
from upsertlake.errors import ConfigError, LockLostError
from upsertlake.storage import Storage

log = logging.getLogger(__name__)

LOCK_FILE = ".hoodie/.locks/table_lock.json"
CLOCK_DRIFT_MS = 500
RETRY_WAIT_SECONDS = 0.1


def _now_ms() -> int:
    return int(time.time() * 1000)


class StorageLockProvider:
    """Hudi's storage-based lock (`org.apache.hudi.client.transaction.lock.StorageBasedLockProvider`)."""

    def __init__(self, storage: Storage, cfg: Config) -> None:
        if not storage.conditional_writes:
            raise ConfigError(
                f"StorageBasedLockProvider needs a store with conditional writes (S3, GCS, Azure); "
                f"{storage.base} is a local folder: use the default flock lock there"
            )
        self.storage = storage
        self.validity_ms = cfg.get(opt.LOCK_STORAGE_VALIDITY_SECS) * 1000
        self.poll_s = cfg.get(opt.LOCK_STORAGE_HEARTBEAT_POLL_SECS)
        if self.validity_ms < 10_000 or self.poll_s < 1 or self.validity_ms < 10_000 * self.poll_s:
            raise ConfigError(
                f"{opt.LOCK_STORAGE_VALIDITY_SECS.key}={self.validity_ms // 1000} and "
                f"{opt.LOCK_STORAGE_HEARTBEAT_POLL_SECS.key}={self.poll_s}: the validity must be at "
                "least 10 s and at least 10 times the heartbeat interval (at least 1 s), as in Hudi"
            )
        self.owner = str(uuid.uuid4())
        self._local = threading.Lock()  # threads of this process take turns before the store
        self._state = threading.Lock()  # guards the lease fields below
        self._etag: str | None = None
        self._valid_until = 0
        self._lost = False
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    # -- the protocol TableLock uses ---------------------------------------------------------
    def try_lock(self, timeout_ms: int) -> bool:
        deadline = time.monotonic() + timeout_ms / 1000
        if not self._local.acquire(timeout=max(0.0, timeout_ms / 1000)):
            return False
        while True:
            if self._try_once():
                self._start_renewing()
                return True
            if time.monotonic() >= deadline:
                self._local.release()
                return False
            time.sleep(RETRY_WAIT_SECONDS)

    def unlock(self) -> None:
        self._stop_renewing()
        with self._state:
            if self._etag is not None and not self._lost:
                body = _lease(True, self._valid_until, self.owner)
                if self.storage.put_if(LOCK_FILE, body, self._etag) is None:
                    log.warning("lock %s: the lease was taken over before it was released", self.owner)
            self._etag, self._lost = None, False
        self._local.release()

    def describe_holder(self) -> str:
        current = self._read()
        if current is None:
            return ""
        lease, _ = current
        left = (lease.get("validUntil", 0) - _now_ms()) / 1000
        return f"owner {lease.get('owner')} ({self.storage.full_path(LOCK_FILE)}, valid for {left:.1f} s more)"

    def fence(self) -> None:
        """Renew the lease now; raise LockLostError unless it is ours with half its validity left,
        so the PUT that follows lands while no other writer can hold the lock."""
        with self._state:
            if not self._lost and self._etag is not None:
                try:
                    self._renew_locked()
                except Exception as exc:  # unknown outcome: the validity left decides
                    log.warning("lock %s: renewal before commit failed: %s", self.owner, exc)
            left = self._valid_until - _now_ms()
            if self._lost or self._etag is None or left < self.validity_ms / 2:
                raise LockLostError(
                    f"the table lock {self.storage.full_path(LOCK_FILE)} is no longer held by this "
                    f"writer (owner {self.owner}): another writer may have taken it over; nothing was "
                    "committed"
                )

    # -- the lease ---------------------------------------------------------------------------
    def _read(self) -> tuple[dict[str, Any], str] | None:
        got = self.storage.read_versioned(LOCK_FILE)
        if got is None:
            return None
        data, etag = got
        try:
            lease = json.loads(data)
        except ValueError:
            lease = {"expired": True}  # a damaged lease holds nobody back; replaced by ETag
        return (lease if isinstance(lease, dict) else {"expired": True}), etag

    def _try_once(self) -> bool:
        current = self._read()
        if current is not None:
            lease, _ = current
            alive = not lease.get("expired", False) and _now_ms() <= int(lease.get("validUntil", 0)) + CLOCK_DRIFT_MS
            if alive and lease.get("owner") != self.owner:
                return False
        valid_until = _now_ms() + self.validity_ms
        new_etag = self.storage.put_if(LOCK_FILE, _lease(False, valid_until, self.owner),
                                       None if current is None else current[1])
        if new_etag is None:
            return False
        with self._state:
            self._etag, self._valid_until, self._lost = new_etag, valid_until, False
        return True

    def _renew_locked(self) -> None:
        valid_until = _now_ms() + self.validity_ms
        new_etag = self.storage.put_if(LOCK_FILE, _lease(False, valid_until, self.owner), self._etag)
        if new_etag is None:
            self._lost = True
            log.error("lock %s: the lease was taken over by another writer", self.owner)
        else:
            self._etag, self._valid_until = new_etag, valid_until

    def _start_renewing(self) -> None:
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew_loop, args=(self._stop,), daemon=True,
                                         name=f"lock-lease-{self.owner[:8]}")
        self._renewer.start()

    def _renew_loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.poll_s):
            with self._state:
                if self._lost or self._etag is None:
                    return
                try:
                    self._renew_locked()
                except Exception as exc:  # a missed renewal is retried; fence() judges validity
                    log.warning("lock %s: renewal failed: %s", self.owner, exc)

    def _stop_renewing(self) -> None:
        self._stop.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join()
        self._renewer = None


def _lease(expired: bool, valid_until: int, owner: str) -> bytes:
    return json.dumps({"expired": expired, "validUntil": valid_until, "owner": owner}).encode()

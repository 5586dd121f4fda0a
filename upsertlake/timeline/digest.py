"""The commit digest: the documents of the active timeline's completed writes and cleans, in one
object.

A fresh process on an object store reads every completed commit's document (the missing-file check
of the file system view and the damaged-table check of a writer need each one's write stats) and
every clean's (the cleaner's retained window): one GET per instant, so its requests would grow with
the timeline. The digest is one GET instead. It is a cache, never the truth: a document in it is
used only when the timeline's listing shows that instant's file with the same ETag (the store's
version of exactly those bytes), so a rolled-back, restored, archived or rewritten instant is read
from its own file, or not at all. Writers refresh it after a commit once `REFRESH` documents are
outside it; Hudi ignores `.hoodie/.aux/`, and a digest that is lost or damaged costs only the
requests it saves.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Mapping

from upsertlake.errors import StorageError
from upsertlake.storage import Storage

DIGEST = ".hoodie/.aux/upsertlake/commit_digest.json.gz"
FORMAT = "upsertlake-commit-digest/1"
REFRESH = 8  # documents outside the digest before a writer replaces it

_COVERED = "commit digest"  # the storage's cache of the (path, version) pairs the last digest seen holds


def _remember(storage: Storage, covered: frozenset[tuple[str, str]]) -> None:
    storage.cache(_COVERED, 1).put(DIGEST, covered)


def read(storage: Storage, wanted: Mapping[str, str]) -> dict[str, bytes]:
    """The documents of `wanted` (path → version from the listing) that the digest holds at that
    version. A missing or unreadable digest holds none."""
    try:
        raw = storage.read_bytes(DIGEST)
        doc = json.loads(gzip.decompress(raw))
        entries = doc["documents"] if doc.get("format") == FORMAT else []
        held = {(e["path"], e["version"]): e["data"] for e in entries}
    except (FileNotFoundError, StorageError, OSError, EOFError, ValueError, KeyError, TypeError):
        return {}
    _remember(storage, frozenset(held))
    out = {}
    for path, version in wanted.items():
        data = held.get((path, version))
        if data is not None:
            out[path] = base64.b64decode(data)
    return out


def outside(storage: Storage, listed: Mapping[str, str]) -> int:
    """How many of `listed` (path → version) the last digest this storage read or wrote lacks."""
    covered = storage.cache(_COVERED, 1).get(DIGEST) or frozenset()
    return sum((path, version) not in covered for path, version in listed.items())


def write(storage: Storage, documents: Mapping[str, tuple[str, bytes]]) -> None:
    """Replace the digest with `documents` (path → (version, bytes)). Concurrent writers may
    replace each other's digest: each one's entries are checked against the listing when read."""
    entries = [{"path": p, "version": v, "data": base64.b64encode(d).decode("ascii")}
               for p, (v, d) in sorted(documents.items())]
    payload = gzip.compress(json.dumps({"format": FORMAT, "documents": entries}).encode("utf-8"), 6)
    try:
        storage.write_bytes(DIGEST, payload)
    except StorageError:
        return  # a cache: the next writer tries again
    _remember(storage, frozenset((p, v) for p, (v, _) in documents.items()))

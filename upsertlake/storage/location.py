"""Where a table lives: a local folder or an object-store URI, parsed once and refused early.

A path with no scheme (or `file://`, or Hadoop's `file:/`) is a local folder. `s3://` and `s3a://`
(as Hudi users write it), `gs://`, and `abfs://`, `abfss://`, `az://` are object stores. Any other
scheme is refused by name before anything is created: a URI taken for a folder name would write
`./hdfs:/...` locally. So is a path whose first segment looks like a scheme without its `//`
(`s3:/lake/t`): a URI with a slash missing, far more often than a folder named `s3:`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from upsertlake.errors import UnsupportedSchemeError

# scheme -> the kind of store behind it
STORE_KINDS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "abfs": "azure", "abfss": "azure", "az": "azure"}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# `scheme:` without `//`; two characters at least, so that a Windows drive (`C:`) is no scheme
_SCHEME_LIKE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")


@dataclass(frozen=True)
class Location:
    """A table's base: `uri` as callers see it (an absolute local path, or the URI without a
    trailing slash), the store `kind` ('local', 's3', 'gcs', 'azure') and, for object stores, the
    bucket (or container) and the key prefix of the table inside it."""

    uri: str
    kind: str
    scheme: str = ""
    bucket: str = ""
    prefix: str = ""

    @property
    def is_local(self) -> bool:
        return self.kind == "local"

    @property
    def root(self) -> str:
        """What no file can be named by: an object store's `scheme://bucket` (empty locally)."""
        return f"{self.scheme}://{self.bucket}" if self.bucket else ""

    def child(self, rel: str) -> str:
        """The absolute path or URI of a table-relative path."""
        return f"{self.uri}/{rel}" if rel else self.uri


def parse_location(base: str | os.PathLike[str]) -> Location:
    """Parse a table path or URI; raises UnsupportedSchemeError for schemes we cannot store on."""
    text = os.fspath(base)
    match = _SCHEME.match(text)
    if match is None and (like := _SCHEME_LIKE.match(text)) is not None:
        scheme, rest = like.group(1), text[like.end():]
        if scheme.lower() == "file" and rest.startswith("/"):
            return Location(str(Path(rest).resolve()), "local")  # Hadoop's file:/path
        raise UnsupportedSchemeError(
            f"{text!r} starts with {scheme + ':'!r} but not {scheme + '://'!r}: a URI needs two slashes "
            f"({scheme}://{rest.lstrip('/')}); a local folder named {scheme + ':'!r} is refused as a mistyped "
            f"URI (write ./{text} for one); nothing was created or read"
        )
    if match is None or match.group(1).lower() == "file":
        local = text[len("file://"):] if match else text
        return Location(str(Path(local).resolve()), "local")
    scheme = match.group(1).lower()
    kind = STORE_KINDS.get(scheme)
    if kind is None:
        supported = ", ".join(f"{s}://" for s in ["file", *STORE_KINDS])
        raise UnsupportedSchemeError(
            f"unsupported URI scheme '{scheme}://' in {text!r}: upsertlake stores tables on local "
            f"paths and {supported}; nothing was created or read"
        )
    rest = text[match.end():].rstrip("/")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise UnsupportedSchemeError(f"{text!r} names no bucket (expected {scheme}://BUCKET/PATH)")
    return Location(f"{scheme}://{rest}", kind, scheme, bucket, prefix.strip("/"))

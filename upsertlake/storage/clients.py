"""The obstore client of a location (Rust's `object_store`: S3, GCS, Azure), for every request:
objects, listings, conditional writes and parquet's ranged reads and multipart writes alike.

Clients are built lazily, once per process (obstore hangs in a process forked after it was used),
and read the environment at first use: the cloud's standard variables (`AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AWS_REGION`, `GOOGLE_APPLICATION_CREDENTIALS`, `AZURE_STORAGE_ACCOUNT_NAME`,
...) with a `storage_options` mapping on top, in the keys delta-rs and obstore take
(`aws_endpoint`/`AWS_ENDPOINT_URL`, `aws_access_key_id`, `aws_region`, `allow_http`, ...).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from obstore.store import from_url

from upsertlake.errors import ConfigError
from upsertlake.storage.location import Location

# Keys of a storage_options mapping that are client options (not store config) in obstore.
_CLIENT_KEYS = {"allow_http", "allow_invalid_certificates", "timeout", "connect_timeout", "proxy_url"}
_ENDPOINT_KEYS = ("aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint")
_UNSIGNED_KEYS = {"aws_unsigned_payload", "unsigned_payload"}


def normalized(options: Mapping[str, object] | None) -> dict[str, str]:
    """Lower-case keys (delta-rs takes `AWS_REGION` and `aws_region` alike); values must be strings,
    as delta-rs and obstore take them: `{"aws_region": 5}` is refused by name, not sent as "5"."""
    if options is not None and not isinstance(options, Mapping):
        raise ConfigError(f"storage_options must be a mapping of strings to strings, got {type(options).__name__}")
    wrong = {k: v for k, v in (options or {}).items() if not isinstance(k, str) or not isinstance(v, str)}
    if wrong:
        named = ", ".join(f"{k!r}: {v!r} ({type(v).__name__})" for k, v in wrong.items())
        raise ConfigError(
            f"storage_options take strings, as delta-rs and obstore do; not {named}: write the value as a "
            "string (\"true\", \"30s\", \"us-east-1\")"
        )
    return {k.lower(): str(v) for k, v in (options or {}).items()}


def _endpoint(options: dict[str, str]) -> str | None:
    for key in _ENDPOINT_KEYS:
        if options.get(key):
            return options[key]
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")


def object_store(location: Location, options: dict[str, str]) -> Any:
    """The obstore store rooted at the table's base."""
    config: dict[str, str] = {}
    client: dict[str, object] = {}
    for key, value in options.items():
        name = key.removeprefix("aws_").removeprefix("google_").removeprefix("azure_")
        if name in _CLIENT_KEYS:
            client[name] = value.lower() in ("1", "true", "yes") if name.startswith("allow") else value
        elif key not in _ENDPOINT_KEYS:
            config[key] = value
    if location.kind == "s3":
        endpoint = _endpoint(options)
        if endpoint:
            config["aws_endpoint"] = endpoint
            if endpoint.startswith("http://"):
                client.setdefault("allow_http", True)
        elif not _UNSIGNED_KEYS & options.keys() and "AWS_UNSIGNED_PAYLOAD" not in os.environ:
            # On AWS itself (always HTTPS) TLS guards each body, so it is not hashed for the
            # signature, as AWS's SDKs do over HTTPS: no SHA-256 pass over every uploaded byte.
            config["aws_unsigned_payload"] = "true"
        url = f"s3://{location.bucket}/{location.prefix}"
    else:
        url = location.uri
    try:
        # obstore types `config` per store (a TypedDict of its keys); these are the user's keys for the
        # store the URL names, which obstore checks itself when it builds the client.
        return from_url(url, config=config or None, client_options=client or None)  # type: ignore[arg-type]
    except Exception as exc:  # obstore raises its own errors (and panics) for unknown keys
        raise ConfigError(f"cannot open {location.uri}: {exc}") from exc

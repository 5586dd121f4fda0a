"""`gs://` tables: there is no GCS emulator installable from a package registry here, so this checks
only what needs no server: the URI parses into bucket and prefix, a client is built for it (lazily,
with no request made), and bad credentials are a named error when it is built."""

from __future__ import annotations

import pytest

from upsertlake.errors import ConfigError
from upsertlake.storage import Storage, parse_location


def test_a_gs_uri_parses_and_builds_a_client_without_network(monkeypatch) -> None:
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    location = parse_location("gs://lake-bucket/warehouse/trips/")
    assert (location.uri, location.kind, location.bucket, location.prefix) == (
        "gs://lake-bucket/warehouse/trips", "gcs", "lake-bucket", "warehouse/trips")
    storage = Storage("gs://lake-bucket/warehouse/trips", {})
    assert repr(storage._store._client) == 'GCSStore(bucket="lake-bucket", prefix="warehouse/trips")'
    assert storage.full_path(".hoodie/hoodie.properties") == "gs://lake-bucket/warehouse/trips/.hoodie/hoodie.properties"


def test_a_malformed_service_account_key_is_a_named_error() -> None:
    storage = Storage("gs://lake-bucket/t", {"google_service_account_key": "{}"})
    with pytest.raises(ConfigError, match=r"cannot open gs://lake-bucket/t: .*private_key"):
        _ = storage._store  # the store is built on first use

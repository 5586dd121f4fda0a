"""Which keys are Apache Hudi's: every key Hudi declares (`hudi_keys.txt`) and the open-ended key
families under the dynamic prefixes, with the warning for a Hudi key upsertlake does not implement
and the "did you mean" error for a key that is no Hudi key.

Keys are validated when a `Config` is resolved (`upsertlake.config.resolved`), because a misspelt
Hudi key silently falls back to its default in Hudi itself, which is how file sizes or indexes end
up wrong in production. Its own room: it reads a package data file of over a thousand keys, which
neither the declarations nor the resolution need to know about.
"""

from __future__ import annotations

import difflib
import threading
import warnings
from functools import lru_cache
from importlib import resources

from upsertlake.config.options import OPTIONS
from upsertlake.errors import ConfigError

# Keys under these prefixes are accepted as genuine Hudi keys even when not in hudi_keys.txt,
# because Hudi reads open-ended key families there rather than declaring every key:
# - hoodie.deltastreamer. / hoodie.streamer.: Hudi Streamer sources, transformers and schema
#   providers (including user-written ones) read their own keys, and jdbc.extra.options.* passes
#   arbitrary JDBC options through;
# - hoodie.datasource.hive_sync. / hoodie.datasource.meta.sync. / hoodie.meta.sync.: each catalog
#   sync tool (Hive, Glue, BigQuery, DataHub, ADB) adds keys of its own and passes some through;
# - hoodie.metrics.: every metrics reporter (including custom reporter classes) reads keys under it.
DYNAMIC_PREFIXES: tuple[str, ...] = (
    "hoodie.deltastreamer.",
    "hoodie.streamer.",
    "hoodie.datasource.hive_sync.",
    "hoodie.datasource.meta.sync.",
    "hoodie.meta.sync.",
    "hoodie.metrics.",
)


@lru_cache(maxsize=1)
def hudi_keys() -> frozenset[str]:
    """Every config key Apache Hudi declares (package data file `hudi_keys.txt`)."""
    text = resources.files("upsertlake.config").joinpath("hudi_keys.txt").read_text("utf-8")
    return frozenset(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )


def is_hudi_key(key: str) -> bool:
    """Whether `key` is a genuine Apache Hudi config key (declared, or under a dynamic prefix)."""
    return key in hudi_keys() or key.startswith(DYNAMIC_PREFIXES)


_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def warn_unimplemented(key: str) -> None:
    with _WARNED_LOCK:
        if key in _WARNED:
            return
        _WARNED.add(key)
    warnings.warn(
        f"{key} is an Apache Hudi option that upsertlake does not implement; it is kept but has "
        "no effect on the write",
        UserWarning,
        stacklevel=3,
    )


@lru_cache(maxsize=1)
def _suggestion_pool() -> tuple[str, ...]:
    # Registry keys first so that a near-tie is resolved towards an option we actually implement.
    return tuple(OPTIONS) + tuple(sorted(hudi_keys() - set(OPTIONS)))


def unknown_key_error(key: str) -> ConfigError:
    matches = difflib.get_close_matches(key, _suggestion_pool(), n=1, cutoff=0.75)
    hint = f"; did you mean {matches[0]!r}?" if matches else ""
    if not key.startswith("hoodie."):
        return ConfigError(
            f"unknown option {key!r}: upsertlake only accepts Apache Hudi option keys, which start "
            f"with 'hoodie.'{hint}"
        )
    return ConfigError(f"unknown option {key!r}: not an Apache Hudi config key{hint}")

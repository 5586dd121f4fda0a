"""`Config`: the write options resolved from their layers (table properties < object-level options
< per-call options), immutable, each value typed by its `Option`.

Resolution validates every key given: a key of the registry (`upsertlake.config.options`, or one
of its aliases) is parsed and a bad value raises `ConfigError`; a genuine Hudi key upsertlake does
not implement is kept and warned about once per process, so jobs written for Hudi keep working;
any other key raises `ConfigError` with a "did you mean" suggestion (`upsertlake.config.known_keys`).
Its own room, apart from the declarations it resolves.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, cast

from upsertlake.config.enums import IndexType
from upsertlake.config.known_keys import is_hudi_key, unknown_key_error, warn_unimplemented
from upsertlake.config.option import Option, T
from upsertlake.config.options import INDEX_TYPE, OPTIONS
from upsertlake.errors import ConfigError


def _stringify(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Config:
    """Immutable resolved options: table properties < object-level options < per-call options.

    Holds the explicitly set keys only; `get` falls back to the option's default, so a default
    changed in the registry (`upsertlake.config.options`) applies to existing tables and objects alike.
    """

    __slots__ = ("_raw", "_typed")

    def __init__(self, raw: Mapping[str, str], typed: Mapping[str, object]) -> None:
        """Internal: use `Config.resolve`, which validates the keys and values."""
        self._raw: Mapping[str, str] = MappingProxyType(dict(raw))
        self._typed: Mapping[str, object] = MappingProxyType(dict(typed))

    @classmethod
    def resolve(
        cls,
        *layers: Mapping[str, object] | None,
        table_properties: Mapping[str, str] | None = None,
    ) -> Config:
        """Validate and merge option layers, each overriding the ones before it.

        `table_properties` (hoodie.properties) is the lowest layer and is accepted as is: the table
        was written by Hudi or by us, so its keys are not the user's to fix.
        """
        raw: dict[str, str] = {}
        typed: dict[str, object] = {}
        for key, value in (table_properties or {}).items():
            option = OPTIONS.get(key)
            if option is None:
                raw[key] = _stringify(value)
            elif key == option.key or option.key not in (table_properties or {}):
                # Parsed lazily by `get`: a bad table value only fails if it is used.
                raw[option.key] = _stringify(value)
        cfg = cls(raw, typed)
        for layer in layers:
            cfg = cfg.with_overrides(layer)
        return cfg

    def with_overrides(self, layer: Mapping[str, object] | None) -> Config:
        """A new Config with `layer` validated and applied on top of this one."""
        if not layer:
            return self
        raw = dict(self._raw)
        typed = dict(self._typed)
        seen: dict[str, tuple[str, object]] = {}  # canonical key -> (key as given, parsed value)
        for key, value in layer.items():
            if not isinstance(key, str):
                raise ConfigError(f"option keys must be strings, got {key!r}")
            if value is None:
                continue  # None means "not set", so callers can pass optional arguments through
            option = OPTIONS.get(key)
            if option is not None:
                parsed = option.parse(value)
                if option.key in seen and seen[option.key][1] != parsed:
                    other = seen[option.key][0]
                    raise ConfigError(
                        f"conflicting values for {option.key}: {other}={seen[option.key][1]!r} "
                        f"and {key}={parsed!r}"
                    )
                seen[option.key] = (key, parsed)
                typed[option.key] = parsed
                raw[option.key] = option.to_string(parsed)
            elif key.startswith("hoodie.") and is_hudi_key(key):
                warn_unimplemented(key)
                raw[key] = _stringify(value)
            else:
                raise unknown_key_error(key)
        return Config(raw, typed)

    def get(self, option: Option[T]) -> T:
        """The typed value of `option`: the highest layer that sets it, else its default."""
        if option.key in self._typed:
            return cast(T, self._typed[option.key])
        if option.key in self._raw:
            return option.parse(self._raw[option.key])
        return option.default

    @property
    def bucket_index(self) -> bool:
        """Whether writes go by Hudi's bucket index (hoodie.index.type=BUCKET), which the
        partitioners, clustering and the Spark path each treat apart."""
        return self.get(INDEX_TYPE) is IndexType.BUCKET

    @property
    def global_index(self) -> bool:
        """Whether the index tags by key across partitions (a GLOBAL_ index type): records are
        deduplicated by key alone, and a key keeps one copy in the whole table."""
        return self.get(INDEX_TYPE).is_global

    def is_set(self, option: Option[Any]) -> bool:
        """Whether any layer set `option` explicitly (as opposed to its default applying)."""
        return option.key in self._raw

    def raw(self) -> dict[str, str]:
        """Every explicitly set key (registry keys under their canonical name) -> string value."""
        return dict(self._raw)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and dict(self._raw) == dict(other._raw)

    def __hash__(self) -> int:
        return hash(frozenset(self._raw.items()))

    def __repr__(self) -> str:
        return f"Config({dict(self._raw)!r})"

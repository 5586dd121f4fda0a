"""Option values that mean nothing (a size of 0 bytes, a negative count, a probability above 1)
are refused by the option's name when the table is opened or created, before anything is written,
as Hudi's config builders refuse them; every numeric option of the registry says its bounds."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import upsertlake
from upsertlake.config import options as opt
from upsertlake.errors import ConfigError


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("hoodie.parquet.block.size", 0, "an integer of at least 1"),
        ("hoodie.parquet.block.size", -5, "an integer of at least 1"),
        ("hoodie.parquet.block.size", "0", "an integer of at least 1"),
        ("hoodie.parquet.max.file.size", 0, "an integer of at least 1"),
        ("hoodie.parquet.small.file.limit", -1, "an integer of at least 0"),
        ("hoodie.index.bloom.fpp", 1.5, "a number above 0 and at most 1"),
        ("hoodie.index.bloom.fpp", 0, "a number above 0 and at most 1"),
        ("hoodie.cleaner.commits.retained", 0, "an integer of at least 1"),
        ("hoodie.client.heartbeat.tolerable.misses", -2, "an integer of at least 1"),
        ("hoodie.write.num.retries.on.conflict.failures", -1, "an integer of at least 0"),
    ],
)
def test_meaningless_values_are_refused_by_name_before_anything_is_written(
    tmp_path: Path, key: str, value: object, expected: str
) -> None:
    t = upsertlake.create_table(tmp_path / "t", "t", record_key="id", precombine_field="ts")
    t.upsert(pa.table({"id": ["a"], "ts": [1]}))
    before = sorted(p.name for p in (tmp_path / "t" / ".hoodie").iterdir())
    typed = "" if isinstance(value, str) else f" ({type(value).__name__})"
    message = f"invalid value {value!r}{typed} for {key}: expected {expected}"
    with pytest.raises(ConfigError) as refused:
        upsertlake.open_table(tmp_path / "t", options={key: value})
    assert str(refused.value) == message
    with pytest.raises(ConfigError, match=key):
        t.upsert(pa.table({"id": ["b"], "ts": [1]}), options={key: value})
    with pytest.raises(ConfigError, match=key):
        upsertlake.create_table(tmp_path / "u", "u", record_key="id", precombine_field="ts", options={key: value})
    assert not (tmp_path / "u").exists()
    assert sorted(p.name for p in (tmp_path / "t" / ".hoodie").iterdir()) == before


def test_values_at_the_bounds_are_taken() -> None:
    assert opt.PARQUET_BLOCK_SIZE.parse(1) == 1
    assert opt.PARQUET_SMALL_FILE_LIMIT.parse(0) == 0  # 0 turns bin-packing off, as in Hudi
    assert opt.BLOOM_FPP.parse("0.5") == 0.5


def test_every_numeric_size_and_count_has_a_lower_bound() -> None:
    numeric = [o for o in opt.OPTIONS.values() if o.type in (int, float)]
    unbounded = [o.key for o in numeric if o.minimum is None and o.key != "hoodie.write.table.version"]
    assert unbounded == []

"""Time travel by datetime lands where the user looked: a naive datetime is local time (as
Python's `datetime.now()` gives it), an aware one any zone; both are converted to the table's
timeline zone (`hoodie.table.timeline.timezone`: UTC for our tables, LOCAL for Hudi's default),
and instants of a LOCAL table are written in local time, as Hudi writes them.

The machine running the tests may well be on UTC, where naive and UTC agree; so each scenario runs
in a subprocess with TZ set to a zone far from UTC."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCENARIO = textwrap.dedent(
    """
    import json, sys, time
    from datetime import datetime, timezone
    from pathlib import Path
    import pyarrow as pa
    import upsertlake

    path, zone = sys.argv[1], sys.argv[2]
    t = upsertlake.create_table(path, "t", record_key="id", precombine_field="ts")
    if zone == "LOCAL":  # as a table Hudi created without the property (Hudi's default, LOCAL)
        props = Path(path, ".hoodie", "hoodie.properties")
        zone_key = "hoodie.table.timeline.timezone"
        props.write_text(props.read_text().replace(f"{zone_key}=UTC", f"{zone_key}=LOCAL"))
        t = upsertlake.open_table(path)
    before = datetime.now()
    first = t.upsert(pa.table({"id": ["a"], "ts": [1], "v": ["one"]})).instant_time
    time.sleep(0.01)
    saw_naive, saw_utc = datetime.now(), datetime.now(timezone.utc)
    time.sleep(0.01)
    second = t.upsert(pa.table({"id": ["a"], "ts": [2], "v": ["two"]})).instant_time
    after = datetime.now()

    def v(as_of):
        return t.read(columns=["v"], as_of=as_of).column("v").to_pylist()

    print(json.dumps({
        "first": first, "second": second,
        "local_before": before.strftime("%Y%m%d%H%M%S"), "local_after": after.strftime("%Y%m%d%H%M%S"),
        "utc_before": before.astimezone(timezone.utc).strftime("%Y%m%d%H%M%S"),
        "utc_after": after.astimezone(timezone.utc).strftime("%Y%m%d%H%M%S"),
        "naive": v(saw_naive), "aware": v(saw_utc), "latest": v(None),
        "incremental_from_naive": t.read_incremental(begin=saw_naive).column("v").to_pylist(),
    }))
    """
)


def run_in_zone(tmp_path: Path, tz: str, table_zone: str) -> dict:
    env = {**os.environ, "TZ": tz}
    proc = subprocess.run(
        [sys.executable, "-c", SCENARIO, str(tmp_path / "t"), table_zone],
        capture_output=True, text=True, env=env, check=False, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("tz", ["America/New_York", "Asia/Kolkata"])
def test_naive_and_aware_datetimes_land_on_the_instant_just_seen_on_a_utc_table(tmp_path: Path, tz: str) -> None:
    out = run_in_zone(tmp_path, tz, "UTC")
    # Our tables write instants in UTC (hoodie.table.timeline.timezone=UTC).
    assert out["utc_before"] <= out["first"][:14] <= out["second"][:14] <= out["utc_after"]
    # datetime.now() between the two writes is the snapshot after the first, in either form.
    assert out["naive"] == ["one"]
    assert out["aware"] == ["one"]
    assert out["latest"] == ["two"]
    assert out["incremental_from_naive"] == ["two"]


def test_a_local_zone_table_writes_local_instants_and_converts_aware_datetimes(tmp_path: Path) -> None:
    out = run_in_zone(tmp_path, "America/New_York", "LOCAL")
    # As Hudi does for hoodie.table.timeline.timezone=LOCAL: instants in the writer's wall-clock time.
    assert out["local_before"] <= out["first"][:14] <= out["second"][:14] <= out["local_after"]
    assert out["naive"] == ["one"]
    assert out["aware"] == ["one"]  # a UTC datetime converted to the table's (local) zone
    assert out["incremental_from_naive"] == ["two"]

"""The commands say what happened: clustering that did nothing says why, rollback names the commit
it undid, `files` and `show` count file groups alike, the timeline labels batch and rewritten
rows, the stats plot shows its bars, the demo says where its table stays; option names are one
per setting, old spellings warn."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import pyarrow as pa
import pytest

import upsertlake

from helpers import cli_in_process

SMALL = ["--option", "hoodie.parquet.small.file.limit=0", "--option", "hoodie.clean.automatic=false"]


def cli(capsys, *args: str | Path, code: int = 0) -> tuple[str, str]:
    got, out, err = cli_in_process(capsys, *args)
    assert got == code
    return out, err


def js(capsys, *args: str | Path) -> object:
    return json.loads(cli(capsys, *args, "--json")[0])


@pytest.fixture
def trips(tmp_path: Path) -> Path:
    """Two commits into two partitions, each commit a new file group per partition."""
    path = tmp_path / "trips"
    t = upsertlake.create_table(path, "trips", record_key="uuid", precombine_field="ts", partition_fields="city")
    opts = {"hoodie.parquet.small.file.limit": 0, "hoodie.clean.automatic": False}
    t.insert(pa.table({"uuid": ["a", "b"], "ts": [1, 1], "city": ["sf", "nyc"]}), opts)
    t.insert(pa.table({"uuid": ["c", "d"], "ts": [1, 1], "city": ["sf", "nyc"]}), opts)
    return path


# -- option names ----------------------------------------------------------------------------------
def test_create_with_partition_fields_before_the_path(capsys, tmp_path: Path) -> None:
    path = tmp_path / "t"
    out, err = cli(capsys, "create", "--partition-fields", "city,day", "--record-key", "uuid",
                   "--precombine-field", "ts", path, "--name", "t")
    assert out == f"created table 't' at {path}\n" and err == ""
    config = upsertlake.open_table(path).table_config
    assert (config.partition_fields, config.precombine_field) == (("city", "day"), "ts")


def test_old_option_spellings_still_work_with_a_warning(capsys, tmp_path: Path) -> None:
    path = tmp_path / "t"
    out, err = cli(capsys, "create", "--partition", "city", path, "--name", "t", "--record-key", "uuid",
                   "--precombine", "ts")
    assert out == f"created table 't' at {path}\n"
    assert err.splitlines() == [
        "warning: --partition is deprecated; use --partition-fields",
        "warning: --precombine is deprecated; use --precombine-field",
    ]
    config = upsertlake.open_table(path).table_config
    assert (config.partition_fields, config.precombine_field) == (("city",), "ts")


def test_spark_option_names_and_deprecated_aliases() -> None:
    from upsertlake.spark.options import resolve_aliases

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_aliases(
            {"record_key": "uuid", "precombine_field": "ts", "partition_fields": ["city", "day"]}
        ) == {
            "hoodie.datasource.write.recordkey.field": "uuid",
            "hoodie.datasource.write.precombine.field": "ts",
            "hoodie.datasource.write.partitionpath.field": "city,day",
        }
    with pytest.warns(DeprecationWarning, match="precombine= is deprecated; use precombine_field="):
        old = resolve_aliases({"precombine": "ts"})
    assert old == {"hoodie.datasource.write.precombine.field": "ts"}
    with pytest.warns(DeprecationWarning, match="partition= is deprecated; use partition_fields="):
        assert resolve_aliases({"partition": "city"}) == {"hoodie.datasource.write.partitionpath.field": "city"}


def test_spark_record_key_contradicting_the_table_is_refused(trips: Path) -> None:
    from upsertlake.spark.options import write_options

    options = write_options({"record_key": "id"}, str(trips), "upsert")
    with pytest.raises(
        upsertlake.ConfigError, match=r"recordkey.field='id' but the table has hoodie.table.recordkey.fields='uuid'"
    ):
        options.open_or_create(pa.schema([("id", pa.string())]))


# -- cluster --------------------------------------------------------------------------------------
def test_cluster_with_nothing_to_do_says_why(capsys, trips: Path) -> None:
    result = upsertlake.open_table(trips).cluster({"hoodie.clustering.plan.strategy.small.file.limit": 1})
    assert result.instant_time is None and not result.clustered
    assert result.reason.startswith(
        "no partition has two file groups below hoodie.clustering.plan.strategy.small.file.limit=1 bytes "
        "(0 small of 4 file groups in 2 partition(s))"
    )
    info = js(capsys, "cluster", trips, "--option", "hoodie.clustering.plan.strategy.small.file.limit=1")
    assert info == {
        "instant_time": None,
        "clustered": False,
        "replaced": {},
        "files_written": [],
        "reason": result.reason,
    }
    out, _ = cli(capsys, "cluster", trips, "--option", "hoodie.clustering.plan.strategy.small.file.limit=1")
    assert out == f"nothing to cluster: {result.reason}\n"


def test_cluster_json_when_it_clusters(capsys, trips: Path) -> None:
    info = js(capsys, "cluster", trips)
    assert info["clustered"] is True and info["reason"] == ""
    assert {p: len(ids) for p, ids in info["replaced"].items()} == {"sf": 2, "nyc": 2}
    assert len(info["files_written"]) == 2


# -- files and show agree; replaced groups are marked ---------------------------------------------
def test_files_and_show_count_file_groups_alike_and_mark_replaced_ones(capsys, trips: Path) -> None:
    cli(capsys, "cluster", trips)
    show = js(capsys, "show", trips)
    assert show["file_groups"] == 2
    out, _ = cli(capsys, "files", trips)
    first = out.splitlines()[0]
    assert first == "2 file groups, as `show` counts them (the latest snapshot); also on storage: 4 replaced, " \
                    "0 with no committed file; 6 base files"
    marks = [line.split()[3] for line in out.splitlines()[2:8]]
    assert sorted(marks) == ["*", "*", "replaced", "replaced", "replaced", "replaced"]
    rows = js(capsys, "files", trips)
    assert sum(r["replaced"] for r in rows) == 4 and sum(r["latest"] for r in rows) == 2


# -- timeline: batch and rewritten rows, labelled -------------------------------------------------
def test_timeline_shows_batch_and_rows_written(capsys, tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = upsertlake.create_table(path, "t", record_key="uuid", precombine_field="ts")
    t.insert(pa.table({"uuid": [f"k{i}" for i in range(10)], "ts": [1] * 10}))
    t.upsert(pa.table({"uuid": ["k1", "new"], "ts": [2, 2]}))
    rows = js(capsys, "timeline", path)
    commits = [r for r in rows if r["action"] == "commit"]
    assert [(r["batch"], r["inserts"], r["updates"], r["rows_written"]) for r in commits] == [
        (10, 10, 0, 10),
        (2, 1, 1, 11),  # one update and one insert rewrite the whole file of 11 rows
    ]
    out, _ = cli(capsys, "timeline", path)
    header = out.splitlines()[0].split()
    assert "batch" in header and "rows_written" in header and "records" not in header
    assert out.splitlines()[-1].startswith("(batch = records the commit inserted, updated or deleted; rows_written")


# -- rollback and restore --------------------------------------------------------------------------
def test_rollback_names_the_commit_it_undid(capsys, caplog, trips: Path) -> None:
    latest = [i for i in upsertlake.open_table(trips).timeline() if i.action.value == "commit"][-1]
    with caplog.at_level(logging.INFO, logger="upsertlake"):
        out, _ = cli(capsys, "rollback", trips, "-v")
    rollback = [i for i in upsertlake.open_table(trips).timeline() if i.action.value == "rollback"][-1]
    assert out == f"rolled back commit {latest.time} (rollback instant {rollback.time})\n"
    messages = [r.getMessage() for r in caplog.records]
    assert f"rollback {rollback.time} undid completed commit {latest.time}" in messages
    assert not [m for m in messages if "pending" in m]


def test_rollback_json_lists_what_it_undid(capsys, trips: Path) -> None:
    latest = [i for i in upsertlake.open_table(trips).timeline() if i.action.value == "commit"][-1]
    info = js(capsys, "rollback", trips)
    assert info["action"] == "rollback" and info["rolled_back"] == [{"instant_time": latest.time, "action": "commit"}]


def test_restore_without_savepoint_points_at_the_savepoint_command(capsys, trips: Path) -> None:
    first = upsertlake.open_table(trips).timeline()[0].time
    _, err = cli(capsys, "restore", trips, first, code=2)
    assert "the table has none" in err and "`upsertlake savepoint PATH [INSTANT]`" in err


def test_restore_names_what_it_rolled_back(capsys, trips: Path) -> None:
    first, second = [i.time for i in upsertlake.open_table(trips).timeline()]
    cli(capsys, "savepoint", trips, first)
    out, _ = cli(capsys, "restore", trips, first)
    assert out.startswith(f"restored to savepoint {first}: rolled back commit {second} (restore instant ")


# -- stats --plot -------------------------------------------------------------------------------------
def test_stats_plot_shows_the_bars(capsys, trips: Path, tmp_path: Path) -> None:
    import matplotlib.image as image
    out_png = tmp_path / "stats.png"
    cli(capsys, "stats", trips, "--plot", out_png)
    pixels = image.imread(out_png)[..., :3]
    h, w = pixels.shape[:2]
    top_left = pixels[: h // 2, : w // 2]
    # the histogram's bars are filled in matplotlib's first colour, #1f77b4
    bar = (abs(top_left - [0x1F / 255, 0x77 / 255, 0xB4 / 255]).max(axis=-1) < 0.02).mean()
    assert bar > 0.05, f"only {bar:.3%} of the histogram panel is bar"


# -- demo -----------------------------------------------------------------------------------------
def test_demo_says_its_table_stays(capsys, tmp_path: Path) -> None:
    path = tmp_path / "demo"
    out, _ = cli(capsys, "demo", "--path", path)
    assert out.splitlines()[-1] == (
        f"the table stays in {path} after this command: look at it with `upsertlake show {path}`, "
        "delete the folder when done"
    )
    assert (path / ".hoodie" / "hoodie.properties").exists()

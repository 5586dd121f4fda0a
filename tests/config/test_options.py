"""The option registry: parsing, defaults, layer precedence and key validation."""

from __future__ import annotations

import warnings
from importlib import resources

import pytest

from upsertlake.config import OPTIONS, Config, Option, hudi_keys, is_hudi_key, known_keys
from upsertlake.config import options as opt
from upsertlake.config.enums import CleanPolicy, ConcurrencyMode, IndexType, MergeMode, TableType
from upsertlake.errors import ConfigError


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the once-per-process warnings afresh."""
    monkeypatch.setattr(known_keys, "_WARNED", set())


# --- Option.parse ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(True, True), (False, False), ("true", True), ("FALSE", False), ("True", True), (" false ", False)],
)
def test_parse_bool(raw: object, expected: bool) -> None:
    assert opt.COMBINE_BEFORE_UPSERT.parse(raw) is expected


@pytest.mark.parametrize("raw", ["yes", "1", 1, 0, "", None, 1.0])
def test_parse_bool_rejects(raw: object) -> None:
    with pytest.raises(ConfigError) as exc:
        opt.COMBINE_BEFORE_UPSERT.parse(raw)
    assert "hoodie.combine.before.upsert" in str(exc.value)
    assert repr(raw) in str(exc.value)


@pytest.mark.parametrize(
    ("raw", "expected"), [(125829120, 125829120), ("125829120", 125829120), (" 42 ", 42), (1e6, 1000000)]
)
def test_parse_int(raw: object, expected: int) -> None:
    value = opt.PARQUET_MAX_FILE_SIZE.parse(raw)
    assert value == expected and type(value) is int


@pytest.mark.parametrize("raw", ["12MB", "1.5", 1.5, True, None, ""])
def test_parse_int_rejects(raw: object) -> None:
    with pytest.raises(ConfigError, match=r"hoodie.parquet.max.file.size") as exc:
        opt.PARQUET_MAX_FILE_SIZE.parse(raw)
    assert "an integer" in str(exc.value)


@pytest.mark.parametrize(
    ("raw", "expected"), [("1e-9", 1e-9), (1e-9, 1e-9), ("0.000000001", 1e-9), (1, 1.0), ("1.0", 1.0)]
)
def test_parse_float(raw: object, expected: float) -> None:
    value = opt.BLOOM_FPP.parse(raw)
    assert value == expected and type(value) is float


@pytest.mark.parametrize("raw", ["tiny", False, None])
def test_parse_float_rejects(raw: object) -> None:
    with pytest.raises(ConfigError, match=r"hoodie.index.bloom.fpp"):
        opt.BLOOM_FPP.parse(raw)


def test_parse_enum_is_case_insensitive_and_canonical() -> None:
    assert opt.INDEX_TYPE.parse("bloom") is IndexType.BLOOM
    assert opt.INDEX_TYPE.parse("Global_Simple") is IndexType.GLOBAL_SIMPLE
    assert opt.RECORD_MERGE_MODE.parse("commit_time_ordering") is MergeMode.COMMIT_TIME
    assert opt.CLEANER_POLICY.parse("keep_latest_by_hours") is CleanPolicy.KEEP_LATEST_BY_HOURS
    # Lower-case enums keep their lower-case canonical form.
    assert opt.OPERATION.parse("BULK_INSERT") == "bulk_insert"
    assert opt.PARQUET_COMPRESSION.parse("ZSTD") == "zstd"


def test_parse_bad_enum_names_key_value_and_choices() -> None:
    with pytest.raises(ConfigError) as exc:
        opt.INDEX_TYPE.parse("HBASE")
    message = str(exc.value)
    assert "hoodie.index.type" in message
    assert "'HBASE'" in message
    for choice in opt.INDEX_TYPE.choices:
        assert choice in message


def test_parse_str() -> None:
    assert opt.RECORDKEY_FIELD.parse("id,ts") == "id,ts"
    with pytest.raises(ConfigError, match=r"hoodie.datasource.write.recordkey.field"):
        opt.RECORDKEY_FIELD.parse(3)


def test_to_string_round_trips() -> None:
    for option in set(OPTIONS.values()):
        assert option.parse(option.to_string(option.default)) == option.default
    assert opt.COPY_ON_WRITE_AUTO_SPLIT.to_string(True) == "true"


# --- the registry -----------------------------------------------------------------------------


def test_defaults() -> None:
    config = Config.resolve()
    expected = {
        opt.PARQUET_MAX_FILE_SIZE: 125829120,
        opt.PARQUET_SMALL_FILE_LIMIT: 104857600,
        opt.PARQUET_BLOCK_SIZE: 4 * 2**20,
        opt.PARQUET_COMPRESSION: "snappy",
        opt.COPY_ON_WRITE_INSERT_SPLIT_SIZE: 500000,
        opt.COPY_ON_WRITE_AUTO_SPLIT: True,
        opt.RECORD_SIZE_ESTIMATE: 1024,
        opt.RECORD_SIZE_ESTIMATION_THRESHOLD: 1.0,
        opt.INDEX_TYPE: IndexType.SIMPLE,
        opt.BLOOM_NUM_ENTRIES: 60000,
        opt.BLOOM_FPP: 1e-9,
        opt.BLOOM_FILTER_TYPE: "DYNAMIC_V0",
        opt.BLOOM_MAX_ENTRIES: 100000,
        opt.BLOOM_PRUNE_BY_RANGES: True,
        opt.SIMPLE_INDEX_UPDATE_PARTITION_PATH: True,
        opt.BLOOM_INDEX_UPDATE_PARTITION_PATH: True,
        opt.RECORD_MERGE_MODE: MergeMode.EVENT_TIME,
        opt.BULK_INSERT_SORT_MODE: "NONE",
        opt.COMBINE_BEFORE_INSERT: False,
        opt.COMBINE_BEFORE_UPSERT: True,
        opt.COMBINE_BEFORE_DELETE: True,
        opt.WRITE_CONCURRENCY_MODE: ConcurrencyMode.SINGLE_WRITER,
        opt.STREAMING_CHECKPOINT_IDENTIFIER: "default_single_writer",  # Hudi's DataSourceWriteOptions
        opt.LOCK_PROVIDER: "upsertlake.concurrency.lock.FlockLockProvider",
        opt.LOCK_FILESYSTEM_PATH: "",
        opt.LOCK_WAIT_TIME_MS: 60000,
        opt.LOCK_EXPIRE_MINUTES: 0,
        opt.HEARTBEAT_INTERVAL_MS: 60000,
        opt.HEARTBEAT_TOLERABLE_MISSES: 2,
        opt.WRITE_SET_NULL_FOR_MISSING_COLUMNS: False,
        opt.PARTITIONPATH_URLENCODE: False,
        opt.HIVE_STYLE_PARTITIONING: False,
        opt.KEYGEN_CLASS: "",
        opt.RECORDKEY_FIELD: "",
        opt.PRECOMBINE_FIELD: "",
        opt.PARTITIONPATH_FIELD: "",
        opt.TABLE_NAME: "",
        opt.TABLE_TYPE: TableType.COPY_ON_WRITE,
        opt.DATABASE_NAME: "default",
        opt.OPERATION: "upsert",
        opt.WRITE_TABLE_VERSION: 6,
        opt.WRITE_AUTO_UPGRADE: True,
        opt.WRITE_PARALLELISM: 0,
        opt.CLEANER_POLICY: CleanPolicy.KEEP_LATEST_COMMITS,
        opt.CLEANER_COMMITS_RETAINED: 10,
        opt.CLEANER_FILE_VERSIONS_RETAINED: 3,
        opt.CLEANER_HOURS_RETAINED: 24,
        opt.CLEAN_AUTOMATIC: True,
        opt.CLEAN_MAX_COMMITS: 1,
        opt.KEEP_MIN_COMMITS: 20,
        opt.KEEP_MAX_COMMITS: 30,
        opt.ARCHIVE_AUTOMATIC: True,
        opt.CLUSTERING_SMALL_FILE_LIMIT: 314572800,
        opt.CLUSTERING_TARGET_FILE_MAX_BYTES: 1073741824,
        opt.CLUSTERING_SORT_COLUMNS: "",
        opt.CLUSTERING_INLINE: False,
        opt.CLUSTERING_INLINE_MAX_COMMITS: 4,
        opt.COMPACT_INLINE: False,
        opt.COMPACT_INLINE_MAX_DELTA_COMMITS: 5,
        opt.COMPACT_INLINE_MAX_DELTA_SECONDS: 3600,
        opt.COMPACT_INLINE_TRIGGER_STRATEGY: "NUM_COMMITS",
        opt.COMPACTION_STRATEGY: "org.apache.hudi.table.action.compact.strategy.LogFileSizeBasedCompactionStrategy",
        opt.COMPACTION_TARGET_IO: 512000,
        opt.COMPACTION_LOGFILE_SIZE_THRESHOLD: 0,
        opt.NUM_RETRIES_ON_CONFLICT: 0,
        opt.LOCK_STORAGE_VALIDITY_SECS: 300,
        opt.LOCK_STORAGE_HEARTBEAT_POLL_SECS: 30,
        opt.LOGFILE_DATA_BLOCK_FORMAT: "avro",
        opt.BUCKET_INDEX_NUM_BUCKETS: 256,
        opt.BUCKET_INDEX_HASH_FIELD: "",
        opt.BUCKET_INDEX_ENGINE: "SIMPLE",
        opt.RECORD_INDEX_UPDATE_PARTITION_PATH: False,
        opt.METADATA_ENABLE: True,
        opt.METADATA_RECORD_INDEX_ENABLE: False,
        opt.METADATA_COMPACT_MAX_DELTA_COMMITS: 10,
        opt.COMMITS_ARCHIVAL_BATCH: 10,
        opt.ARCHIVE_MERGE_ENABLE: True,
        opt.ARCHIVE_MERGE_FILES_BATCH: 10,
        opt.ARCHIVE_MERGE_SMALL_FILE_LIMIT: 20 * 1024 * 1024,
        opt.TIMELINE_COMPACTION_BATCH: 10,
    }
    assert len(expected) == len(set(OPTIONS.values()))
    for option, value in expected.items():
        got = config.get(option)
        assert got == value and type(got) is type(value), option.key
    assert config.raw() == {}


def test_every_option_is_declared_once_with_a_genuine_key() -> None:
    options = [v for v in vars(opt).values() if isinstance(v, Option)]
    assert len({o.key for o in options}) == len(options)
    for option in options:
        assert OPTIONS[option.key] is option
        assert option.doc
        assert isinstance(option.default, option.type)
        for key in (option.key, *option.aliases):
            assert is_hudi_key(key), key
        if option.choices:
            assert option.default in option.choices


def test_registry_has_no_mutable_access() -> None:
    with pytest.raises(TypeError):
        OPTIONS["hoodie.x"] = opt.INDEX_TYPE  # type: ignore[index]


# --- resolution -------------------------------------------------------------------------------


def test_layers_take_precedence_in_order() -> None:
    table = {"hoodie.parquet.max.file.size": "1000", "hoodie.index.type": "BLOOM", "hoodie.table.name": "t"}
    obj = {"hoodie.parquet.max.file.size": 2000, "hoodie.bloom.index.prune.by.ranges": "false"}
    call = {"hoodie.parquet.max.file.size": "3000"}
    config = Config.resolve(obj, call, table_properties=table)
    assert config.get(opt.PARQUET_MAX_FILE_SIZE) == 3000
    assert config.get(opt.INDEX_TYPE) is IndexType.BLOOM
    assert config.get(opt.BLOOM_PRUNE_BY_RANGES) is False
    assert config.get(opt.TABLE_NAME) == "t"
    assert config.get(opt.PARQUET_BLOCK_SIZE) == 4 * 2**20
    assert Config.resolve(obj, table_properties=table).get(opt.PARQUET_MAX_FILE_SIZE) == 2000
    assert Config.resolve(table_properties=table).get(opt.PARQUET_MAX_FILE_SIZE) == 1000


def test_with_overrides_is_a_new_config() -> None:
    base = Config.resolve({"hoodie.index.type": "BLOOM"})
    derived = base.with_overrides({"hoodie.index.type": "simple", "hoodie.combine.before.insert": True})
    assert base.get(opt.INDEX_TYPE) is IndexType.BLOOM
    assert derived.get(opt.INDEX_TYPE) is IndexType.SIMPLE
    assert derived.get(opt.COMBINE_BEFORE_INSERT) is True
    assert base.with_overrides(None) is base
    assert base.with_overrides({}) is base


def test_none_layers_and_values_are_ignored() -> None:
    config = Config.resolve(None, {"hoodie.index.type": None}, None)
    assert config.raw() == {}
    assert config.get(opt.INDEX_TYPE) is IndexType.SIMPLE


def test_raw_holds_explicit_keys_as_strings() -> None:
    config = Config.resolve(
        {"hoodie.combine.before.insert": True, "hoodie.index.bloom.fpp": 1e-6, "hoodie.index.type": "bloom"},
        table_properties={"hoodie.table.type": "COPY_ON_WRITE"},
    )
    assert config.raw() == {
        "hoodie.combine.before.insert": "true",
        "hoodie.index.bloom.fpp": "1e-06",
        "hoodie.index.type": "BLOOM",
        "hoodie.table.type": "COPY_ON_WRITE",
    }
    assert config.is_set(opt.INDEX_TYPE) and not config.is_set(opt.BLOOM_NUM_ENTRIES)
    config.raw()["hoodie.index.type"] = "changed"
    assert config.get(opt.INDEX_TYPE) is IndexType.BLOOM


def test_config_is_immutable_and_comparable() -> None:
    a = Config.resolve({"hoodie.index.type": "BLOOM"})
    b = Config.resolve({"hoodie.index.type": "bloom"})
    assert a == b and hash(a) == hash(b)
    with pytest.raises(AttributeError):
        a.extra = 1  # type: ignore[attr-defined]


def test_bad_value_is_rejected_with_key_value_and_choices() -> None:
    with pytest.raises(ConfigError) as exc:
        Config.resolve({"hoodie.bulkinsert.sort.mode": "RANDOM"})
    message = str(exc.value)
    assert "hoodie.bulkinsert.sort.mode" in message and "'RANDOM'" in message
    assert "PARTITION_SORT" in message
    with pytest.raises(ConfigError, match=r"hoodie.copyonwrite.insert.split.size"):
        Config.resolve().with_overrides({"hoodie.copyonwrite.insert.split.size": "lots"})


def test_unknown_key_error_names_key_and_suggestion() -> None:
    with pytest.raises(ConfigError) as exc:
        Config.resolve({"hoodie.parquet.max.filesize": 1})
    message = str(exc.value)
    assert "'hoodie.parquet.max.filesize'" in message
    assert "did you mean 'hoodie.parquet.max.file.size'?" in message


def test_unknown_key_suggests_a_hudi_key_we_do_not_implement() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'hoodie.metadata.enable'"):
        Config.resolve({"hoodie.metadata.enabled": "true"})


def test_unknown_key_without_close_match() -> None:
    with pytest.raises(ConfigError) as exc:
        Config.resolve({"hoodie.zzz.qqq": 1})
    assert "'hoodie.zzz.qqq'" in str(exc.value)
    assert "did you mean" not in str(exc.value)


def test_non_hoodie_key_is_rejected_and_says_why() -> None:
    with pytest.raises(ConfigError) as exc:
        Config.resolve({"parquet.max.file.size": 1})
    message = str(exc.value)
    assert "'parquet.max.file.size'" in message and "'hoodie.'" in message
    assert "did you mean 'hoodie.parquet.max.file.size'?" in message
    with pytest.raises(ConfigError, match="'path'"):
        Config.resolve({"path": "/tmp/x"})


def test_non_string_key_is_rejected() -> None:
    with pytest.raises(ConfigError):
        Config.resolve({1: "x"})  # type: ignore[dict-item]


def test_genuine_unimplemented_hudi_key_warns_once() -> None:
    with pytest.warns(UserWarning, match="hoodie.embed.timeline.server"):
        config = Config.resolve({"hoodie.embed.timeline.server": True})
    assert config.raw() == {"hoodie.embed.timeline.server": "true"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Config.resolve({"hoodie.embed.timeline.server": "false"})  # already warned in this process
        config.with_overrides({"hoodie.embed.timeline.server": "false"})


def test_dynamic_prefix_keys_are_accepted_with_a_warning() -> None:
    for key in (
        "hoodie.streamer.source.mycustom.option",
        "hoodie.deltastreamer.transformer.mine",
        "hoodie.datasource.hive_sync.something_new",
        "hoodie.metrics.myreporter.host",
    ):
        assert is_hudi_key(key)
        with pytest.warns(UserWarning, match=key.replace(".", r"\.")):
            assert Config.resolve({key: "v"}).raw() == {key: "v"}


def test_table_properties_are_accepted_silently() -> None:
    props = {
        "hoodie.table.name": "trips",
        "hoodie.table.version": "6",
        "hoodie.some.future.key": "x",
        "hoodie.index.type": "NOT_AN_INDEX",
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = Config.resolve(table_properties=props)
    assert config.get(opt.TABLE_NAME) == "trips"
    assert config.raw()["hoodie.some.future.key"] == "x"
    # A bad stored value only fails when it is used, naming the key.
    with pytest.raises(ConfigError, match=r"hoodie.index.type"):
        config.get(opt.INDEX_TYPE)
    assert config.with_overrides({"hoodie.index.type": "SIMPLE"}).get(opt.INDEX_TYPE) is IndexType.SIMPLE


def test_alias_resolves_to_the_option() -> None:
    assert OPTIONS["hoodie.write.record.merge.mode"] is opt.RECORD_MERGE_MODE
    config = Config.resolve({"hoodie.write.record.merge.mode": "commit_time_ordering"})
    assert config.get(opt.RECORD_MERGE_MODE) is MergeMode.COMMIT_TIME
    assert config.raw() == {"hoodie.record.merge.mode": "COMMIT_TIME_ORDERING"}
    from_table = Config.resolve(table_properties={"hoodie.write.record.merge.mode": "COMMIT_TIME_ORDERING"})
    assert from_table.get(opt.RECORD_MERGE_MODE) is MergeMode.COMMIT_TIME


def test_alias_and_key_conflicting_in_one_layer() -> None:
    same = {"hoodie.record.merge.mode": "EVENT_TIME_ORDERING", "hoodie.write.record.merge.mode": "event_time_ordering"}
    assert Config.resolve(same).get(opt.RECORD_MERGE_MODE) is MergeMode.EVENT_TIME
    with pytest.raises(ConfigError, match="conflicting"):
        Config.resolve(
            {
                "hoodie.record.merge.mode": "EVENT_TIME_ORDERING",
                "hoodie.write.record.merge.mode": "COMMIT_TIME_ORDERING",
            }
        )
    # Across layers the later layer simply wins.
    config = Config.resolve(
        {"hoodie.record.merge.mode": "EVENT_TIME_ORDERING"}, {"hoodie.write.record.merge.mode": "COMMIT_TIME_ORDERING"}
    )
    assert config.get(opt.RECORD_MERGE_MODE) is MergeMode.COMMIT_TIME


# --- hudi_keys.txt ----------------------------------------------------------------------------


def test_hudi_keys_file_ships_and_is_sorted_unique() -> None:
    text = resources.files("upsertlake.config").joinpath("hudi_keys.txt").read_text("utf-8")
    lines = text.splitlines()
    assert lines == sorted(set(lines))
    assert all(line.startswith("hoodie.") and " " not in line for line in lines)
    assert len(hudi_keys()) == len(lines) >= 1000


@pytest.mark.parametrize(
    "key",
    [
        "hoodie.table.name",
        "hoodie.table.type",
        "hoodie.table.version",
        "hoodie.table.recordkey.fields",
        "hoodie.table.partition.fields",
        "hoodie.table.precombine.field",
        "hoodie.table.keygenerator.class",
        "hoodie.table.create.schema",
        "hoodie.table.checksum",
        "hoodie.table.timeline.timezone",
        "hoodie.table.base.file.format",
        "hoodie.table.metadata.partitions",
        "hoodie.archivelog.folder",
        "hoodie.timeline.layout.version",
        "hoodie.database.name",
        "hoodie.populate.meta.fields",
        "hoodie.embed.timeline.server",
        "hoodie.datasource.write.table.type",
        "hoodie.datasource.write.payload.class",
        "hoodie.datasource.hive_sync.enable",
        "hoodie.datasource.query.type",
        "hoodie.datasource.view.type",  # withAlternatives of hoodie.datasource.query.type
        "hoodie.cleaner.policy",
        "hoodie.clean.async",  # withAlternatives of hoodie.clean.async.enabled
        "hoodie.cleaner.commits.retained",
        "hoodie.keep.min.commits",
        "hoodie.insert.shuffle.parallelism",
        "hoodie.compact.inline",
        "hoodie.clustering.inline",
        "hoodie.index.bloom.num_entries",
        "hoodie.bucket.index.num.buckets",
        "hoodie.write.lock.zookeeper.url",
        "hoodie.write.lock.dynamodb.table",
        "hoodie.streamer.source.kafka.topic",
        "hoodie.deltastreamer.source.kafka.topic",
        "hoodie.metrics.on",
        "hoodie.embed.timeline.server",
        "hoodie.avro.schema.validate",
        "hoodie.payload.ordering.field",
    ],
)
def test_hudi_keys_include_well_known_keys(key: str) -> None:
    assert key in hudi_keys()
    assert is_hudi_key(key)


def test_is_hudi_key_rejects_made_up_keys() -> None:
    assert not is_hudi_key("hoodie.parquet.max.filesize")
    assert not is_hudi_key("spark.sql.shuffle.partitions")
    assert not is_hudi_key("hoodie.")

"""The average record size estimate, with the numbers of Hudi's TestAverageRecordSizeUtils and the
averageBytesPerRecord cases of TestUpsertPartitioner (copy-on-write ones; see the skip notes)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from upsertlake.partitioner import ESTIMATE_ACTIONS_0_14, ESTIMATE_ACTIONS_0_15, average_record_size

DEFAULT_LIMIT = 104857600


def commit(records: int, per_record: int) -> tuple[int, int]:
    """(bytes, records) of a commit that wrote `records` records of `per_record` bytes each."""
    return records * per_record, records


def test_empty_timeline_gives_the_configured_estimate() -> None:
    # TestUpsertPartitioner.testAverageBytesPerRecordForEmptyCommitTimeLine
    assert average_record_size([]) == 1024


def test_unreadable_instants_fall_back_to_the_estimate() -> None:
    # TestAverageRecordSizeUtils.testErrorHandling: the one instant has no details; the caller skips
    # it (as 0.15 does), leaving nothing to estimate from.
    assert average_record_size([], default_estimate=10000) == 10000


def test_newest_commit_above_the_threshold_wins_skipping_zero_and_small_commits() -> None:
    # TestUpsertPartitioner.testAverageBytesPerRecordForNonEmptyCommitTimeLine: small file limit
    # 1000, five instants read newest first from the stack of six metadata documents.
    newest_first = [
        (0, 2500),  # zero bytes
        (1500, 0),  # zero records
        (0, 0),  # both zero
        (500, 100),  # a small commit, not above the 1000-byte threshold
        (7500, 1500),  # the first that counts
        (10000, 2000),
    ]
    assert average_record_size(newest_first, small_file_limit=1000) == 5


@pytest.mark.parametrize(
    ("newest_first", "expected"),
    [
        # straight forward: just 1 instant
        ([commit(10_000_000, 100)], 100),
        # two instants: the latest is honoured
        ([commit(10_000_000, 200), commit(10_000_000, 100)], 200),
        # the latest is too small to meet the threshold (10000 × 200 bytes): the older one counts
        ([commit(10_000, 200), commit(10_000_000, 100)], 100),
    ],
)
def test_hudi_average_record_size_cases(newest_first: list[tuple[int, int]], expected: int) -> None:
    # TestAverageRecordSizeUtils.testAverageRecordSize, copy-on-write cases
    assert average_record_size(newest_first) == expected


def test_replacecommit_counts_from_0_15_but_not_in_0_14() -> None:
    # TestAverageRecordSizeUtils: "2nd instance is replace commit and should be honored" (0.15);
    # 0.14 reads commit instants only.
    timeline = [("commit", *commit(10_000_000, 100)), ("replacecommit", *commit(10_000_000, 200))]

    def estimate(actions: frozenset[str]) -> int:
        return average_record_size((b, r) for action, b, r in reversed(timeline) if action in actions)

    assert estimate(ESTIMATE_ACTIONS_0_15) == 200
    assert estimate(ESTIMATE_ACTIONS_0_14) == 100


def test_replacecommit_after_commits_without_base_files() -> None:
    # TestAverageRecordSizeUtils "replace commit should be honored": the replacecommit wrote
    # 1,000,000 records of 400 bytes; the instants below it do not count.
    newest_first = [commit(1_000_000, 400), (0, 0), commit(1_000_000, 100)]
    assert average_record_size(newest_first) == 400


def test_threshold_is_exclusive_and_truncated_like_a_java_long() -> None:
    # 0.5 × 1001 = 500.5 -> threshold 500: 500 bytes do not count, 501 do.
    assert average_record_size([(500, 1)], default_estimate=7, estimation_threshold=0.5, small_file_limit=1001) == 7
    assert average_record_size([(501, 1)], default_estimate=7, estimation_threshold=0.5, small_file_limit=1001) == 501


def test_size_is_rounded_up() -> None:
    assert average_record_size([(DEFAULT_LIMIT + 1, 3)]) == -(-(DEFAULT_LIMIT + 1) // 3)


def test_stops_reading_at_the_first_qualifying_commit() -> None:
    """The caller may read commit files lazily: older ones are never asked for."""

    def commits() -> Iterator[tuple[int, int]]:
        yield commit(10, 1)
        yield commit(10_000_000, 150)
        raise AssertionError("read past the qualifying commit")

    assert average_record_size(commits()) == 150

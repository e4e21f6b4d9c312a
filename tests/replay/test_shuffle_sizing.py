"""Shuffle partitions follow the input's size, not Spark's fixed 200."""

from __future__ import annotations

from airflow_cdc_provider.replay.shuffles import shuffle_partitions

MIB = 2**20


def test_one_partition_per_64_mib_at_least_one_per_core_at_most_4000():
    assert shuffle_partitions(0, 2) == 2
    assert shuffle_partitions(10 * MIB, 2) == 2
    assert shuffle_partitions(245 * MIB, 2) == 4  # the 1M-event benchmark landing
    assert shuffle_partitions(2_480 * MIB, 2) == 39  # the 10M one
    assert shuffle_partitions(64 * MIB + 1, 1) == 2
    assert shuffle_partitions(10 * 2**40, 8) == 4000

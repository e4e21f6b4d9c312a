"""Shuffle partitions follow the input's size, not Spark's fixed 200."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.replay.shuffles import shuffle_partitions

MIB = 2**20


def test_one_partition_per_64_mib_at_least_one_per_core_at_most_4000():
    assert shuffle_partitions(0, 2) == 2
    assert shuffle_partitions(10 * MIB, 2) == 2
    assert shuffle_partitions(245 * MIB, 2) == 4  # the 1M-event benchmark landing
    assert shuffle_partitions(2_480 * MIB, 2) == 39  # the 10M one
    assert shuffle_partitions(64 * MIB + 1, 1) == 2
    assert shuffle_partitions(10 * 2**40, 8) == 4000


_SIZED = (
    "spark.sql.shuffle.partitions",
    "spark.sql.files.minPartitionNum",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism",
)


@pytest.mark.parametrize(
    "options", [{}, {"keep_state": True}, {"history": True}], ids=["rebuild", "keeping-state", "history"]
)
def test_a_landing_of_many_files_is_listed_in_two_tasks_per_core(spark, tmp_path, options):
    """Spark lists more than 32 paths in a Spark job of its own, one task per path by default; the
    run asks for two per core (the suite's session has two cores), and still reads every file. A
    run that keeps its events (state, a history) decodes them before the fold: it sizes its reads
    before that."""
    from tests.conftest import debezium_specs, write_jsonl

    from airflow_cdc_provider.replay.runs.history import run_history
    from airflow_cdc_provider.replay.runs.snapshot import run_snapshot

    for key in _SIZED:  # as a new process starts: no sizing left by an earlier run of this session
        spark.conf.unset(key)

    for i in range(40):
        after = {"id": i, "name": f"n{i}"}
        source = {"db": "db", "table": "t", "ts_ms": 1_000 + i, "file": "binlog.000001", "pos": i, "row": 0}
        write_jsonl(tmp_path / "in" / f"part-{i:02d}.json", [{"op": "c", "after": after, "source": source}])
    context = spark.sparkContext
    group = f"many-files-{tmp_path.name}"  # this run's jobs only, not an earlier variant's
    context.setJobGroup(group, group)
    try:
        (spec,) = debezium_specs(tmp_path / "in", tmp_path / "out", 10_000, **options)
        metrics = (run_history if options.get("history") else run_snapshot)(spark, spec)
    finally:
        context._jsc.clearJobGroup()
    assert metrics["rows"] == 40
    jobs = context._jsc.sc().statusStore().jobsList(None)
    listings = [
        jobs.apply(i).numTasks()
        for i in range(jobs.size())
        if jobs.apply(i).jobGroup().isDefined()
        and jobs.apply(i).jobGroup().get() == group
        and str(jobs.apply(i).name()).startswith("text at")
    ]
    assert listings == [4]

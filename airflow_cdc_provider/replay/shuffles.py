"""Shuffle sizing: how many partitions a run's shuffles and reads take, from the landed input.

Takes the landed files a run reads; sets Spark's shuffle partitions, minimum read tasks and
listing tasks for the session (unless the user set them). Called before the first read: by the
fold step, by a run that keeps its events (``read.read_input``, with state) and by several AS OFs
before their one scan.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from airflow_cdc_provider.spark.reader import LandedFile
from airflow_cdc_provider.spark.settings import chosen_settings, cores, set_sized

_INPUT_BYTES_PER_SHUFFLE_PARTITION = 64 * 2**20
_MAX_SHUFFLE_PARTITIONS = 4000


def shuffle_partitions(input_bytes: int, cores: int) -> int:
    """One shuffle partition per 64 MiB of landed input, at least one per core, at most 4000."""
    wanted = -(-input_bytes // _INPUT_BYTES_PER_SHUFFLE_PARTITION)
    return max(cores, min(wanted, _MAX_SHUFFLE_PARTITIONS))


# Input tasks per core: two waves of reads even out files of unequal size (with one task per core
# the slowest file decides; with 3 tasks on 2 cores one core idles for a third of the scan).
_READ_TASKS_PER_CORE = 2


# Spark lists more than 32 paths in a Spark job of one task per path (up to 10,000); the job's
# tasks are tiny, so their number is its cost: 279 local files took 1.9 to 2.3 s, 0.3 to 0.45 s in 4 tasks.
_LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def size_shuffles(spark: SparkSession, files: list[LandedFile]) -> None:
    """Shuffle partitions sized to the input, not Spark's fixed 200, at least two read tasks per
    core, and a listing of many files in two tasks per core rather than one per file.

    Settings the user chose (``spark.sql.shuffle.partitions``, ``spark.sql.files.minPartitionNum``,
    ``spark.sql.sources.parallelPartitionDiscovery.parallelism``) are kept. 1M Debezium events in 8
    files: 3 read tasks on 2 cores took 20.7 s, 4 tasks 16.7 s.
    """
    chosen = chosen_settings(
        spark, ["spark.sql.shuffle.partitions", "spark.sql.files.minPartitionNum", _LISTING_PARALLELISM]
    )
    parallelism = cores(spark)
    if "spark.sql.shuffle.partitions" not in chosen:
        count = shuffle_partitions(sum(f.size for f in files), parallelism)
        set_sized(spark, "spark.sql.shuffle.partitions", str(count))
    if "spark.sql.files.minPartitionNum" not in chosen:
        set_sized(spark, "spark.sql.files.minPartitionNum", str(_READ_TASKS_PER_CORE * parallelism))
    if _LISTING_PARALLELISM not in chosen:
        set_sized(spark, _LISTING_PARALLELISM, str(_READ_TASKS_PER_CORE * parallelism))

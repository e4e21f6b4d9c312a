"""What the running session says about itself: settings the user chose, and its cores.

Classic sessions answer from the driver's SparkConf (one JVM call); Spark Connect sessions from
the server's runtime configuration, and their cores from one small job when the master is not local.
"""

from __future__ import annotations

import re

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_cdc_provider.spark.session import is_connect

_LOCAL_MASTER = re.compile(r"^local(?:-cluster)?\[(\d+|\*)")
# What this process set on each Spark Connect session, so a later run does not take it for the user's.
_SET_HERE: dict[tuple[str, str], str] = {}


def chosen_settings(spark: SparkSession, keys: list[str]) -> set[str]:
    """Those of ``keys`` the user set (spark-submit ``--conf``, the server's or the session's settings)."""
    if not is_connect(spark):
        conf = spark.sparkContext._jsc.getConf()  # the JVM's copy: one call, not one per setting
        return {key for key in keys if conf.contains(key)}
    session = spark.session_id
    return {
        key
        for key in keys
        if (value := spark.conf.get(key, None)) is not None and value != _SET_HERE.get((session, key))
    }


def set_sized(spark: SparkSession, key: str, value: str) -> None:
    """Set a setting the job sizes itself (one the user did not choose)."""
    spark.conf.set(key, value)
    if is_connect(spark):
        _SET_HERE[(spark.session_id, key)] = value


def cores(spark: SparkSession) -> int:
    """The parallelism Spark gives a read or a shuffle by default (its ``defaultParallelism``)."""
    if not is_connect(spark):
        return spark.sparkContext.defaultParallelism
    chosen = spark.conf.get("spark.default.parallelism", None)
    if chosen:
        return int(chosen)
    match = _LOCAL_MASTER.match(spark.conf.get("spark.master", "") or "")
    if match and match.group(1) != "*":
        return int(match.group(1))
    # A range without a partition count is split into defaultParallelism partitions.
    return spark.range(0, 1 << 20).select(F.spark_partition_id().alias("p")).distinct().count()

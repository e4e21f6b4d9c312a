"""A history: every version of every row up to ``--until``, written as one table per source table.

Takes a ``SnapshotSpec`` (its AS OF is ``--until``); gives the history in its output folder and
returns its metrics. The events are decoded once and kept: the fold at ``--until``
(``runs.snapshot.rebuild``) gives the metrics, the quarantine and the current rows, and
``versions.row_versions`` reads the same events again. See docs/design.md, "History".
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from airflow_cdc_provider.replay.output import OutputTarget
from airflow_cdc_provider.replay.read import SKIPPED_PARTITION, decode_function, read_all
from airflow_cdc_provider.replay.runs.snapshot import rebuild
from airflow_cdc_provider.replay.spec import SnapshotSpec
from airflow_cdc_provider.spark import progress
from airflow_cdc_provider.spark.reader import list_landed_files


def run_history(spark: SparkSession, spec: SnapshotSpec) -> dict:
    """Write every version of every row up to ``spec.as_of_ms`` (``--until``); return the metrics.

    The events are decoded once and kept: the fold at ``--until`` gives the metrics, the
    quarantine and the current rows, and ``versions.row_versions`` reads the same events again.
    """
    target = OutputTarget(spark, spec.output)
    target.refuse_overlap(spec.inputs)
    with target.exclusive():
        listed, after = spec.partitions.split(list_landed_files(spark, list(spec.inputs)), spec.as_of_ms)
        progress.phase("listing", files=listed, unread=after)
        decode = decode_function(spark, spec)
        read = read_all(spark, spec, decode, listed, {SKIPPED_PARTITION: after}, None, None)
        try:
            return rebuild(spark, spec, target, read, history=True)
        finally:
            read.events.unpersist()

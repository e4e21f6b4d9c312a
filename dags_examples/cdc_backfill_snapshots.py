"""Backfill: one run per day over a date range, each rebuilding the snapshot as of the end of its day.

The DAG is ``@daily`` with ``catchup=True`` between ``start_date`` and ``end_date``, so the scheduler
creates one run per midnight of the range, and each rebuilds the day that ends at its midnight
(or run ``airflow backfill create --dag-id cdc_backfill_snapshots --from-date 2024-09-02
--to-date 2024-09-03`` for any range). Every run reads the whole landing but rebuilds only its own
day: AS OF is its data interval end, so later changes are counted and not applied, and it writes
``<snapshot_root>/dt=<its day>``. Re-running one day replaces that day's snapshot atomically and
leaves the others alone.

Each day starts from the day before (``base_path``, with ``keep_state`` so that the next day can
start from this one): only files the previous snapshot did not cover are read, and only events after
its AS OF applied. The first day, a missing previous day, or late events that landed before the
previous AS OF make a full rebuild instead; the metrics' ``mode`` and ``incremental`` say which.
Partitions after AS OF (plus an hour of lateness) are not read at all.

The sensor uses the ``partition`` strategy in ``reschedule`` mode: a day is complete once the sink
has started the next day's partition, and while it waits the sensor frees its worker slot.

Runs as is on the bundled sample, whose finished days are 2024-09-01 and 2024-09-02.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_cdc_provider.operators.snapshot import CdcSnapshotOperator
from airflow_cdc_provider.sample_data import SAMPLE_LANDING
from airflow_cdc_provider.sensors.landed_files import CdcLandedFilesSensor

with DAG(
    dag_id="cdc_backfill_snapshots",
    description="One snapshot per day over a date range, each as of the end of its day",
    schedule="@daily",
    # Runs at 2024-09-02T00:00 and 09-03T00:00 rebuild the sample's finished days 09-01 and 09-02.
    start_date=pendulum.datetime(2024, 9, 2, tz="UTC"),
    end_date=pendulum.datetime(2024, 9, 3, tz="UTC"),
    catchup=True,
    max_active_runs=1,  # one Spark application at a time; raise it when the cluster has room
    tags=["cdc", "example"],
    params={
        "landing": Param(
            SAMPLE_LANDING, type="string", description="Landing root (dt=YYYY-MM-DD partitions)"
        ),
        "snapshot_root": Param(
            "/tmp/airflow-cdc-provider/backfill", type="string", description="Snapshots go to <root>/dt=<day>"
        ),
    },
):
    wait_for_next_partition = CdcLandedFilesSensor(
        task_id="wait_for_next_partition",
        path="{{ params.landing }}",
        strategy="partition",
        mode="reschedule",
        poke_interval=10 * 60,
        timeout=24 * 3600,
    )

    rebuild_day = CdcSnapshotOperator(
        task_id="rebuild_day",
        source_format="debezium-json",
        input_paths="{{ params.landing }}",
        output_path="{{ params.snapshot_root }}/dt={{ macros.ds_add(ds, -1) }}",  # the day that just ended
        base_path="{{ params.snapshot_root }}/dt={{ macros.ds_add(ds, -2) }}",  # the day before it
        keep_state=True,
        key_columns=["id"],
    )

    wait_for_next_partition >> rebuild_day

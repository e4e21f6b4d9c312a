"""Backfill: one snapshot per day over a date range, all rebuilt by one task from one scan.

Trigger it with the range in the run's params (``first_day``, ``last_day``; the defaults are the
bundled sample's finished days, 2024-09-01 and 2024-09-02). ``day_ends`` turns the range into one
AS OF per day, the midnight (UTC) that ends it, and ``rebuild_range`` passes that list to one
``CdcSnapshotOperator``: the job reads the landing once and writes one snapshot per AS OF, each
into ``<snapshot_root>/as_of=<date of its AS OF>`` (so ``as_of=2024-09-02`` holds the tables as they
stood at 2024-09-02T00:00Z, the end of 2024-09-01), each atomically and with its own
``_cdc_metrics.json``, exactly as a run of that AS OF alone would write it. The task's XCom is the
list of those metrics, and its asset event lists every snapshot it wrote.

Re-running the DAG for a range replaces those days' snapshots and leaves the others alone. One task
costs far less than a run per day: the landing is listed and decoded once, not once per day (see
docs/design.md, "Several AS OFs", for figures).

The sensor uses the ``partition`` strategy in ``reschedule`` mode: the range is complete once the
sink has started the partition of the day after ``last_day``; while it waits it frees its slot.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_cdc_provider.operators.snapshot import CdcSnapshotOperator
from airflow_cdc_provider.sample_data import SAMPLE_LANDING
from airflow_cdc_provider.sensors.landed_files import CdcLandedFilesSensor

with DAG(
    dag_id="cdc_backfill_snapshots",
    description="One snapshot per day over a date range, rebuilt by one task from one scan",
    schedule=None,
    start_date=pendulum.datetime(2024, 9, 1, tz="UTC"),
    catchup=False,
    tags=["cdc", "example"],
    params={
        "landing": Param(
            SAMPLE_LANDING, type="string", description="Landing root (dt=YYYY-MM-DD partitions)"
        ),
        "snapshot_root": Param(
            "/tmp/airflow-cdc-provider/backfill",
            type="string",
            description="Snapshots go to <root>/as_of=<date of the midnight ending each day>",
        ),
        "first_day": Param("2024-09-01", type="string", format="date", description="First day to rebuild"),
        "last_day": Param("2024-09-02", type="string", format="date", description="Last day to rebuild"),
    },
):

    @task
    def day_ends(first_day: str, last_day: str) -> list[str]:
        """The midnight (UTC) ending each day from ``first_day`` to ``last_day``: one AS OF per day."""
        first, last = date.fromisoformat(first_day), date.fromisoformat(last_day)
        if last < first:
            raise ValueError(f"last_day {last_day} is before first_day {first_day}")
        days = (first + timedelta(days=n) for n in range((last - first).days + 1))
        return [
            datetime.combine(d + timedelta(days=1), datetime.min.time(), timezone.utc).isoformat()
            for d in days
        ]

    wait_for_next_partition = CdcLandedFilesSensor(
        task_id="wait_for_next_partition",
        path="{{ params.landing }}",
        as_of="{{ macros.ds_add(params.last_day, 1) }}T00:00:00+00:00",
        strategy="partition",
        mode="reschedule",
        poke_interval=10 * 60,
        timeout=24 * 3600,
    )

    rebuild_range = CdcSnapshotOperator(
        task_id="rebuild_range",
        source_format="debezium-json",
        input_paths="{{ params.landing }}",
        as_of=day_ends("{{ params.first_day }}", "{{ params.last_day }}"),
        output_path="{{ params.snapshot_root }}/as_of={as_of:%Y-%m-%d}",
        key_columns=["id"],
    )

    wait_for_next_partition >> rebuild_range

"""Daily snapshot: wait until the day has landed, extend yesterday's snapshot to its end, report row counts.

The run at midnight UTC covers the day that just ended: AS OF is the run's data interval end
(with ``@daily``, the run's logical date: that midnight). The sensor waits, in the triggerer
(``deferrable=True``), for the ``_SUCCESS`` marker the sink writes into the day's ``dt=YYYY-MM-DD``
partition. The snapshot is then written as of the same instant into ``<snapshot_root>/dt=<day>``.
The last task reads the row counts, and how the snapshot was made, from the snapshot task's XCom
(the job's metrics object).

Each day starts from the day before: ``base_path`` is ``<snapshot_root>/dt=<day before>``, the
previous run's output, and the job reads only the landed files that base did not cover.
``keep_state=True`` writes ``_cdc_state/`` beside the snapshot so that the next day can start from
this one. When the base cannot be used, the job rebuilds the day from the whole landing instead;
the snapshot is the same either way. That happens on the first run (no base yet), after a gap in
the days (a day that did not run or failed leaves no base folder), when the base was written
without state, when an option that changes the result (``key_columns``, ``tables``, ...) differs
from the base's, or when the new files hold events the base cannot be extended with (e.g. a late
DDL or truncate). A full rebuild writes state too, so the day after it is incremental again. The
metrics say which it was: ``mode`` is ``"incremental"`` or ``"full"``, and ``incremental.reason``
says why a run fell back; the report task returns both.

Runs as is on the bundled sample, whose finished days are 2024-09-01 and 2024-09-02, with a
``spark_default`` connection, e.g. ``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type":"spark","host":"local[*]"}'``,
and a triggerer: ``airflow dags test cdc_daily_snapshot 2024-09-02`` rebuilds 2024-09-01 in full
(there is no base), then ``airflow dags test cdc_daily_snapshot 2024-09-03`` extends it to
2024-09-02. Parsing this file does no I/O, looks up no connection and queries no database.

DAG params:
- ``landing``: the landing root (default: the bundled sample).
- ``snapshot_root``: where the daily snapshots go, one ``dt=YYYY-MM-DD`` folder per day; keep at
  least the latest day's folder, the next run starts from it.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, Asset, Param, task

from airflow_cdc_provider.operators.snapshot import CdcSnapshotOperator
from airflow_cdc_provider.sample_data import SAMPLE_LANDING
from airflow_cdc_provider.sensors.landed_files import CdcLandedFilesSensor

# Downstream DAGs can be scheduled on this; each event's extra holds the run's row counts.
DAILY_SNAPSHOTS = Asset("cdc_sample_daily_snapshots")

with DAG(
    dag_id="cdc_daily_snapshot",
    description="Wait for the day's landing, extend yesterday's snapshot to its end, report row counts",
    schedule="@daily",
    start_date=pendulum.datetime(2024, 9, 2, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["cdc", "example"],
    params={
        "landing": Param(
            SAMPLE_LANDING, type="string", description="Landing root (dt=YYYY-MM-DD partitions)"
        ),
        "snapshot_root": Param(
            "/tmp/airflow-cdc-provider/daily",
            type="string",
            description="Snapshots go to <root>/dt=<day>; each run starts from the previous day's",
        ),
    },
):
    wait_for_landing = CdcLandedFilesSensor(
        task_id="wait_for_landing",
        path="{{ params.landing }}",
        strategy="marker",  # the day's dt= partition holds _SUCCESS; as_of: the data interval end
        deferrable=True,
        poke_interval=5 * 60,
        timeout=12 * 3600,
    )

    rebuild_snapshot = CdcSnapshotOperator(
        task_id="rebuild_snapshot",
        source_format="debezium-json",
        input_paths="{{ params.landing }}",
        output_path="{{ params.snapshot_root }}/dt={{ macros.ds_add(ds, -1) }}",  # the day that just ended
        base_path="{{ params.snapshot_root }}/dt={{ macros.ds_add(ds, -2) }}",  # the day before it
        keep_state=True,  # the next day starts from this snapshot
        key_columns=["id"],
        output_asset=DAILY_SNAPSHOTS,
    )

    @task
    def report_row_counts(metrics: dict[str, Any]) -> dict[str, Any]:
        """Use the row counts (here: log them and pass them on; e.g. alert on an empty table)."""
        counts = {name: info["rows"] for name, info in metrics["tables"].items()}
        incremental = metrics.get("incremental") or {}
        if metrics["mode"] == "incremental":
            reason = None
            how = f"incremental from {incremental['base']}"
        else:  # why it did not start from the base (e.g. the first run: there is none yet)
            reason = incremental.get("reason")
            how = f"full rebuild ({reason})"
        print(f"snapshot as of {metrics['as_of']}: {metrics['rows']} rows {counts}, {how}")
        return {
            "as_of": metrics["as_of"],
            "rows": metrics["rows"],
            "tables": counts,
            "mode": metrics["mode"],
            "reason": reason,
        }

    wait_for_landing >> rebuild_snapshot
    report_row_counts(rebuild_snapshot.output)

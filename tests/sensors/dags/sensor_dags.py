"""DAGs the sensor tests run with ``dag.test()``: one per way of waiting, inputs from the run's conf.

Short intervals and timeouts keep each run to a few seconds; the timeout is 4 s everywhere.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG

from tests.dag_callbacks import record_exception

from airflow_cdc_provider.sensors.landed_files import CdcLandedFilesSensor

TIMEOUT_SECONDS = 4
PARAMS = {"path": "", "as_of": "", "report_file": ""}


def _sensor_dag(dag_id: str, **sensor_kwargs: Any) -> None:
    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=pendulum.datetime(2024, 9, 1, tz="UTC"),
        catchup=False,
        params=PARAMS,
    ):
        CdcLandedFilesSensor(
            task_id="wait",
            path="{{ params.path }}",
            as_of="{{ params.as_of }}",
            poke_interval=0.5,
            timeout=TIMEOUT_SECONDS,
            on_failure_callback=record_exception,
            **sensor_kwargs,
        )


_sensor_dag("cdc_sensor_poke", mode="poke")
_sensor_dag("cdc_sensor_reschedule", mode="reschedule")
_sensor_dag("cdc_sensor_deferrable", deferrable=True)
_sensor_dag(
    "cdc_sensor_event_time_deferrable",
    deferrable=True,
    strategy="event_time",
    source_format="debezium-json",
    allowed_lateness=60,
)

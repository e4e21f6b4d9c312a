"""The DAG the standalone-cluster test runs: the snapshot task, submitted through ``spark_standalone``.

The test's cluster fixture defines that connection (``spark://127.0.0.1:7077``); everything else
comes from the run's conf.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from tests.dag_callbacks import record_exception

from airflow_cdc_provider.operators.snapshot import CdcSnapshotOperator

with DAG(
    dag_id="cdc_standalone_snapshot",
    schedule=None,
    start_date=pendulum.datetime(2024, 9, 1, tz="UTC"),
    catchup=False,
    params={"inputs": "", "output": "", "as_of": "", "report_file": ""},
):
    CdcSnapshotOperator(
        task_id="snapshot",
        source_format="debezium-json",
        input_paths="{{ params.inputs }}",
        output_path="{{ params.output }}",
        as_of="{{ params.as_of }}",
        key_columns=["id"],
        conn_id="spark_standalone",
        # The worker offers 1 GiB; leave the executor room for its overhead.
        spark_conf={"spark.executor.memory": "768m"},
        on_failure_callback=record_exception,
    )

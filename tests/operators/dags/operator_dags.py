"""DAGs the operator tests run with ``dag.test()``; every input comes from the run's conf (params).

They live in the test DAGs folder because ``dag.test()`` in Airflow 3 needs the DAG parsed and
serialized from a DAG bundle. ``render_template_as_native_obj`` keeps list params as lists.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from tests.dag_callbacks import record_exception, record_lineage

from airflow_cdc_provider.operators.history import CdcHistoryOperator
from airflow_cdc_provider.operators.snapshot import CdcSnapshotOperator

PARAMS = {
    "inputs": [],
    "output": "",
    "as_of": "",
    "key": [],
    "tables": [],
    "report_file": "",
    "lineage_file": "",
}


def _test_dag(dag_id: str) -> DAG:
    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=pendulum.datetime(2024, 9, 1, tz="UTC"),
        catchup=False,
        params=PARAMS,
        render_template_as_native_obj=True,
    )


def _snapshot_task(conn_id: str) -> CdcSnapshotOperator:
    return CdcSnapshotOperator(
        task_id="snapshot",
        source_format="debezium-json",
        input_paths="{{ params.inputs }}",
        output_path="{{ params.output }}",
        as_of="{{ params.as_of }}",
        key_columns="{{ params.key }}",
        tables="{{ params.tables }}",
        conn_id=conn_id,
        on_failure_callback=record_exception,
        on_success_callback=record_lineage,
    )


with _test_dag("cdc_operator_test"):
    _snapshot_task("spark_default")

with _test_dag("cdc_operator_missing_conn"):
    _snapshot_task("cdc_test_connection_that_does_not_exist")

with _test_dag("cdc_history_test"):
    CdcHistoryOperator(
        task_id="history",
        source_format="debezium-json",
        input_paths="{{ params.inputs }}",
        output_path="{{ params.output }}",
        until="{{ params.as_of }}",
        key_columns="{{ params.key }}",
        on_failure_callback=record_exception,
    )

"""The snapshot job submitted through Airflow to a real Spark standalone cluster.

The run is the daily example's request for 2024-09-02 (every table, as of 2024-09-03T00:00Z), which
``tests/example_dags/test_example_dags.py`` runs in local mode: both must give exactly the sample's documented
rows and metrics.
"""

from __future__ import annotations

import json

import pytest

from tests import airflow_env
from tests.cluster.conftest import StandaloneCluster
from tests.sample_expectations import EXPECTED, assert_metrics_match

from airflow_cdc_provider.sample_data import SAMPLE_LANDING

pytestmark = pytest.mark.slow

CONNECTION = "AIRFLOW_CONN_SPARK_STANDALONE"


@pytest.fixture
def standalone_connection(standalone_cluster: StandaloneCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """``spark_standalone`` as a user would write it: host and port of the master."""
    host, port = standalone_cluster.master_url.rsplit(":", 1)
    monkeypatch.setenv(CONNECTION, json.dumps({"conn_type": "spark", "host": host, "port": int(port)}))


def test_snapshot_on_a_standalone_cluster_matches_local_mode(
    airflow_db, standalone_cluster, standalone_connection, tmp_path
):
    expected = EXPECTED["daily"]["2024-09-02"]
    output = tmp_path / "snapshot"
    dag = airflow_env.load_dags(airflow_env.CLUSTER_TEST_DAGS).get_dag("cdc_standalone_snapshot")
    dag_run = dag.test(
        run_conf={
            "inputs": SAMPLE_LANDING,
            "output": str(output),
            "as_of": expected["as_of"],
            "report_file": str(tmp_path / "task_exception.txt"),
        }
    )

    assert airflow_env.task_states(dag_run) == {"snapshot": "success"}
    assert_metrics_match(airflow_env.xcom_return_value(dag_run, "snapshot"), expected, output)

    # It ran on the cluster: the master lists it as a finished application, with executors from our worker.
    state = standalone_cluster.state()
    print("STATE", json.dumps({k: v for k, v in state.items() if "app" in k}))
    assert [app["name"] for app in state["completedapps"]] == ["cdc-replay-cdc_standalone_snapshot.snapshot"]
    assert state["completedapps"][0]["state"] == "FINISHED"
    executor_dirs = list((standalone_cluster.work_dir / state["completedapps"][0]["id"]).iterdir())
    assert executor_dirs, "no executor ran on the worker"

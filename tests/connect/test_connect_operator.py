"""The operators with a ``spark_connect`` connection: ``dag.test()`` of an example DAG over Spark Connect.

The DAG runs in a child process (a Connect session switches PySpark's functions to their Connect
forms for the whole process) in which any route to a driver JVM raises: the task runs the job in
its own process, with no spark-submit and no JVM. Its XCom and rows must be the documented ones,
the same as under spark-submit (``tests/example_dags``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from urllib.parse import urlsplit

import pytest

from tests import airflow_env
from tests.sample_expectations import EXPECTED, assert_metrics_match, row_counts

from airflow_cdc_provider.sample_data import SAMPLE_AS_OF, SAMPLE_TABLE

_DAG_RUN = textwrap.dedent(
    """
    import json, sys
    from tests import airflow_env
    from tests.connect.connect_runner import close_the_jvm

    close_the_jvm()
    dag = airflow_env.load_dags(airflow_env.EXAMPLE_DAGS).get_dag("cdc_point_in_time_snapshot")
    run = dag.test(run_conf=json.loads(sys.argv[1]))
    result = {
        "states": airflow_env.task_states(run),
        "metrics": airflow_env.xcom_return_value(run, "rebuild_as_of"),
        "report": airflow_env.xcom_return_value(run, "report_row_counts"),
    }
    open(sys.argv[2], "w").write(json.dumps(result))
    """
)


def connect_connection(url: str) -> str:
    """The Airflow connection (JSON form) of a Connect server, as a user would define it."""
    where = urlsplit(url)
    return json.dumps({"conn_type": "spark_connect", "host": where.hostname, "port": where.port})


@pytest.mark.slow
def test_point_in_time_dag_runs_over_spark_connect(airflow_db, connect_url, tmp_path):
    output = tmp_path / "snapshot"
    results = tmp_path / "results.json"
    conf = {"table": SAMPLE_TABLE, "as_of": SAMPLE_AS_OF, "output": str(output)}
    env = {**os.environ, "AIRFLOW_CONN_SPARK_DEFAULT": connect_connection(connect_url)}
    done = subprocess.run(
        [sys.executable, "-c", _DAG_RUN, json.dumps(conf), str(results)],
        cwd=airflow_env.REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(results.read_text())
    assert found["states"] == {
        "choose_output": "success",
        "rebuild_as_of": "success",
        "report_row_counts": "success",
    }, done.stderr[-4000:]
    expected = EXPECTED["one_table"]
    assert_metrics_match(found["metrics"], expected, output)
    assert found["report"] == {
        "as_of": SAMPLE_AS_OF,
        "output": f"file:{output}",
        "tables": row_counts(expected),
    }
    # The task ran the job itself: no spark-submit, and the task log shows the job's progress.
    assert "spark-submit" not in done.stdout + done.stderr
    assert "Running debezium-json over Spark Connect" in done.stdout + done.stderr

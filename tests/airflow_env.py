"""Airflow set-up for tests that run DAGs with ``dag.test()``.

Import this module before anything imports ``airflow``: Airflow reads ``AIRFLOW_HOME`` and its
configuration once, at import. It points Airflow at a throw-away home with SQLite, no example
DAGs, a DAGs folder that links the repository's ``dags_examples/`` and the test DAG folders
(operators, sensors, cluster), and a ``spark_default`` connection for ``local[2]``. ``migrate_once()`` runs ``airflow db
migrate`` the first time a test needs the database.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_DAGS = REPO / "dags_examples"
OPERATOR_TEST_DAGS = REPO / "tests" / "operators" / "dags"
SENSOR_TEST_DAGS = REPO / "tests" / "sensors" / "dags"
CLUSTER_TEST_DAGS = REPO / "tests" / "cluster" / "dags"
SPARK_LOCAL_CONN = '{"conn_type":"spark","host":"local[2]"}'

if "airflow" in sys.modules and not os.environ.get("CDC_TEST_AIRFLOW_HOME"):
    raise RuntimeError("tests/airflow_env.py must be imported before airflow (it sets AIRFLOW_HOME)")

if not os.environ.get("CDC_TEST_AIRFLOW_HOME"):
    _home = Path(tempfile.mkdtemp(prefix="cdc-airflow-home-"))
    atexit.register(shutil.rmtree, _home, True)
    (_home / "dags").mkdir()
    (_home / "dags" / "examples").symlink_to(EXAMPLE_DAGS, target_is_directory=True)
    for _link, _folder in (
        ("operator_tests", OPERATOR_TEST_DAGS),
        ("sensor_tests", SENSOR_TEST_DAGS),
        ("cluster_tests", CLUSTER_TEST_DAGS),
    ):
        (_home / "dags" / _link).symlink_to(_folder, target_is_directory=True)
    os.environ.update(
        {
            "CDC_TEST_AIRFLOW_HOME": str(_home),
            "AIRFLOW_HOME": str(_home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(_home / "dags"),
            "AIRFLOW_CONN_SPARK_DEFAULT": SPARK_LOCAL_CONN,
        }
    )

AIRFLOW_HOME = Path(os.environ["CDC_TEST_AIRFLOW_HOME"])
_migrated = False


def migrate_once() -> None:
    """``airflow db migrate`` on the test home's SQLite database, once per test session."""
    global _migrated
    if _migrated:
        return
    result = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    _migrated = True


def load_dags(folder: Path) -> Any:
    """Parse a folder the way the DAG processor does; returns the DagBag."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(folder))


def xcom_return_value(dag_run: Any, task_id: str) -> Any:
    """The ``return_value`` XCom a task of ``dag_run`` pushed (None when it pushed none)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel.value)
            .filter(
                XComModel.dag_id == dag_run.dag_id,
                XComModel.run_id == dag_run.run_id,
                XComModel.task_id == task_id,
                XComModel.key == "return_value",
            )
            .one_or_none()
        )
    return None if row is None else row[0]


def task_states(dag_run: Any) -> dict[str, str]:
    return {ti.task_id: str(getattr(ti.state, "value", ti.state)) for ti in dag_run.get_task_instances()}


def asset_event_extras(uri: str, run_id: str | None = None) -> list[dict[str, Any]]:
    """The ``extra`` of every event of the asset ``uri`` (of one run when ``run_id`` is given), oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = session.query(AssetEvent.extra).join(AssetModel, AssetModel.id == AssetEvent.asset_id)
        query = query.filter(AssetModel.uri == uri)
        if run_id is not None:
            query = query.filter(AssetEvent.source_run_id == run_id)
        return [row[0] for row in query.order_by(AssetEvent.id).all()]

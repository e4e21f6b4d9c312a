"""The example DAGs parse cleanly and run end to end on the bundled sample with ``dag.test()``.

Every snapshot task really runs spark-submit (local[2]); the figures it must give are the sample's
documented ones (``tests/sample_expectations.py``).
"""

from __future__ import annotations

import subprocess
import sys

import pendulum
import pytest

from tests import airflow_env
from tests.sample_expectations import EXPECTED, assert_metrics_match, row_counts

from airflow_cdc_provider.sample_data import SAMPLE_AS_OF, SAMPLE_LANDING, SAMPLE_TABLE

EXAMPLE_DAG_IDS = ["cdc_backfill_snapshots", "cdc_daily_snapshot", "cdc_point_in_time_snapshot"]


def example_dag(dag_id: str):
    return airflow_env.load_dags(airflow_env.EXAMPLE_DAGS).get_dag(dag_id)


def test_bundled_sample_is_what_the_generator_makes():
    script = airflow_env.REPO / "scripts" / "make_sample_data.py"
    result = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_example_dags_parse_without_errors_lookups_or_queries(airflow_db, monkeypatch):
    from airflow import settings
    from airflow.sdk import Variable
    from airflow.sdk.definitions.connection import Connection
    from sqlalchemy import event

    def forbidden(*args, **kwargs):
        raise AssertionError(f"looked up {args} while parsing a DAG file")

    monkeypatch.setattr(Connection, "get", forbidden)
    monkeypatch.setattr(Variable, "get", forbidden)
    statements: list[str] = []

    def record(conn, cursor, statement, *args):
        statements.append(statement)

    event.listen(settings.engine, "before_cursor_execute", record)
    try:
        bag = airflow_env.load_dags(airflow_env.EXAMPLE_DAGS)
    finally:
        event.remove(settings.engine, "before_cursor_execute", record)

    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == EXAMPLE_DAG_IDS
    assert statements == []


@pytest.mark.slow
def test_daily_dag_waits_in_the_triggerer_then_rebuilds_its_day(airflow_db, tmp_path, caplog):
    # The run at 2024-09-03T00:00Z rebuilds the day 2024-09-02, as of its end.
    dag_run = example_dag("cdc_daily_snapshot").test(
        logical_date=pendulum.datetime(2024, 9, 3, tz="UTC"), run_conf={"snapshot_root": str(tmp_path)}
    )

    assert airflow_env.task_states(dag_run) == {
        "wait_for_landing": "success",
        "rebuild_snapshot": "success",
        "report_row_counts": "success",
    }
    assert airflow_env.xcom_return_value(dag_run, "wait_for_landing") == {
        "path": SAMPLE_LANDING,
        "strategy": "marker",
        "as_of": "2024-09-03T00:00:00+00:00",
        "seen": f"{SAMPLE_LANDING}/dt=2024-09-02/_SUCCESS exists",
    }
    # It deferred: dag.test() ran CdcLandedFilesTrigger in line and resumed the sensor from its event.
    assert "[DAG TEST] running trigger in line" in caplog.messages

    expected = EXPECTED["daily"]["2024-09-02"]
    metrics = airflow_env.xcom_return_value(dag_run, "rebuild_snapshot")
    assert_metrics_match(metrics, expected, tmp_path / "dt=2024-09-02")
    assert airflow_env.xcom_return_value(dag_run, "report_row_counts") == {
        "as_of": "2024-09-03T00:00:00+00:00",
        "rows": expected["rows"],
        "tables": row_counts(expected),
    }
    assert airflow_env.asset_event_extras("cdc_sample_daily_snapshots")[-1] == {
        "output": f"file:{tmp_path}/dt=2024-09-02",
        "as_of": "2024-09-03T00:00:00+00:00",
        "rows": expected["rows"],
        "tables": row_counts(expected),
    }


@pytest.mark.slow
def test_backfill_dag_rebuilds_every_day_of_its_range_in_one_task(airflow_db, tmp_path):
    dag_run = example_dag("cdc_backfill_snapshots").test(run_conf={"snapshot_root": str(tmp_path)})

    assert airflow_env.task_states(dag_run) == {
        "day_ends": "success",
        "wait_for_next_partition": "success",
        "rebuild_range": "success",
    }
    assert airflow_env.xcom_return_value(dag_run, "wait_for_next_partition")["seen"] == (
        "partition dt=2024-09-03 exists"
    )
    written = airflow_env.xcom_return_value(dag_run, "rebuild_range")
    folders = {"2024-09-01": "as_of=2024-09-02", "2024-09-02": "as_of=2024-09-03"}
    assert len(written) == 2
    for metrics, (day, folder) in zip(written, folders.items()):
        assert_metrics_match(metrics, EXPECTED["daily"][day], tmp_path / folder)
        assert metrics["mode"] == "full"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(folders.values())
    (event,) = airflow_env.asset_event_extras(
        "x-cdc-snapshot://cdc_backfill_snapshots/rebuild_range", dag_run.run_id
    )
    assert event == {
        "snapshots": [
            {
                "output": m["output"],
                "as_of": m["as_of"],
                "rows": m["rows"],
                "tables": {t: info["rows"] for t, info in m["tables"].items()},
            }
            for m in written
        ]
    }
    assert [s["as_of"] for s in event["snapshots"]] == [
        "2024-09-02T00:00:00+00:00",
        "2024-09-03T00:00:00+00:00",
    ]


@pytest.mark.slow
def test_point_in_time_dag_rebuilds_the_table_and_instant_from_its_params(airflow_db, tmp_path):
    output = tmp_path / "snapshot"
    dag_run = example_dag("cdc_point_in_time_snapshot").test(
        run_conf={"table": SAMPLE_TABLE, "as_of": SAMPLE_AS_OF, "output": str(output)}
    )

    assert airflow_env.task_states(dag_run) == {
        "choose_output": "success",
        "rebuild_as_of": "success",
        "report_row_counts": "success",
    }
    expected = EXPECTED["one_table"]
    assert_metrics_match(airflow_env.xcom_return_value(dag_run, "rebuild_as_of"), expected, output)
    assert list(expected["tables"]) == [SAMPLE_TABLE]
    assert airflow_env.xcom_return_value(dag_run, "report_row_counts") == {
        "as_of": SAMPLE_AS_OF,
        "output": f"file:{output}",
        "tables": row_counts(expected),
    }

"""The example DAGs parse cleanly and run end to end on the bundled sample with ``dag.test()``.

Every snapshot task really runs spark-submit (local[2]); the figures it must give are the sample's
documented ones (``tests/sample_expectations.py``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pendulum
import pytest

from tests import airflow_env
from tests.sample_expectations import EXPECTED, assert_metrics_match, row_counts

from airflow_cdc_provider.contract.metrics import STATE_DIR, STATE_FILE
from airflow_cdc_provider.replay.read import SKIPPED_IN_BASE
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


@pytest.fixture
def daily_dag(airflow_db):
    """``cdc_daily_snapshot``, parsed in the test's set-up.

    The first parse in a session imports Airflow, which configures logging; done during the test's
    call, ``caplog`` then saw no record (the daily test failed when it ran first, e.g. ``-k daily``).
    Parsed here, Airflow's logging is set up before ``caplog`` attaches for the call.
    """
    return example_dag("cdc_daily_snapshot")


def run_daily_dag(dag, logical_date: pendulum.DateTime, snapshot_root: Path):
    """``dag`` (the daily DAG) for one logical date with ``dag.test()``; every task must succeed."""
    dag_run = dag.test(logical_date=logical_date, run_conf={"snapshot_root": str(snapshot_root)})
    assert airflow_env.task_states(dag_run) == {
        "wait_for_landing": "success",
        "rebuild_snapshot": "success",
        "report_row_counts": "success",
    }
    return dag_run


def no_base_reason(base: Path) -> str:
    return f"the base {base} has no {STATE_DIR}/{STATE_FILE} (missing, or written without --keep-state)"


@pytest.mark.slow
def test_daily_dag_waits_in_the_triggerer_then_rebuilds_its_day(daily_dag, tmp_path, caplog):
    # The run at 2024-09-03T00:00Z rebuilds the day 2024-09-02, as of its end. It starts from the
    # snapshot of 2024-09-01, which does not exist here: a full rebuild, and the metrics say why.
    dag_run = run_daily_dag(daily_dag, pendulum.datetime(2024, 9, 3, tz="UTC"), tmp_path)

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
    reason = no_base_reason(tmp_path / "dt=2024-09-01")
    assert metrics["incremental"] == {
        "base": f"{tmp_path}/dt=2024-09-01",
        "base_as_of": None,
        "applied": False,
        "reason": reason,
        "late_events": None,
    }
    # keep_state: the next day can start from this snapshot.
    assert (tmp_path / "dt=2024-09-02" / STATE_DIR / STATE_FILE).is_file()
    assert airflow_env.xcom_return_value(dag_run, "report_row_counts") == {
        "as_of": "2024-09-03T00:00:00+00:00",
        "rows": expected["rows"],
        "tables": row_counts(expected),
        "mode": "full",
        "reason": reason,
    }
    assert airflow_env.asset_event_extras("cdc_sample_daily_snapshots")[-1] == {
        "output": f"file:{tmp_path}/dt=2024-09-02",
        "as_of": "2024-09-03T00:00:00+00:00",
        "rows": expected["rows"],
        "tables": row_counts(expected),
    }


@pytest.mark.slow
def test_daily_dag_starts_from_yesterdays_snapshot(daily_dag, tmp_path):
    # 2024-09-02's run rebuilds 2024-09-01 in full (no base) and keeps its state; 2024-09-03's run
    # then rebuilds 2024-09-02 from it, reading only the files it did not cover.
    first = run_daily_dag(daily_dag, pendulum.datetime(2024, 9, 2, tz="UTC"), tmp_path)
    base = tmp_path / "dt=2024-09-01"
    first_metrics = airflow_env.xcom_return_value(first, "rebuild_snapshot")
    assert_metrics_match(first_metrics, EXPECTED["daily"]["2024-09-01"], base)
    assert first_metrics["incremental"]["reason"] == no_base_reason(tmp_path / "dt=2024-08-31")
    assert (base / STATE_DIR / STATE_FILE).is_file()

    dag_run = run_daily_dag(daily_dag, pendulum.datetime(2024, 9, 3, tz="UTC"), tmp_path)
    expected = EXPECTED["daily"]["2024-09-02"]
    metrics = airflow_env.xcom_return_value(dag_run, "rebuild_snapshot")
    # Same rows (and Parquet) as the full rebuild; the event counts are only this run's.
    assert_metrics_match(metrics, expected, tmp_path / "dt=2024-09-02", incremental=True)
    assert metrics["incremental"]["applied"] is True
    assert metrics["incremental"]["reason"] is None
    assert metrics["incremental"]["base"] == str(base)
    assert metrics["incremental"]["base_as_of"] == first_metrics["as_of"] == "2024-09-02T00:00:00+00:00"
    # The base applied every event of 2024-09-01's files: skipped. It also read 2024-09-02's (within
    # AS OF + lateness) but not to their end: read again, with 2024-09-03's.
    day_one = len(list(Path(SAMPLE_LANDING).glob("dt=2024-09-01/*.jsonl")))
    assert metrics["files"]["skipped_because"] == {SKIPPED_IN_BASE: day_one}
    assert metrics["files"]["read"] == len(list(Path(SAMPLE_LANDING).glob("dt=*/*.jsonl"))) - day_one
    assert metrics["events"]["read"] < expected["events"]["read"]
    assert airflow_env.xcom_return_value(dag_run, "report_row_counts") == {
        "as_of": "2024-09-03T00:00:00+00:00",
        "rows": expected["rows"],
        "tables": row_counts(expected),
        "mode": "incremental",
        "reason": None,
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

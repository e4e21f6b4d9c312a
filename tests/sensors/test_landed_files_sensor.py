"""CdcLandedFilesSensor: its own checks, and each way of waiting, run for real.

The sensor is run by Airflow with ``dag.test()`` in poke, reschedule and deferrable mode
(``dag.test()`` runs the trigger in line), while a timer thread finishes the landing part-way
through the wait. The trigger's own tests are in tests/triggers.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import fsspec
import pendulum
import pytest

from tests import airflow_env
from tests.triggers.unfinished_day import AS_OF, AS_OF_MS, TRIGGER_PATH, spec, waiting_for

from airflow_cdc_provider.sensors.landed_files import CdcLandedFilesSensor
from airflow_cdc_provider.triggers.landed_files import CdcLandedFilesTrigger


def finish_day_later(landing: Path, seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, (landing / "dt=2024-09-01" / "_SUCCESS").write_text, args=("",))
    timer.start()
    return timer


# ------------------------------------------------------------------------------------------------
# The sensor's own checks
# ------------------------------------------------------------------------------------------------


def test_deferrable_sensor_defers_to_the_trigger(landing):
    from airflow.sdk.exceptions import TaskDeferred

    sensor = CdcLandedFilesSensor(
        task_id="wait", path=str(landing), deferrable=True, poke_interval=30, timeout=600
    )
    before = time.time()
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({"data_interval_end": pendulum.parse(AS_OF)})

    classpath, kwargs = deferred.value.trigger.serialize()
    assert classpath == TRIGGER_PATH
    assert before + 600 <= kwargs.pop("deadline") <= time.time() + 600
    expected = CdcLandedFilesTrigger.for_spec(spec(landing), poke_interval=30.0, deadline=None).serialize()[1]
    del expected["deadline"]
    assert kwargs == expected
    assert (deferred.value.method_name, deferred.value.timeout) == (
        "execute_complete",
        timedelta(seconds=900),
    )


def test_a_trigger_error_fails_the_sensor_with_the_error(landing):
    from airflow_cdc_provider.sensors.landed_files import LandingCheckError

    sensor = CdcLandedFilesSensor(task_id="wait", path=str(landing), deferrable=True)
    with pytest.raises(LandingCheckError) as raised:
        sensor.execute_complete(
            {}, {"status": "error", "message": "PermissionError: [Errno 13] Permission denied"}
        )
    assert str(raised.value) == "checking the landing failed: PermissionError: [Errno 13] Permission denied"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strategy": "latest"}, "strategy must be one of marker, partition, event_time, got 'latest'"),
        (
            {"strategy": "event_time"},
            "strategy 'event_time' needs source_format (the --format of the landed records)",
        ),
    ],
)
def test_arguments_are_checked_when_the_dag_is_parsed(kwargs, message):
    with pytest.raises(ValueError) as raised:
        CdcLandedFilesSensor(task_id="wait", path="/lake", **kwargs)
    assert str(raised.value) == message


# ------------------------------------------------------------------------------------------------
# Real runs: dag.test() in every mode
# ------------------------------------------------------------------------------------------------


def sensor_dag(dag_id: str):
    bag = airflow_env.load_dags(airflow_env.SENSOR_TEST_DAGS)
    assert bag.import_errors == {}
    return bag.get_dag(dag_id)


def reschedules(dag_run) -> int:
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session

    (ti,) = dag_run.get_task_instances()
    with create_session() as session:
        return session.query(TaskReschedule).filter(TaskReschedule.ti_id == ti.id).count()


@pytest.mark.parametrize("dag_id", ["cdc_sensor_poke", "cdc_sensor_reschedule", "cdc_sensor_deferrable"])
def test_sensor_succeeds_once_the_day_is_finished(airflow_db, tmp_path, landing, dag_id):
    timer = finish_day_later(landing, 1.5)
    dag_run = sensor_dag(dag_id).test(
        run_conf={"path": str(landing), "as_of": AS_OF, "report_file": str(tmp_path / "x")}
    )
    timer.join()

    assert airflow_env.task_states(dag_run) == {"wait": "success"}
    assert airflow_env.xcom_return_value(dag_run, "wait") == {
        "path": str(landing),
        "strategy": "marker",
        "as_of": AS_OF,
        "seen": f"{landing}/dt=2024-09-01/_SUCCESS exists",
    }
    assert (reschedules(dag_run) > 0) is (dag_id == "cdc_sensor_reschedule")


@pytest.mark.parametrize("dag_id", ["cdc_sensor_poke", "cdc_sensor_reschedule", "cdc_sensor_deferrable"])
def test_sensor_timeout_says_what_it_waited_for_and_saw(airflow_db, tmp_path, landing, dag_id):
    report = tmp_path / "task_exception.txt"
    dag_run = sensor_dag(dag_id).test(
        run_conf={"path": str(landing), "as_of": AS_OF, "report_file": str(report)}
    )

    assert airflow_env.task_states(dag_run) == {"wait": "failed"}
    assert report.read_text(encoding="utf-8") == (
        f"AirflowSensorTimeout: Timed out after 4 s waiting for {waiting_for(landing)}. "
        f"Last seen: no _SUCCESS in dt=2024-09-01; newest partition is dt=2024-09-01."
    )


def test_deferred_event_time_sensor_on_an_object_storage_uri(airflow_db, tmp_path):
    fs = fsspec.filesystem("memory")
    bucket = f"/cdc-sensor-{uuid.uuid4().hex}"
    record = {"payload": {"op": "c", "ts_ms": AS_OF_MS + 61_008, "source": {"ts_ms": AS_OF_MS + 61_000}}}
    fs.pipe(f"{bucket}/topic/part-0.jsonl", (json.dumps(record) + "\n").encode())
    root = f"memory:/{bucket}/topic"

    dag_run = sensor_dag("cdc_sensor_event_time_deferrable").test(
        run_conf={"path": root, "as_of": AS_OF, "report_file": str(tmp_path / "x")}
    )

    assert airflow_env.task_states(dag_run) == {"wait": "success"}
    assert airflow_env.xcom_return_value(dag_run, "wait") == {
        "path": root,
        "strategy": "event_time",
        "as_of": AS_OF,
        "seen": f"newest event time 2024-09-02T00:01:01+00:00 in {root}/part-0.jsonl",
    }

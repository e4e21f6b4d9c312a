"""CdcLandedFilesSensor and CdcLandedFilesTrigger: each way of waiting, run for real.

The trigger is run on an event loop (pytest-asyncio); the sensor is run by Airflow with
``dag.test()`` in poke, reschedule and deferrable mode (``dag.test()`` runs the trigger in line),
while a timer thread finishes the landing part-way through the wait.
"""

from __future__ import annotations

import asyncio
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

from airflow_cdc_provider.landing.coverage import CoverageSpec
from airflow_cdc_provider.sensors.landed_files import CdcLandedFilesSensor
from airflow_cdc_provider.triggers.landed_files import CdcLandedFilesTrigger

AS_OF = "2024-09-02T00:00:00+00:00"
AS_OF_MS = 1725235200000
TRIGGER_PATH = "airflow_cdc_provider.triggers.landed_files.CdcLandedFilesTrigger"


@pytest.fixture
def landing(tmp_path: Path) -> Path:
    """A hive-style landing whose day 2024-09-01 has data but no done-marker yet."""
    root = tmp_path / "landing"
    (root / "dt=2024-09-01").mkdir(parents=True)
    (root / "dt=2024-09-01" / "part-0.jsonl").write_text("{}\n", encoding="utf-8")
    return root


def finish_day_later(landing: Path, seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, (landing / "dt=2024-09-01" / "_SUCCESS").write_text, args=("",))
    timer.start()
    return timer


def spec(landing: Path) -> CoverageSpec:
    return CoverageSpec(path=str(landing), as_of_ms=AS_OF_MS)


def waiting_for(landing: Path) -> str:
    return f"{landing}/dt=2024-09-01/_SUCCESS, the done-marker of partition dt=2024-09-01, which covers AS OF {AS_OF}"


# ------------------------------------------------------------------------------------------------
# The trigger
# ------------------------------------------------------------------------------------------------


def test_trigger_serializes_to_its_import_path_and_init_arguments(landing):
    from airflow.sdk._shared.module_loading import import_string

    trigger = CdcLandedFilesTrigger.for_spec(spec(landing), poke_interval=2.0, deadline=1725235300.5)
    classpath, kwargs = trigger.serialize()

    assert classpath == TRIGGER_PATH
    assert kwargs == {
        "path": str(landing),
        "as_of_ms": AS_OF_MS,
        "strategy": "marker",
        "marker": "_SUCCESS",
        "partition_pattern": None,
        "partition_timezone": "UTC",
        "source_format": None,
        "allowed_lateness_ms": 0,
        "newest_files": 3,
        "conn_id": None,
        "poke_interval": 2.0,
        "deadline": 1725235300.5,
    }
    assert json.loads(json.dumps(kwargs)) == kwargs  # primitives only
    assert import_string(classpath)(**kwargs).serialize() == (classpath, kwargs)


async def test_trigger_fires_once_the_landing_covers_as_of(landing):
    trigger = CdcLandedFilesTrigger.for_spec(spec(landing), poke_interval=0.1, deadline=None)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    beat = asyncio.create_task(ticker())
    waiting = asyncio.create_task(anext(trigger.run()))
    await asyncio.sleep(0.5)
    assert not waiting.done()
    (landing / "dt=2024-09-01" / "_SUCCESS").write_text("", encoding="utf-8")
    event = await asyncio.wait_for(waiting, timeout=5)
    beat.cancel()

    assert event.payload == {
        "status": "covered",
        "path": str(landing),
        "strategy": "marker",
        "as_of": AS_OF,
        "seen": f"{landing}/dt=2024-09-01/_SUCCESS exists",
    }
    assert ticks >= 25  # the event loop kept running while the trigger polled


async def test_trigger_reports_a_timeout_with_what_it_saw(landing):
    trigger = CdcLandedFilesTrigger.for_spec(spec(landing), poke_interval=0.1, deadline=time.time() + 0.3)
    event = await asyncio.wait_for(anext(trigger.run()), timeout=5)
    assert event.payload == {
        "status": "timeout",
        "waiting_for": waiting_for(landing),
        "seen": "no _SUCCESS in dt=2024-09-01; newest partition is dt=2024-09-01",
    }


async def test_trigger_reports_a_landing_it_cannot_open():
    trigger = CdcLandedFilesTrigger.for_spec(
        CoverageSpec(path="nosuchscheme://bucket/landing", as_of_ms=AS_OF_MS),
        poke_interval=0.1,
        deadline=None,
    )
    event = await asyncio.wait_for(anext(trigger.run()), timeout=5)
    assert event.payload == {
        "status": "error",
        "message": "LandingProbeError: cannot open 'nosuchscheme://bucket/landing': Protocol not known: nosuchscheme. "
        "Install the Airflow provider (or fsspec package) that serves nosuchscheme:// to Airflow's object storage.",
    }


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

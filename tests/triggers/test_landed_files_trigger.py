"""CdcLandedFilesTrigger: its serialized form, and each event it yields, run on an event loop
(pytest-asyncio)."""

from __future__ import annotations

import asyncio
import json
import time

from tests import airflow_env  # noqa: F401 - sets Airflow's home before anything imports airflow
from tests.triggers.unfinished_day import AS_OF, AS_OF_MS, TRIGGER_PATH, spec, waiting_for

from airflow_cdc_provider.landing.coverage import CoverageSpec
from airflow_cdc_provider.triggers.landed_files import CdcLandedFilesTrigger


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

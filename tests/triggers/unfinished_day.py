"""The landing the trigger and the sensor tests wait on: a day with data but no done-marker yet.

The sensor defers to the trigger, so both wait for the same thing and report it in the same words.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_cdc_provider.landing.coverage import CoverageSpec

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


def spec(landing: Path) -> CoverageSpec:
    return CoverageSpec(path=str(landing), as_of_ms=AS_OF_MS)


def waiting_for(landing: Path) -> str:
    return f"{landing}/dt=2024-09-01/_SUCCESS, the done-marker of partition dt=2024-09-01, which covers AS OF {AS_OF}"

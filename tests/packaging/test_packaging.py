"""One consistent PySpark, a loadable Airflow provider entry point, and a working console script."""

from __future__ import annotations

import importlib
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

from tests import airflow_env  # noqa: F401  (Airflow reads AIRFLOW_HOME at import: keep it in the test home)


def test_pyspark_python_package_matches_the_jvm(spark):
    """pyspark-client installs into the same folder as pyspark: both halves must be one release."""
    import pyspark

    jars = sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar"))
    assert pyspark.__version__ == spark.version, (pyspark.__version__, spark.version, jars)
    assert len(jars) == 1 and jars[0].endswith(f"-{spark.version}.jar"), jars


def test_provider_entry_point_loads_and_lists_importable_modules():
    ours = [
        ep
        for ep in entry_points(group="apache_airflow_provider")
        if ep.value.startswith("airflow_cdc_provider.")
    ]
    assert [ep.value for ep in ours] == ["airflow_cdc_provider.get_provider_info:get_provider_info"]
    info = ours[0].load()()
    assert info["package-name"] == "airflow-cdc-provider"
    modules = [
        m
        for section in ("hooks", "operators", "sensors", "triggers")
        for item in info[section]
        for m in item["python-modules"]
    ]
    assert modules == [
        "airflow_cdc_provider.hooks.cdc_replay",
        "airflow_cdc_provider.operators.snapshot",
        "airflow_cdc_provider.operators.history",
        "airflow_cdc_provider.sensors.landed_files",
        "airflow_cdc_provider.triggers.landed_files",
    ]
    for module in modules:
        importlib.import_module(module)


def test_airflow_providers_manager_accepts_the_provider():
    from airflow.providers_manager import ProvidersManager

    providers = ProvidersManager().providers
    assert "airflow-cdc-provider" in providers
    assert providers["airflow-cdc-provider"].data["name"] == "CDC Replay"


def test_cdc_replay_formats_runs():
    script = Path(sys.executable).parent / "cdc-replay"
    result = subprocess.run(
        [str(script), "formats"], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "debezium-json" in result.stdout

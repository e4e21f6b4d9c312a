"""Provider metadata returned through the ``apache_airflow_provider`` entry point.

Airflow's ProvidersManager calls :func:`get_provider_info` to list this package's hooks,
operators, sensors and triggers (UI, ``airflow providers list``). It is hand-written and kept
deliberately small: list a module here only once it exists, so that Airflow never tries to import
a missing one.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

PACKAGE_NAME = "airflow-cdc-provider"
try:
    VERSION = version(PACKAGE_NAME)  # pyproject.toml is the one place the version is written
except PackageNotFoundError:  # a source tree on sys.path, not installed
    VERSION = "0+unknown"
INTEGRATION = "CDC Replay"


def get_provider_info() -> dict[str, Any]:
    """Describe the provider for Airflow; must match the distribution name to be accepted."""
    return {
        "package-name": PACKAGE_NAME,
        "name": "CDC Replay",
        "description": (
            "Rebuilds point-in-time table snapshots from landed CDC files (Debezium and other "
            "change-record formats) with a PySpark job submitted through spark-submit."
        ),
        "versions": [VERSION],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://spark.apache.org/",
                "tags": ["apache"],
            }
        ],
        "hooks": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_cdc_provider.hooks.cdc_replay"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_cdc_provider.operators.snapshot",
                    "airflow_cdc_provider.operators.history",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_cdc_provider.sensors.landed_files"],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_cdc_provider.triggers.landed_files"],
            }
        ],
        # No connection type of its own: the hook submits through the apache-spark provider's
        # "spark" connection (spark_default); the sensor reads object storage through Airflow's.
    }

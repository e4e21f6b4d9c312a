"""Airflow set-up for the operator tests: a throw-away AIRFLOW_HOME, migrated once per session.

``tests.airflow_env`` sets the environment at import, before any test module here imports airflow.
"""

from __future__ import annotations

import pytest

from tests import airflow_env


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """A migrated Airflow metadata database (SQLite) for ``dag.test()``."""
    airflow_env.migrate_once()

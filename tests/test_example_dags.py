"""The example DAGs parse cleanly, and the snapshot example runs end to end on the bundled sample.

The expected figures come from ``airflow_cdc_provider/sample_data/expected.json``, which
``scripts/make_sample_data.py`` computes with its own plain-Python fold, not with the engine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import airflow_env

SAMPLE = airflow_env.REPO / "airflow_cdc_provider" / "sample_data"
EXPECTED = json.loads((SAMPLE / "expected.json").read_text(encoding="utf-8"))
TABLE_FIGURES = ("rows", "inserts", "updates", "deletes", "last_event_ms")


@pytest.fixture(scope="module")
def airflow_db() -> None:
    airflow_env.migrate_once()


def test_bundled_sample_is_what_the_generator_makes():
    script = airflow_env.REPO / "scripts" / "make_sample_data.py"
    result = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_example_dags_parse_without_errors_or_lookups(monkeypatch):
    from airflow.sdk import Variable
    from airflow.sdk.definitions.connection import Connection

    def forbidden(*args, **kwargs):
        raise AssertionError(f"looked up {args} while parsing a DAG file")

    monkeypatch.setattr(Connection, "get", forbidden)
    monkeypatch.setattr(Variable, "get", forbidden)
    bag = airflow_env.load_dags(airflow_env.EXAMPLE_DAGS)
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == ["cdc_snapshot_example"]


def test_snapshot_example_runs_and_reports_row_counts(airflow_db, tmp_path):
    dag = airflow_env.load_dags(airflow_env.EXAMPLE_DAGS).get_dag("cdc_snapshot_example")
    output = tmp_path / "snapshot"
    dag_run = dag.test(run_conf={"output_dir": str(output)})

    assert airflow_env.task_states(dag_run) == {
        "choose_output": "success",
        "rebuild_snapshot": "success",
        "report_row_counts": "success",
    }
    metrics = airflow_env.xcom_return_value(dag_run, "rebuild_snapshot")
    assert metrics == json.loads((output / "_cdc_metrics.json").read_text(encoding="utf-8"))
    assert (metrics["format"], metrics["as_of"], metrics["as_of_ms"]) == (
        EXPECTED["format"], EXPECTED["as_of"], EXPECTED["as_of_ms"]
    )
    assert metrics["output"] == f"file:{output}"
    assert metrics["rows"] == EXPECTED["rows"]
    assert metrics["events"] == EXPECTED["events"]
    got_tables = {name: {k: info[k] for k in TABLE_FIGURES} for name, info in metrics["tables"].items()}
    assert got_tables == EXPECTED["tables"]

    assert airflow_env.xcom_return_value(dag_run, "report_row_counts") == {
        "as_of": EXPECTED["as_of"],
        "rows": EXPECTED["rows"],
        "tables": {name: info["rows"] for name, info in EXPECTED["tables"].items()},
    }

    import pyarrow.parquet as pq

    def key(row: dict) -> str:
        return json.dumps(row, sort_keys=True, default=str)

    for name, rows in EXPECTED["snapshot"].items():
        got = pq.read_table(output / name).to_pylist()
        assert sorted(got, key=key) == sorted(rows, key=key), name

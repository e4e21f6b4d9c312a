"""The landing the operator tests run on, and how they run their test DAGs.

One customers table in Lindorm-shaped Debezium records (``debezium-json``), with the run conf and
DAG lookup of ``tests/operators/dags/operator_dags.py``; the snapshot and history operator tests
both read it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests import airflow_env

T0 = 1725264000000  # 2024-09-02T08:00:00Z
AS_OF = "2024-09-02T08:00:05+00:00"


def lindorm(op: str, second: int, before: dict | None, after: dict | None) -> str:
    """A Lindorm SQL record shaped like the seed-000 samples ("schema": {}, payload wrapper)."""
    ts = T0 + second * 1000
    payload = {
        "op": op,
        "ts_ms": ts + 8,
        "before": before,
        "after": after,
        "source": {
            "version": "v1.0",
            "db": "ld-xxxx",
            "namespace": "default",
            "table": "customers",
            "ts_ms": ts,
        },
    }
    return json.dumps({"schema": {}, "payload": payload})


ANNE = {"id": "1004", "first_name": "Anne", "last_name": "Kretchmar"}
SALLY = {"id": "1005", "first_name": "Sally", "last_name": "Thomas"}
ANNE_MARIE = {"id": "1004", "first_name": "Anne Marie", "last_name": "Kretchmar"}
GEORGE = {"id": "1006", "first_name": "George", "last_name": "Bailey"}


def run_conf(tmp_path: Path, landed: Path, **overrides) -> dict:
    conf = {
        "inputs": [str(landed / "a.jsonl"), str(landed / "b.jsonl")],
        "output": str(tmp_path / "snapshot"),
        "as_of": AS_OF,
        "key": ["id"],
        "tables": [],
        "report_file": str(tmp_path / "task_exception.txt"),
        "lineage_file": str(tmp_path / "lineage.json"),
    }
    conf.update(overrides)
    return conf


def operator_dag(dag_id: str):
    bag = airflow_env.load_dags(airflow_env.OPERATOR_TEST_DAGS)
    assert bag.import_errors == {}
    return bag.get_dag(dag_id)

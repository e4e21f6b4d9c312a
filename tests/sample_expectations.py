"""The bundled sample's documented figures, and the one way tests compare a run against them.

``airflow_cdc_provider/sample_data/expected.json`` is computed by ``scripts/make_sample_data.py``
with its own plain-Python fold, not with the engine, so every run is checked against something it
did not compute itself, whatever the master (local or a standalone cluster).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from airflow_cdc_provider.sample_landing import SAMPLE_EXPECTED

EXPECTED: dict[str, Any] = json.loads(SAMPLE_EXPECTED.read_text(encoding="utf-8"))
TABLE_FIGURES = ("rows", "inserts", "updates", "deletes", "last_event_ms")


def row_counts(expected: dict[str, Any]) -> dict[str, int]:
    return {name: info["rows"] for name, info in expected["tables"].items()}


def assert_metrics_match(metrics: dict[str, Any], expected: dict[str, Any], output: Path) -> None:
    """The job's metrics (XCom and file) and its Parquet rows are exactly the expected ones."""
    import pyarrow.parquet as pq

    assert metrics == json.loads((output / "_cdc_metrics.json").read_text(encoding="utf-8"))
    assert (metrics["format"], metrics["as_of"], metrics["as_of_ms"]) == (
        expected["format"], expected["as_of"], expected["as_of_ms"]
    )
    assert metrics["output"] == f"file:{output}"
    assert (metrics["rows"], metrics["events"], metrics["ignored"]) == (
        expected["rows"], expected["events"], expected["ignored"]
    )
    got_tables = {name: {k: info[k] for k in TABLE_FIGURES} for name, info in metrics["tables"].items()}
    assert got_tables == expected["tables"]

    def key(row: dict) -> str:
        return json.dumps(row, sort_keys=True, default=str)

    for name, rows in expected["snapshot"].items():
        got = pq.read_table(output / name).to_pylist()
        assert sorted(got, key=key) == sorted(rows, key=key), name

"""The bundled sample's documented figures, and the one way tests compare a run against them.

``airflow_cdc_provider/sample_data/expected.json`` is computed by ``scripts/make_sample_data.py``
with its own plain-Python fold, not with the engine, so every run is checked against something it
did not compute itself, whatever the master (local or a standalone cluster).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from airflow_cdc_provider.sample_data import SAMPLE_EXPECTED

EXPECTED: dict[str, Any] = json.loads(SAMPLE_EXPECTED.read_text(encoding="utf-8"))
TABLE_FIGURES = ("rows", "inserts", "updates", "deletes", "last_event_ms")


def row_counts(expected: dict[str, Any]) -> dict[str, int]:
    return {name: info["rows"] for name, info in expected["tables"].items()}


def assert_metrics_match(
    metrics: dict[str, Any], expected: dict[str, Any], output: Path, *, incremental: bool = False
) -> None:
    """The job's metrics (XCom and file) and its Parquet rows are exactly the expected ones.

    ``incremental``: the run started from a base, so it read (and counts) only the events after it;
    the expected event counts are a full rebuild's, and only the snapshot is compared.
    """
    import pyarrow.parquet as pq

    assert metrics == json.loads((output / "_cdc_metrics.json").read_text(encoding="utf-8"))
    assert (metrics["format"], metrics["as_of"], metrics["as_of_ms"]) == (
        expected["format"],
        expected["as_of"],
        expected["as_of_ms"],
    )
    assert metrics["output"] == f"file:{output}"
    assert metrics["mode"] == ("incremental" if incremental else "full")
    if incremental:
        assert metrics["rows"] == expected["rows"]
        assert metrics["events"]["read"] == sum(v for k, v in metrics["events"].items() if k != "read")
    else:
        assert (metrics["rows"], metrics["events"], metrics["ignored"]) == (
            expected["rows"],
            expected["events"],
            expected["ignored"],
        )
    figures = ("rows", "last_event_ms") if incremental else TABLE_FIGURES  # (ins/upd/del: this run's events)
    got_tables = {name: {k: info[k] for k in figures} for name, info in metrics["tables"].items()}
    assert got_tables == {name: {k: info[k] for k in figures} for name, info in expected["tables"].items()}

    def key(row: dict) -> str:
        return json.dumps(row, sort_keys=True, default=str)

    for name, rows in expected["snapshot"].items():
        got = pq.read_table(output / name).to_pylist()
        assert sorted(got, key=key) == sorted(rows, key=key), name

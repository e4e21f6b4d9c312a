"""Callbacks the test DAGs share: they hand what happened inside a task back to the test."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def record_exception(context: dict[str, Any]) -> None:
    """Failure callback: write ``ExceptionType: message`` to the run's ``report_file`` param."""
    report = context["params"].get("report_file")
    if report:
        exc = context.get("exception")
        Path(report).write_text(f"{type(exc).__name__}: {exc}", encoding="utf-8")


def record_lineage(context: dict[str, Any]) -> None:
    """Success callback: ask the task for its OpenLineage facets, the way the OpenLineage provider
    does after a task succeeds, and write them as JSON to the run's ``lineage_file`` param."""
    import json

    import attrs

    report = context["params"].get("lineage_file")
    if report:
        lineage = context["task"].get_openlineage_facets_on_complete(context["ti"])
        data = None if lineage is None else attrs.asdict(lineage)
        Path(report).write_text(json.dumps(data, default=str, sort_keys=True), encoding="utf-8")

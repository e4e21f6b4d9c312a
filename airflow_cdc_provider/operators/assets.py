"""The Airflow Asset a snapshot task declares as its output, and the extra its asset events carry.

Outlets are fixed when the DAG is parsed, but a snapshot's folder usually is not
(``s3a://lake/snapshots/customers/{{ ds }}``, or ``.../dt={as_of:%Y-%m-%d}`` for several AS OFs).
The asset therefore names the stable part: the folder above the first templated segment, which
holds every run's snapshot. Each run's asset event then says which snapshot it wrote (``output``, ``as_of``) and its row counts, so a DAG
scheduled on the asset, or a person reading its events, gets the counts without opening the files.
When nothing of the path is known at parse time (fully templated, or an XCom), the asset is
named after the task.
"""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import Asset

# Airflow leaves URIs with an "x-" scheme as they are (no provider normalises them).
TASK_ASSET_SCHEME = "x-cdc-snapshot"
# Jinja, and the job's own ``{as_of:FORMAT}`` field (one folder per AS OF).
_TEMPLATE_MARKERS = ("{{", "{%", "{as_of:")


def static_prefix(output_path: Any) -> str | None:
    """The folder of ``output_path`` that no template can change, or None when there is none."""
    if not isinstance(output_path, (str, os.PathLike)):
        return None  # an XComArg or other value resolved at run time
    text = os.fspath(output_path)
    cut = min((text.find(m) for m in _TEMPLATE_MARKERS if m in text), default=-1)
    if cut >= 0:
        text = text[:cut].rsplit("/", 1)[0] if "/" in text[:cut] else ""
    text = text.rstrip("/")
    return text or None


def _as_uri(path: str) -> str:
    return f"file://{path}" if path.startswith("/") else path


def snapshot_asset(output_path: Any, dag_id: str | None, task_id: str) -> Asset:
    """The default output asset of a snapshot task (see the module docstring)."""
    prefix = static_prefix(output_path)
    if prefix is not None and (prefix.startswith("/") or "://" in prefix):
        return Asset(uri=_as_uri(prefix))
    return Asset(uri=f"{TASK_ASSET_SCHEME}://{dag_id or 'no-dag'}/{task_id}")


def asset_from_argument(value: Asset | str) -> Asset:
    """A user's ``output_asset``: an Asset as it is, a string as its URI (local paths as file://)."""
    return value if isinstance(value, Asset) else Asset(uri=_as_uri(value))


def asset_event_extra(metrics: dict[str, Any]) -> dict[str, Any]:
    """What one run's asset event records: where and as of when it wrote, and the row counts."""
    return {
        "output": metrics["output"],
        "as_of": metrics["as_of"],
        "rows": metrics["rows"],
        "tables": {name: info["rows"] for name, info in metrics["tables"].items()},
    }

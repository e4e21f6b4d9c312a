"""AS OF for a task: the value its user gave, or the run's data interval end.

The snapshot operator and the landed-files sensor must agree on the instant, or the sensor would
wait for one thing and the snapshot rebuild another; both resolve it here.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_cdc_provider.hooks.cdc_replay import normalise_as_of
from airflow_cdc_provider.replay.timeparse import parse_as_of

if TYPE_CHECKING:
    from airflow.sdk import Context


def default_as_of(context: Context) -> datetime:
    """The run's data interval end; runs without a data interval fall back to when the run was due."""
    for candidate in (context.get("data_interval_end"), context.get("logical_date")):
        if candidate is not None:
            return candidate
    return context["dag_run"].run_after


def resolve_as_of(value: Any, context: Context) -> str:
    """AS OF as the job takes it; ``None`` or an empty rendered template means the default."""
    return normalise_as_of(value if value not in (None, "") else default_as_of(context))


def resolve_as_of_ms(value: Any, context: Context) -> int:
    return parse_as_of(resolve_as_of(value, context))

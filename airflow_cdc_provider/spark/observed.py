"""A figure observed while a frame is materialised, or counted afterwards where it cannot be.

``DataFrame.observe`` gives a figure from the action that computes the frame, at no job of its
own. Over Spark Connect, ``localCheckpoint`` does not hand observed figures back to the client;
the figure is then aggregated from the materialised frame, one small job.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Observation


def observed_figure(observation: Observation, name: str, materialised: DataFrame, figure: Column) -> Any:
    """``observation``'s figure ``name``, else ``figure`` (the same aggregate) over ``materialised``."""
    try:
        found = observation.get
    except Exception:  # noqa: BLE001 - Connect: no observed metrics came back with the checkpoint
        found = {}
    if name in found:
        return found[name]
    return materialised.agg(figure.alias(name)).collect()[0][name]

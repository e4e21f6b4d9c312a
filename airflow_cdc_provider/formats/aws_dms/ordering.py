"""The order of AWS DMS events, the same for every landing: a table's full load, then its changes by time.

A full load sorts before the changes of its table, whatever their times: DMS applies the changes it
cached during the load after it, and stamps load rows with the transfer time.
"""

from __future__ import annotations

from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr

PHASE_LOAD, PHASE_CHANGES = 0, 1


def position(load: Expr, time_us: Expr, *place: Expr) -> Expr:
    """``[0]`` for a full load, ``[1, time in µs, place...]`` for a change: loads first, then time.

    Null where ``load`` is (a record with no op): the engine's positions are nullable arrays.
    """
    return E.when(load, E.array(E.lit(PHASE_LOAD).cast("bigint"))).when(
        ~load, E.array(E.lit(PHASE_CHANGES).cast("bigint"), time_us, *place)
    )

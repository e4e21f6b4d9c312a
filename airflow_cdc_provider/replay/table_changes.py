"""Changes to a whole table: truncates, and DDL events' declared types, added and dropped columns.

Takes canonical events (keyed or not: none of this needs a key). Gives ``table_changes`` (each
table's applied truncates and column drops, which change rows of every key, so the counting window
and ``resolve`` need them), ``ddl_change`` (what one DDL event adds and drops, kept per group by
the fold) and an event's declared types as one flat ``type_signature`` (read back by typing with
``signature_pairs``). See docs/design.md for how truncates and DDL fold.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame

from airflow_cdc_provider.formats.events import KIND_CHANGE, OP_TRUNCATE, empty_image
from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.replay.keys import applies_by, is_ddl, ordering
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr


def type_signature(types: Expr) -> Expr:
    """An event's declared types as one ``array<string>``: the names, then the types in the same order.

    Every typed event adds one to its group's set (``TYPE_SIGS``): a flat array of strings is hashed
    and compared as bytes, where ``map_entries`` builds an object per column for each event.
    """
    return E.concat(E.map_keys(types), E.map_values(types))


def signature_pairs(signature: Sequence[str]) -> list[tuple[str, str]]:
    """A ``type_signature`` read back: (column, declared type) in the order the event declared them."""
    half = len(signature) // 2
    return list(zip(signature[:half], signature[half:]))


def ddl_change(ord_: Expr) -> Expr:
    """A DDL event as a table's schema sees it: its position, the columns it adds and drops."""
    none = E.array().cast("array<string>")
    return E.struct(
        ord_.alias("ord"),
        E.coalesce(E.map_keys("types"), none).alias("added"),
        E.coalesce(E.map_keys("before"), none).alias("cols"),
    )


def table_changes(events: DataFrame, as_of_ms: int) -> DataFrame:
    """``table, TRUNCS, DROPS``: each table's applied truncate positions and column drops (tiny).

    Both change every row of a table, so the counting window and each key's state need them.
    Read straight from the canonical events: neither needs a key.
    """
    applied = applies_by(events, as_of_ms)
    is_trunc = applied & (E.col("kind") == KIND_CHANGE) & (E.col("op") == OP_TRUNCATE)
    is_drop = applied & is_ddl() & (E.size(E.map_keys(E.coalesce(E.col("before"), empty_image()))) > 0)
    return (
        events.where((is_trunc | is_drop).column())
        .groupBy("table")
        .agg(
            *E.columns(
                E.collect_list(E.when(is_trunc, ordering())).alias(C.TRUNCS),
                E.collect_list(E.when(is_drop, ddl_change(ordering()))).alias(C.DROPS),
            )
        )
    )

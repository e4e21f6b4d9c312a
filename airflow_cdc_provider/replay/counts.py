"""Counting: what each applied row change adds to its group's counts, by one window per group.

Takes tagged events (``keys.with_as_of_flags``, or the spans' points) and, where a truncate was
applied, ``table_changes``. Gives the events with one 0/1 flag per count (``C.count_flag``) that
the fold sums: inserts, updates, deletes, exact duplicates, deletes and updates of unknown keys,
partial updates. Also the group partition and the position order the fold's aggregation and the
spans' windows share with this window, so that one shuffle and one sort serve them all
(``clustered_for_fold``). The counting rules are those of docs/design.md.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_cdc_provider.formats.events import OP_DELETE, OP_INSERT, OP_READ, OP_UPDATE
from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.replay.keys import ordering
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr

# Op codes in the counting window.
_OP_CODE = {OP_INSERT: 1, OP_READ: 1, OP_UPDATE: 2, OP_DELETE: 3}
OP_CODE_MOVED_IN = 4

# The counting window's order after the group: position, the content hash before the landing place.
COUNTING_ORDER_FIELDS = ("log_pos", "event_ms", C.HASH, "file", "file_pos", "sub_pos")

# The fold's group: its windows' partition and its aggregation's grouping.
GROUP = (C.GROUP_HASH, "table", C.TAG, C.KEY)


def counting_order() -> str:
    """Position order in which exact duplicates sit next to each other (SQL ``ORDER BY`` list).

    The content hash sorts right after the source position and event time, before the landing
    position: two deliveries of one event share the former and differ in the latter.
    """
    return ", ".join(E.col(f).sql for f in COUNTING_ORDER_FIELDS)


def _op_code() -> Expr:
    code = E.when(E.col("op").isin(OP_INSERT, OP_READ), E.lit(_OP_CODE[OP_INSERT]))
    code = code.when(E.col("op") == OP_UPDATE, E.lit(_OP_CODE[OP_UPDATE]))
    code = code.when(E.col("op") == OP_DELETE, E.lit(_OP_CODE[OP_DELETE])).otherwise(E.lit(0))
    # The new-key half of a key-changing update: an update of a row that existed (under its old key).
    return E.when(E.col(C.KEY_MOVED) & ~E.col(C.MOVED_AWAY), E.lit(OP_CODE_MOVED_IN)).otherwise(code)


def group_partition() -> str:
    """The fold's windows run per group (SQL ``PARTITION BY``)."""
    return f"PARTITION BY {', '.join(E.col(g).sql for g in GROUP)}"


def group_hash() -> Expr:
    # A leading 64-bit hash makes the sort compare longs before table names and key arrays.
    return E.xxhash64("table", C.TAG, C.KEY)


def clustered_for_fold(staged: DataFrame) -> DataFrame:
    """``keys.tagged_events`` hashed, partitioned and sorted as the fold's window and aggregation need
    them: kept so, the fold of each of several AS OFs runs without a shuffle or a sort of its own."""
    hashed = staged.withColumn(C.GROUP_HASH, group_hash().column())
    return hashed.repartition(*GROUP).sortWithinPartitions(*GROUP, *COUNTING_ORDER_FIELDS)


def with_count_flags(
    keyed: DataFrame,
    changes: DataFrame | None,
    whole_key: dict[str, Expr] | None = None,
    spans: Expr | None = None,
) -> DataFrame:
    """Per applied row change, what it adds to the counts, from the events before it in position order.

    A window over each key's events (its sort shared with the fold's aggregation) stands in for
    walking a per-key list: an event is an exact duplicate when it repeats the previous counted
    event; a delete or update finds no row when the previous applied event was a delete (or there
    was none), or a truncate of the table came after it. ``changes`` is None when no truncate was
    applied (the single-pass fold). ``whole_key``: aggregates over all of a key's events, computed
    in the same window operator (same spec).

    ``spans`` (``spans.fold_spans``): the rows are ordered by AS OF index (``POINT``) before
    position, so that the spans window shares this sort, and only the rows where ``spans`` holds
    (one per event, at the index it applies at) are counted. The order is position order unless an
    event applies at an earlier index than one before it in position order: ``OUT_OF_ORDER`` flags
    those events.
    """
    only = spans if spans is not None else E.lit(True)
    applied = E.col(C.APPLIED) & only
    from_base = E.col(C.BASE_ROW) if C.BASE_ROW in keyed.columns else E.lit(False)
    counted = applied & ~E.col(C.MOVED_AWAY) & ~from_base
    point = f"{E.col(C.POINT).sql}, " if spans is not None else ""
    spec = f"{group_partition()} ORDER BY {point}{counting_order()}"
    with_truncs = (
        keyed.join(F.broadcast(changes.select("table", C.TRUNCS)), "table", "left")
        if changes is not None
        else keyed
    )
    columns = _previous_events(spec, counted, applied, spans, changes is not None)
    whole = f"{spec} ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING"
    columns += [aggregate.over(whole).alias(name) for name, aggregate in (whole_key or {}).items()]
    staged = with_truncs.select("*", *E.columns(columns))
    flags = _flag_columns(changes is not None)
    helpers = [
        c
        for c in staged.columns
        if c not in keyed.columns and c != C.OUT_OF_ORDER and c not in (whole_key or {})
    ]
    return staged.select("*", *E.columns(flags)).drop(*helpers)


def _previous_events(
    spec: str, counted: Expr, applied: Expr, spans: Expr | None, truncates: bool
) -> list[Expr]:
    """What the counting window reads of the events before each one (``spec``: its partition and order)."""
    window = f"{spec} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING"

    def previous(value: Expr) -> Expr:
        return E.call("last", value, True).over(window)

    columns = [
        _op_code().alias(C.OP_CODE),
        counted.alias(C.COUNTED),
        previous(E.when(counted, E.col(C.HASH))).alias(C.PREV_HASH),
        previous(E.when(applied, _op_code())).alias(C.PREV_OP),
    ]
    if spans is not None:
        # An event that comes, in position order, before one that sorts ahead of it by AS OF index.
        position = E.struct(*[E.col(f) for f in COUNTING_ORDER_FIELDS])
        later_max = E.max(E.when(spans, position)).over(window)
        columns.append(E.coalesce(spans & (later_max > position), E.lit(False)).alias(C.OUT_OF_ORDER))
    if truncates:
        columns.append(previous(E.when(applied, ordering())).alias(C.PREV_ORD))
    return columns


def _flag_columns(truncates: bool) -> list[Expr]:
    """The 0/1 flags the fold sums, from ``_previous_events`` (and the tables' truncates)."""
    truncated_since = E.lit(False)
    if truncates:
        ord_, prev_ord = ordering(), E.col(C.PREV_ORD)
        truncated_since = E.when(
            E.col(C.TRUNCS).isNotNull(),
            E.exists(C.TRUNCS, lambda t: (t < ord_) & (prev_ord.isNull() | (t > prev_ord))),
        ).otherwise(E.lit(False))
    existed = E.col(C.PREV_OP).isNotNull() & (E.col(C.PREV_OP) != _OP_CODE[OP_DELETE]) & ~truncated_since
    op = E.col(C.OP_CODE)
    dup = E.col(C.COUNTED) & E.coalesce(E.col(C.PREV_HASH) == E.col(C.HASH), E.lit(False))
    count = E.col(C.COUNTED) & ~dup
    deleting = count & (op == _OP_CODE[OP_DELETE])

    def flag(condition: Expr) -> Expr:
        return E.when(condition, E.lit(1)).otherwise(E.lit(0))

    return [
        flag(count & (op == _OP_CODE[OP_INSERT])).alias(C.count_flag(C.INSERTS)),
        flag(count & ((op == _OP_CODE[OP_UPDATE]) | (op == OP_CODE_MOVED_IN))).alias(C.count_flag(C.UPDATES)),
        flag(deleting & existed).alias(C.count_flag(C.DELETES)),
        flag(dup).alias(C.count_flag(C.DUPLICATES)),
        flag(deleting & ~existed).alias(C.count_flag(C.DELETES_UNKNOWN)),
        flag(count & (op == _OP_CODE[OP_UPDATE]) & ~existed).alias(C.count_flag(C.UPDATES_UNKNOWN)),
        flag(count & E.coalesce(E.col("partial"), E.lit(False))).alias(C.count_flag(C.PARTIAL_UPDATES)),
    ]

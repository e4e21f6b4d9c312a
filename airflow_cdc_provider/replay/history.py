"""A history (SCD type 2): every version each key's row held up to ``--until``, with its validity.

A snapshot as of T applies the events whose time (their transaction's under
``--whole-transactions``) is at or before T, in position order. So as T grows, a key's state only
changes at the times of its own events (and of its table's truncates), and at each such time it
is what the fold of the events up to then gives. One window per key, ordered by that time with a
RANGE frame, computes exactly that state at each of the key's times; a time whose last applied
event (by position) is the one before it changes nothing and makes no version. Each remaining
time starts a version that lasts until the next one (``_cdc_valid_to``, null while current).

This holds whatever order event times take along positions: a change whose time is later than a
change after it in position order is overridden from the earlier time on and makes no version of
its own. Exact re-deliveries share their original's time and so make no version either. The
state at each time is the fold's: the latest full image or delete by position, with later partial
images merged column by column (``resolve.merged_image``); a key change ends the old key's version
and starts the new key's (carrying the old row when the image is partial).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, StringType, StructField, StructType

from airflow_cdc_provider.formats.events import (
    IMAGE_TYPE,
    KIND_CHANGE,
    OP_DELETE,
    OP_TRUNCATE,
    OP_UPDATE,
    empty_image,
)
from airflow_cdc_provider.replay.fold import (
    TAG_ROW,
    TAG_TRUNCATE,
    event_meta,
    keyed_events,
    ordering,
)
from airflow_cdc_provider.replay.resolve import by_ord, merged_image
from airflow_cdc_provider.replay.transactions import APPLY_MS
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr

VALID_FROM, VALID_TO = "_cdc_valid_from", "_cdc_valid_to"
# A version's bounds in epoch ms, as the engine keeps them until the write.
FROM_MS, TO_MS = "_from_ms", "_to_ms"
_AT = "_at"  # the instant an event applies from


def row_versions(
    events: DataFrame, until_ms: int, partial_images: bool, carries: DataFrame | None
) -> DataFrame:
    """``table, _key, FROM_MS, TO_MS, image, _tag, last`` for every version up to ``until_ms``.

    ``events`` are the run's decoded events (``with_keys``, tables selected); ``carries`` the rows
    partial key changes carry to their new key (``resolve.chain_carries``), or None. A version that
    starts from a carry left unsettled there is not written: the snapshot quarantines its change.
    """
    keyed = keyed_events(events, until_ms)
    at = E.col(APPLY_MS) if APPLY_MS in keyed.columns else E.coalesce(E.col("event_ms"), E.lit(0))
    keyed = keyed.withColumn(_AT, at.column())
    applied = keyed.where(((E.col("_tag") == TAG_ROW) & E.col("_applied")).column())
    if carries is not None:
        applied = _with_carried(applied, carries)
    else:
        applied = applied.withColumns({"_carried": F.lit(None).cast(IMAGE_TYPE), "_pending": F.lit(False)})
    changes = applied.select(*_event_columns(partial_images))
    truncates = keyed.where(
        ((E.col("_tag") == TAG_TRUNCATE) & E.col("_applied") & (E.col("kind") == KIND_CHANGE)).column()
    )
    if not truncates.isEmpty():
        # A truncate changes every key of its table: it joins each key's events as a reset to no row.
        keys = changes.select("table", "_key").distinct()
        changes = changes.unionByName(
            keys.join(truncates.select(*_event_columns(partial_images, False)), "table")
        )
    return _states(changes, partial_images)


def _with_carried(applied: DataFrame, carries: DataFrame) -> DataFrame:
    """The row a partial key change carries from its old key, on the change's new-key half."""
    carried = carries.select(
        F.col("table").alias("_c_table"), F.col("_key").alias("_c_key"), F.explode("carries").alias("_c")
    )
    on = (
        (F.col("table") == F.col("_c_table"))
        & (F.col("_key") == F.col("_c_key"))
        & (ordering().column() == F.col("_c.ord"))
    )
    return (
        applied.join(F.broadcast(carried), on, "left")
        .withColumns(
            {"_carried": F.col("_c.image"), "_pending": F.coalesce(~F.col("_c.settled"), F.lit(False))}
        )
        .drop("_c_table", "_c_key", "_c")
    )


def _event_columns(partial_images: bool, row_change: bool = True) -> list:
    """What the window reads of each event: ``row_change`` false for a truncate (no key, no image)."""
    partial = E.col("partial") & (E.col("op") == OP_UPDATE) if row_change else E.lit(False)
    columns = [
        E.col("table"),
        E.col(_AT),
        ordering().alias("ord"),
        E.col("op"),
        (E.col("after") if row_change else E.null(IMAGE_TYPE)).alias("after"),
        partial.alias("_partial"),
        event_meta().alias("_meta"),
    ]
    if row_change:
        columns.insert(1, E.col("_key"))
    if partial_images:
        columns.append((E.col("_carried") if row_change else E.null(IMAGE_TYPE)).alias("_carried"))
        columns.append((E.col("_pending") if row_change else E.lit(False)).alias("_pending"))
    return E.columns(columns)


def _states(changes: DataFrame, partial_images: bool) -> DataFrame:
    """One row per version: the key's state at each of its times where the latest event changed."""
    key = "PARTITION BY `table`, `_key` ORDER BY `_at`"
    upto = f"{key} RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"

    def running(aggregate: Expr) -> Expr:
        return aggregate.over(upto)

    resetting = ~E.col("_partial")
    base = E.struct(E.col("ord"), E.col("op"), E.col("after"))
    columns = [
        running(E.max_by(E.when(resetting, base), E.when(resetting, E.col("ord")))).alias("_base"),
        running(E.max_by(E.col("_meta"), E.col("ord"))).alias("last"),
        running(E.max(E.col("ord"))).alias("_win"),
        E.call("lead", _AT).over(key).alias("_next"),
    ]
    if partial_images:
        partial = E.struct(
            E.col("ord"), E.col("after"), E.col("_carried").alias("base"), E.col("_pending").alias("pending")
        )
        columns.append(running(E.collect_list(E.when(E.col("_partial"), partial))).alias("_partials"))
    at_times = changes.select("table", "_key", _AT, *E.columns(columns))
    # Rows sharing a time share the frame: the last of them stands for the time.
    points = at_times.where((E.col("_next").isNull() | (E.col("_next") != E.col(_AT))).column()).drop("_next")
    # A time whose latest event (by position) is the previous time's changes nothing.
    changed = points.withColumn("_prev", E.call("lag", "_win").over(key).column()).where(
        E.coalesce(E.col("_prev") != E.col("_win"), E.lit(True)).column()
    )
    bounded = changed.withColumn(TO_MS, E.call("lead", _AT).over(key).column())
    exists, image = _state(partial_images, changes.schema["ord"].dataType)
    return (
        bounded.select(
            "table",
            "_key",
            E.col(_AT).alias(FROM_MS).column(),
            TO_MS,
            *E.columns(exists.alias("_exists"), image.alias("image"), E.lit(TAG_ROW).alias("_tag")),
            "last",
        )
        .where(F.col("_exists"))
        .drop("_exists")
    )


def _state(partial_images: bool, ord_type: DataType) -> tuple[Expr, Expr]:
    """``(exists, image)`` of a key at one of its times, from the window's ``_base`` (and ``_partials``)."""
    base = E.col("_base")
    base_exists = E.coalesce(~base["op"].isin(OP_DELETE, OP_TRUNCATE), E.lit(False))
    base_image = E.when(base_exists, E.coalesce(base["after"], empty_image())).otherwise(empty_image())
    if not partial_images:
        return base_exists, base_image
    later = E.array_sort(E.filter("_partials", lambda p: base.isNull() | (p["ord"] > base["ord"])), by_ord)
    # Versions keep what their time held: a later DROP COLUMN does not rewrite them.
    no_drops = E.array().cast(
        ArrayType(StructType([StructField("ord", ord_type), StructField("cols", ArrayType(StringType()))]))
    )
    rebuilt = ~E.exists(later, lambda p: p["pending"])
    exists = (base_exists | (E.size(later) > 0)) & rebuilt
    return exists, merged_image(base_image, base["ord"], later, no_drops)

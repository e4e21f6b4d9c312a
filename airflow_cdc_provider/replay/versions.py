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

Takes a run's kept decoded events (and the fold's carries); gives one row per version
(``row_versions``), the lines of split-read files filled in (``shown_versions``), which the write
stage writes with ``VALID_FROM`` and ``VALID_TO``. See docs/design.md, "History".
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
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
from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.replay.images import by_ord, merged_image
from airflow_cdc_provider.replay.keys import event_meta, ordering, with_as_of_flags
from airflow_cdc_provider.replay.read import Input, ignoring_unselected_tables
from airflow_cdc_provider.replay.salvage import with_split_lines
from airflow_cdc_provider.replay.spec import SnapshotSpec
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr


def row_versions(
    events: DataFrame, until_ms: int, partial_images: bool, carries: DataFrame | None
) -> DataFrame:
    """``table, KEY, FROM_MS, TO_MS, IMAGE, TAG, LAST`` for every version up to ``until_ms``.

    ``events`` are the run's decoded events (``keys.with_keys``, tables selected); ``carries`` the rows
    partial key changes carry to their new key (``resolve.chain_carries``), or None. A version that
    starts from a carry left unsettled there is not written: the snapshot quarantines its change.
    """
    keyed = with_as_of_flags(events, until_ms)
    at = E.col(C.APPLY_MS) if C.APPLY_MS in keyed.columns else E.coalesce(E.col("event_ms"), E.lit(0))
    keyed = keyed.withColumn(C.APPLIES_AT, at.column())
    applied = keyed.where(((E.col(C.TAG) == C.TAG_ROW) & E.col(C.APPLIED)).column())
    if carries is not None:
        applied = _with_carried(applied, carries)
    else:
        applied = applied.withColumns({C.CARRIED: F.lit(None).cast(IMAGE_TYPE), C.PENDING: F.lit(False)})
    changes = applied.select(*_event_columns(partial_images))
    truncates = keyed.where(
        ((E.col(C.TAG) == C.TAG_TRUNCATE) & E.col(C.APPLIED) & (E.col("kind") == KIND_CHANGE)).column()
    )
    if not truncates.isEmpty():
        # A truncate changes every key of its table: it joins each key's events as a reset to no row.
        keys = changes.select("table", C.KEY).distinct()
        changes = changes.unionByName(
            keys.join(truncates.select(*_event_columns(partial_images, False)), "table")
        )
    return _states(changes, partial_images)


def _with_carried(applied: DataFrame, carries: DataFrame) -> DataFrame:
    """The row a partial key change carries from its old key, on the change's new-key half."""
    carried = carries.select(
        F.col("table").alias(C.CARRY_TABLE),
        F.col(C.KEY).alias(C.CARRY_KEY),
        F.explode(C.CARRIES).alias(C.CARRY_ENTRY),
    )
    on = (
        (F.col("table") == F.col(C.CARRY_TABLE))
        & (F.col(C.KEY) == F.col(C.CARRY_KEY))
        & (ordering().column() == F.col(f"{C.CARRY_ENTRY}.ord"))
    )
    return (
        applied.join(F.broadcast(carried), on, "left")
        .withColumns(
            {
                C.CARRIED: F.col(f"{C.CARRY_ENTRY}.image"),
                C.PENDING: F.coalesce(~F.col(f"{C.CARRY_ENTRY}.settled"), F.lit(False)),
            }
        )
        .drop(C.CARRY_TABLE, C.CARRY_KEY, C.CARRY_ENTRY)
    )


def _event_columns(partial_images: bool, row_change: bool = True) -> list:
    """What the window reads of each event: ``row_change`` false for a truncate (no key, no image)."""
    partial = E.col("partial") & (E.col("op") == OP_UPDATE) if row_change else E.lit(False)
    columns = [
        E.col("table"),
        E.col(C.APPLIES_AT),
        ordering().alias(C.EVENT_ORD),
        E.col("op"),
        (E.col("after") if row_change else E.null(IMAGE_TYPE)).alias("after"),
        partial.alias(C.PARTIAL_UPDATE),
        event_meta().alias(C.EVENT_META),
    ]
    if row_change:
        columns.insert(1, E.col(C.KEY))
    if partial_images:
        columns.append((E.col(C.CARRIED) if row_change else E.null(IMAGE_TYPE)).alias(C.CARRIED))
        columns.append((E.col(C.PENDING) if row_change else E.lit(False)).alias(C.PENDING))
    return E.columns(columns)


def _states(changes: DataFrame, partial_images: bool) -> DataFrame:
    """One row per version: the key's state at each of its times where the latest event changed."""
    key = f"PARTITION BY {E.col('table').sql}, {E.col(C.KEY).sql} ORDER BY {E.col(C.APPLIES_AT).sql}"
    upto = f"{key} RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"

    def running(aggregate: Expr) -> Expr:
        return aggregate.over(upto)

    resetting = ~E.col(C.PARTIAL_UPDATE)
    base = E.struct(E.col(C.EVENT_ORD), E.col("op"), E.col("after"))
    columns = [
        running(E.max_by(E.when(resetting, base), E.when(resetting, E.col(C.EVENT_ORD)))).alias(
            C.VERSION_BASE
        ),
        running(E.max_by(E.col(C.EVENT_META), E.col(C.EVENT_ORD))).alias(C.LAST),
        running(E.max(E.col(C.EVENT_ORD))).alias(C.LATEST_ORD),
        E.call("lead", C.APPLIES_AT).over(key).alias(C.NEXT),
    ]
    if partial_images:
        partial = E.struct(
            E.col(C.EVENT_ORD),
            E.col("after"),
            E.col(C.CARRIED).alias("base"),
            E.col(C.PENDING).alias("pending"),
        )
        columns.append(
            running(E.collect_list(E.when(E.col(C.PARTIAL_UPDATE), partial))).alias(C.VERSION_PARTIALS)
        )
    at_times = changes.select("table", C.KEY, C.APPLIES_AT, *E.columns(columns))
    # Rows sharing a time share the frame: the last of them stands for the time.
    latest_at_time = E.col(C.NEXT).isNull() | (E.col(C.NEXT) != E.col(C.APPLIES_AT))
    points = at_times.where(latest_at_time.column()).drop(C.NEXT)
    # A time whose latest event (by position) is the previous time's changes nothing.
    changed = points.withColumn(C.PREVIOUS_LATEST_ORD, E.call("lag", C.LATEST_ORD).over(key).column()).where(
        E.coalesce(E.col(C.PREVIOUS_LATEST_ORD) != E.col(C.LATEST_ORD), E.lit(True)).column()
    )
    bounded = changed.withColumn(C.TO_MS, E.call("lead", C.APPLIES_AT).over(key).column())
    exists, image = _state(partial_images, changes.schema[C.EVENT_ORD].dataType)
    return (
        bounded.select(
            "table",
            C.KEY,
            E.col(C.APPLIES_AT).alias(C.FROM_MS).column(),
            C.TO_MS,
            *E.columns(exists.alias(C.VERSION_EXISTS), image.alias(C.IMAGE), E.lit(C.TAG_ROW).alias(C.TAG)),
            C.LAST,
        )
        .where(F.col(C.VERSION_EXISTS))
        .drop(C.VERSION_EXISTS)
    )


def _state(partial_images: bool, ord_type: DataType) -> tuple[Expr, Expr]:
    """``(exists, image)`` of a key at one of its times, from the window's ``_base`` (and ``_partials``)."""
    base = E.col(C.VERSION_BASE)
    base_exists = E.coalesce(~base["op"].isin(OP_DELETE, OP_TRUNCATE), E.lit(False))
    base_image = E.when(base_exists, E.coalesce(base["after"], empty_image())).otherwise(empty_image())
    if not partial_images:
        return base_exists, base_image
    later = E.array_sort(
        E.filter(C.VERSION_PARTIALS, lambda p: base.isNull() | (p["ord"] > base["ord"])), by_ord
    )
    # Versions keep what their time held: a later DROP COLUMN does not rewrite them.
    no_drops = E.array().cast(
        ArrayType(StructType([StructField("ord", ord_type), StructField("cols", ArrayType(StringType()))]))
    )
    rebuilt = ~E.exists(later, lambda p: p["pending"])
    exists = (base_exists | (E.size(later) > 0)) & rebuilt
    return exists, merged_image(base_image, base["ord"], later, no_drops)


def shown_versions(
    spark: SparkSession, spec: SnapshotSpec, read: Input, carries: DataFrame | None, partial_images: bool
) -> DataFrame:
    """The run's versions (``row_versions``), line numbers filled in, materialised once.

    Partial key changes carry into the versions the rows the fold's ``chain_carries`` rebuilt
    (``carries``)."""
    found = row_versions(
        ignoring_unselected_tables(read.events, spec.tables), spec.as_of_ms, partial_images, carries
    )
    shown = with_split_lines(
        spark, read.files, found, quarantine=False, last=True, every_last=spec.with_metadata
    )
    return shown if shown is not found else found.localCheckpoint(eager=True)

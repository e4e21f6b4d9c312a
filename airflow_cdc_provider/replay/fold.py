"""The fold: one window and one aggregation per group (table, tag, key), as docs/design.md sets out.

Takes tagged events flagged for one AS OF (``keys.with_as_of_flags``) and, where a truncate or
column drop was applied, ``table_changes``. Gives one row per group: the latest "resetting" event
(insert, snapshot read, full-image update, delete) by position, picked with ``max_by``, and the
counts as sums (``counts.with_count_flags``): buffers of a fixed size, whatever the key's history.
For formats with partial images (Shareplex ``data``, Qlik ``columnMask``) also the partial updates,
merged after the fold (``resolve``) column by column in position order: latest writer wins.
Non-row records travel through the same aggregation under group tags, so one shuffle of one scan
yields the snapshot, the quarantine and every count; a table's DDL events (one group) also yield
the columns it added and dropped before AS OF (``DDL_CHANGES``).

``EventTerms`` (what each event contributes) and ``full_image_lists`` are shared with
``spans.fold_spans``, which folds several AS OFs in one pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql.types import ArrayType, BooleanType, StringType, StructField, StructType

from airflow_cdc_provider.formats.events import IMAGE_TYPE, OP_TRUNCATE, OP_UPDATE
from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.replay.counts import (
    COUNTING_ORDER_FIELDS,
    GROUP,
    group_hash,
    with_count_flags,
)
from airflow_cdc_provider.replay.keys import event_meta, ordering
from airflow_cdc_provider.replay.table_changes import ddl_change, type_signature
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr


def fold(keyed: DataFrame, changes: DataFrame | None, partial_images: bool = False) -> DataFrame:
    """One window and one aggregation per (table, tag, key): the folded state plus its counts.

    ``changes`` is ``table_changes`` of the events, or None for a single pass that assumes no
    truncate was applied (``group_counts.needs_table_changes`` says whether that held). For
    full-image formats every aggregation buffer has a fixed size: the latest reset (``max_by``),
    the last move to another key, counts as sums. Formats with partial images (``partial_images``)
    also keep lists: their moves to another key, the partial updates after the latest reset, and,
    for a key that moves, every reset and partial update, so that a key change carries the row's
    state at that moment (``_kept_in_lists``). Rows flagged ``BASE_ROW`` (an incremental
    run's starting state) are applied but never counted; ``BASE_ORD`` is then the position of the
    base's row of each key.
    """
    flagged, aggregates = _fold_aggregates(keyed, changes, partial_images)
    folded = flagged.groupBy(*GROUP).agg(*E.columns(aggregates))
    if not partial_images:
        folded = full_image_lists(folded)
    return folded.drop(C.GROUP_HASH)


@dataclass(frozen=True)
class EventTerms:
    """What each event contributes to its group's folded state, shared by ``fold`` and ``fold_spans``."""

    ord: Expr  # position order
    partial_update: Expr  # an applied update carrying only some columns
    reset: Expr  # an applied insert, read, full-image update or delete
    resetting: Expr  # what a reset leaves: struct(ord, op, after, unavailable)
    moved_away: Expr  # the old-key half of an applied key change
    typed: Expr  # the type signature of an applied row change or DDL event, else null
    ddl: Expr  # an applied DDL event's ``ddl_change``, else null
    listed: Expr  # ignored and quarantined records: their first is reported
    listing: Expr  # what the report of a listed record says
    counting: Expr  # the counting order's fields: the first event in it names the key columns
    counted: Expr  # read by the run: not a key change's second half, not a base row
    unpositioned: Expr  # counted, and its log position unreadable


def event_terms(keyed: DataFrame) -> EventTerms:
    """The ``EventTerms`` of ``keyed``'s events (flagged for AS OF, or for the spans' points)."""
    applied = E.col(C.APPLIED)
    from_base = E.col(C.BASE_ROW) if C.BASE_ROW in keyed.columns else E.lit(False)
    ddl = E.col(C.DDL_APPLIED)
    partial_update = applied & (E.col("op") == OP_UPDATE) & E.col("partial")
    not_moved = ~E.col(C.MOVED_AWAY)
    ord_ = ordering()
    counted = not_moved & ~from_base
    return EventTerms(
        ord=ord_,
        partial_update=partial_update,
        # The old-key half of a key change is kept apart (``MOVES_OUT``), not as a reset, so that the
        # row's state just before it can still be rebuilt and carried to the new key.
        reset=applied & ~partial_update & (E.col("op") != OP_TRUNCATE) & not_moved,
        resetting=E.struct(ord_.alias("ord"), E.col("op"), E.col("after"), E.col("unavailable")),
        moved_away=applied & E.col(C.MOVED_AWAY),
        typed=E.when((applied | ddl) & E.col("types").isNotNull(), type_signature(E.col("types"))),
        ddl=E.when(ddl & (E.col("types").isNotNull() | E.col("before").isNotNull()), ddl_change(ord_)),
        listed=E.col(C.TAG).isin(C.TAG_IGNORED, C.TAG_QUARANTINED),
        listing=E.struct(
            E.nullif(E.col("file"), E.lit("")).alias("file"),  # base rows without a file carry ""
            E.col("file_pos"),
            E.col("line"),
            E.col("sub_pos"),
            E.col("reason"),
            E.col("raw"),
        ),
        counting=E.struct(*[E.col(f) for f in COUNTING_ORDER_FIELDS]),
        counted=counted,
        unpositioned=E.col("log_pos_unreadable") & counted,
    )


def _fold_aggregates(
    keyed: DataFrame, changes: DataFrame | None, partial_images: bool
) -> tuple[DataFrame, list[Expr]]:
    """The fold's flagged events and its aggregations."""
    t = event_terms(keyed)
    applied = E.col(C.APPLIED)
    ord_ = t.ord
    # Events kept by ``clustered_for_fold`` carry the hash their partitioning and sort are built on.
    hashed = keyed if C.GROUP_HASH in keyed.columns else keyed.withColumn(C.GROUP_HASH, group_hash().column())
    # Partial-image formats: what a key's lists must keep (not for incremental runs, whose partials
    # older than the base's row must stay visible to ``unreplayable_partials``).
    pruned = partial_images and C.BASE_ROW not in keyed.columns
    flagged = with_count_flags(hashed, changes, _key_list_bounds(t) if pruned else None)
    lists = _list_aggregates(keyed, t, partial_images, pruned)
    return flagged, [
        *lists,
        E.count(E.when(t.counted, E.lit(1))).alias(C.EVENTS),
        E.count(E.when(E.col(C.AFTER_AS_OF) & ~E.col(C.MOVED_AWAY), E.lit(1))).alias(C.EVENTS_AFTER_AS_OF),
        E.count(E.when(t.unpositioned, E.lit(1))).alias(C.UNPOSITIONED),
        E.max_by(E.when(t.reset, t.resetting), E.when(t.reset, ord_)).alias(C.RESET),
        E.struct(*[E.sum(C.count_flag(name)).cast("long").alias(name) for name in C.COUNT_FIELDS]).alias(
            C.COUNTS
        ),
        E.max_by(E.when(applied, event_meta()), E.when(applied, ord_)).alias(C.LAST),
        E.max(E.when(applied, E.col("event_ms"))).alias(C.LAST_EVENT_MS),
        E.collect_set(t.typed).alias(C.TYPE_SIGS),
        E.collect_list(t.ddl).alias(C.DDL_CHANGES),
        E.min_by(E.when(t.listed, t.listing), E.when(t.listed, ord_)).alias(C.FIRST),
        E.first(E.col(C.KEY_COLS), E.lit(True)).alias(C.KEY_NAMES),
    ]


def _list_aggregates(keyed: DataFrame, t: EventTerms, partial_images: bool, pruned: bool) -> list[Expr]:
    """The fold's lists (partial images, moves), the base's position and the held-back counts."""
    ord_ = t.ord
    # A partial move also names its record: ``resolve`` quarantines it if its row cannot be rebuilt.
    partially = E.col(C.MOVED_PARTIALLY)
    move = E.struct(
        ord_.alias("ord"),
        E.col(C.NEW_KEY).alias("to"),
        partially.alias("partial"),
        E.when(partially, E.col("line")).alias("line"),
        E.when(partially, E.col("raw")).alias("raw"),
    )
    if partial_images:
        kept_reset, kept_partial = _kept_in_lists(t) if pruned else (t.reset, t.partial_update)
        lists = [
            E.collect_list(E.when(kept_reset, t.resetting)).alias(C.RESETS),
            E.collect_list(
                E.when(kept_partial, E.struct(ord_.alias("ord"), E.col("after"), E.col("unavailable")))
            ).alias(C.PARTIALS),
            E.collect_list(E.when(t.moved_away, move)).alias(C.MOVES_OUT),
        ]
    else:
        lists = [E.max(E.when(t.moved_away, ord_)).alias(C.LAST_MOVE)]
    if C.BASE_ROW in keyed.columns:
        lists.append(E.max(E.when(E.col(C.BASE_ROW), ord_)).alias(C.BASE_ORD))
    if C.HELD_BACK_BY_TX in keyed.columns:
        held = E.col(C.HELD_BACK_BY_TX) & ~E.col(C.MOVED_AWAY)
        lists += [
            E.count(E.when(held, E.lit(1))).alias(C.HELD_BACK),
            E.count(E.when(held & E.col(C.TX_FIRST), E.lit(1))).alias(C.HELD_BACK_TRANSACTIONS),
        ]
    return lists


def _key_list_bounds(t: EventTerms) -> dict[str, Expr]:
    """Per key, over all its events: whether it ever moves to another key, and its latest reset."""
    return {C.KEY_MOVES: E.max(t.moved_away), C.LAST_RESET: E.max(E.when(t.reset, t.ord))}


def _kept_in_lists(t: EventTerms) -> tuple[Expr, Expr]:
    """Which resets and partial images a key's lists keep (``_key_list_bounds`` read).

    ``RESETS`` serve only to rebuild a row just before a move to another key, so a key that never
    moves keeps none (its ``RESET`` is the latest). A partial image before the key's latest reset
    is overwritten by it, unless a move needs the state before that reset. So the lists no longer
    grow with every event of a hot key.
    """
    moves, last_reset = E.col(C.KEY_MOVES), E.col(C.LAST_RESET)
    after_last_reset = last_reset.isNull() | (t.ord > last_reset)
    return t.reset & moves, t.partial_update & (moves | after_last_reset)


def full_image_lists(folded: DataFrame) -> DataFrame:
    """Full images: the list shapes ``resolve`` reads, made from the fixed-size buffers."""
    ord_type = folded.schema[C.RESET].dataType["ord"].dataType
    partial_type = StructType(
        [
            StructField("ord", ord_type),
            StructField("after", IMAGE_TYPE),
            StructField("unavailable", ArrayType(StringType())),
        ]
    )
    move_type = StructType(
        [
            StructField("ord", ord_type),
            StructField("to", ArrayType(StringType())),
            StructField("partial", BooleanType()),
        ]
    )
    last_move = E.struct(
        E.col(C.LAST_MOVE).alias("ord"),
        E.null("array<string>").alias("to"),
        E.lit(False).alias("partial"),
    )
    folded = folded.withColumns(
        {
            C.PARTIALS: E.array().cast(ArrayType(partial_type)).column(),
            C.MOVES_OUT: E.when(E.col(C.LAST_MOVE).isNotNull(), E.array(last_move))
            .otherwise(E.array().cast(ArrayType(move_type)))
            .column(),
        }
    ).drop(C.LAST_MOVE)
    return folded

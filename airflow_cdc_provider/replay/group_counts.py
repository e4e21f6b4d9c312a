"""Counts: the fold's rows counted per (table, tag, reason), in one small Spark query.

Takes resolved rows (``resolve``; for several AS OFs, their spans). Gives a few ``Row``s per
table: everything the metrics need (events read, applied, after AS OF, the ``COUNT_FIELDS``, rows,
quarantine and ignored reasons) and what typing needs (declared type signatures, key names, the
final rows' value types and column orders), so typing takes no query of its own. Also the tests
a run makes on them (``needs_table_changes``, ``partial_updates``). See docs/contract.md,
"``_cdc_metrics.json``".
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr

# The sums of ``_group_aggregates`` that ``span_group_counts`` adds up again over AS OF indexes.
_SUMMED = (C.EVENTS, C.EVENTS_AFTER_AS_OF, C.UNPOSITIONED, C.ROWS, *C.COUNT_FIELDS, C.UNKNOWN_VALUES)


def final_row() -> Expr:
    """A resolved row that is a snapshot's row: the rows typing reads."""
    return (E.col(C.TAG) == C.TAG_ROW) & E.col(C.EXISTS)


def group_counts(resolved: DataFrame) -> list[Row]:
    """One small row per (table, tag, reason): everything the metrics need, in one Spark query.

    The same rows carry what typing needs (declared signatures, key names, the final rows' value
    types and column orders), so typing takes no query of its own.
    """
    listed = E.col(C.TAG).isin(C.TAG_IGNORED, C.TAG_QUARANTINED)
    final = final_row()
    held_back = [E.sum(name).alias(name) for name in C.HELD_BACK_COUNTS if name in resolved.columns]
    return (
        resolved.groupBy("table", C.TAG, E.when(listed, E.col(f"{C.FIRST}.reason")).alias("reason").column())
        .agg(
            *E.columns(
                *_group_aggregates(),
                *held_back,
                # What typing infers: the final rows' value types, and the orders they write columns in.
                E.schema_of_variant_agg(E.when(final, E.to_variant_object(C.IMAGE))).alias(C.ROW_SCHEMA),
                E.collect_set(E.when(final, E.map_keys(C.IMAGE))).alias(C.SEQUENCES),
            )
        )
        .collect()
    )


def _group_aggregates() -> list[Expr]:
    """The counts of ``group_counts`` that sum (or pick) over a group's rows, whatever splits them."""
    c = E.col(C.COUNTS)
    return [
        *[E.sum(name).alias(name) for name in (C.EVENTS, C.EVENTS_AFTER_AS_OF, C.UNPOSITIONED)],
        E.sum(E.col(C.EXISTS).cast("long")).alias(C.ROWS),
        *[E.sum(c[name]).alias(name) for name in C.COUNT_FIELDS],
        E.max(C.LAST_EVENT_MS).alias(C.LAST_EVENT_MS),
        # Distinct per-key signature sets: one per schema version, however many keys.
        E.collect_set(E.when(E.col(C.TAG).isin(C.TAG_ROW, C.TAG_IGNORED), E.col(C.TYPE_SIGS))).alias(
            C.TYPE_SIGS
        ),
        E.first(E.when(E.col(C.TAG) == C.TAG_ROW, E.col(C.KEY_NAMES)), True).alias(C.KEY_NAMES),
        E.sum(E.size(E.filter(C.DDL_CHANGES, lambda d: E.size(d["cols"]) > 0))).alias(C.DROPS_COUNT),
        E.sum(E.when(final_row() & E.col(C.UNKNOWN).isNotNull(), E.size(C.UNKNOWN))).alias(C.UNKNOWN_VALUES),
    ]


def span_group_counts(spans: DataFrame, span_from: str, span_to: str, index: str) -> list[Row]:
    """``group_counts`` of every AS OF index at once, from rows that hold over ``[span_from, span_to)``.

    Exploding each row to every index it holds at and aggregating that costs one typing
    (``to_variant_object``, the schema of each final row) per row and index. Rows are first
    aggregated per span and row shape, with one final row kept per shape (a row's shape is all
    ``schema_of_variant_agg`` reads of it); only those few rows are exploded to their indexes.
    ``OUT_OF_ORDER`` (``spans.fold_spans``), where the rows carry it, is passed on as its largest value.
    """
    out_of_order = [E.max(C.OUT_OF_ORDER).alias(C.OUT_OF_ORDER)] if C.OUT_OF_ORDER in spans.columns else []
    listed = E.col(C.TAG).isin(C.TAG_IGNORED, C.TAG_QUARANTINED)
    final = final_row()
    shaped = spans.select(
        "*",
        *E.columns(
            E.when(listed, E.col(f"{C.FIRST}.reason")).alias("reason"),
            E.when(final, E.to_variant_object(C.IMAGE)).alias(C.ROW_OBJECT),
        ),
    ).select("*", *E.columns(E.schema_of_variant(C.ROW_OBJECT).alias(C.ROW_SHAPE)))
    per_span = shaped.groupBy(span_from, span_to, "table", C.TAG, "reason", C.ROW_SHAPE).agg(
        *E.columns(
            *_group_aggregates(),
            E.any_value(C.ROW_OBJECT, True).alias(C.ROW_OBJECT),
            E.collect_set(E.when(final, E.map_keys(C.IMAGE))).alias(C.SEQUENCES),
            *out_of_order,
        )
    )
    indexes = E.sequence(E.col(span_from), E.col(span_to) - 1)
    exploded = per_span.select("*", F.explode(indexes.column()).alias(index))
    return (
        exploded.groupBy(index, "table", C.TAG, "reason")
        .agg(
            *E.columns(
                *[E.sum(name).alias(name) for name in _SUMMED],
                E.max(C.LAST_EVENT_MS).alias(C.LAST_EVENT_MS),
                E.array_distinct(E.flatten(E.collect_list(C.TYPE_SIGS))).alias(C.TYPE_SIGS),
                E.first(C.KEY_NAMES, True).alias(C.KEY_NAMES),
                E.sum(C.DROPS_COUNT).alias(C.DROPS_COUNT),
                E.schema_of_variant_agg(C.ROW_OBJECT).alias(C.ROW_SCHEMA),
                E.array_distinct(E.flatten(E.collect_list(C.SEQUENCES))).alias(C.SEQUENCES),
                *out_of_order,
            )
        )
        .collect()
    )


def needs_table_changes(groups: list[Row]) -> bool:
    """Whether an applied truncate or column drop changes rows of keys its table's other events never name."""
    applied_truncates = any(
        g[C.TAG] == C.TAG_TRUNCATE and (g[C.EVENTS] or 0) > (g[C.EVENTS_AFTER_AS_OF] or 0) for g in groups
    )
    return applied_truncates or any((g[C.DROPS_COUNT] or 0) > 0 for g in groups)


def quarantine_reasons(groups: list[Row]) -> dict[str, int]:
    """How many records were quarantined for each reason, sorted by reason."""
    reasons: dict[str, int] = {}
    for g in groups:
        if g[C.TAG] == C.TAG_QUARANTINED:
            reasons[g["reason"]] = reasons.get(g["reason"], 0) + int(g[C.EVENTS] or 0)
    return dict(sorted(reasons.items()))


def partial_updates(groups: list[Row]) -> bool:
    """Whether the fold applied partial images (for Debezium: updates with unavailable values)."""
    return any((g[C.PARTIAL_UPDATES] or 0) > 0 for g in groups if g[C.TAG] == C.TAG_ROW)


def unavailable_values(resolved: DataFrame, groups: list[Row]) -> dict[str, dict[str, int]]:
    """``{table: {column: count}}``: the snapshot's values that are null because their column held
    an unavailable-value placeholder with no earlier version (``resolve.unknown_columns``).

    One small query, run only when ``groups`` count such values.
    """
    if not any((g[C.UNKNOWN_VALUES] or 0) > 0 for g in groups):
        return {}
    found = (
        resolved.where((final_row() & E.col(C.UNKNOWN).isNotNull()).column())
        .select("table", F.explode(C.UNKNOWN).alias(C.UNAVAILABLE_COLUMN))
        .groupBy("table", C.UNAVAILABLE_COLUMN)
        .count()
        .collect()
    )
    counts: dict[str, dict[str, int]] = {}
    for r in sorted(found, key=lambda r: (r["table"], r[C.UNAVAILABLE_COLUMN])):
        counts.setdefault(r["table"], {})[r[C.UNAVAILABLE_COLUMN]] = r["count"]
    return counts

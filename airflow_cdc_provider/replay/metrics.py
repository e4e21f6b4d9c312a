"""The metrics of a run: the counts of its one aggregation, as ``_cdc_metrics.json`` reports them."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_cdc_provider.contract.as_of import format_as_of
from airflow_cdc_provider.contract.metrics import QUARANTINE_DIR
from airflow_cdc_provider.contract.tables import TableNameError, split_qualified
from airflow_cdc_provider.replay.fold import (
    COUNTS,
    OUT_OF_ORDER,
    TAG_IGNORED,
    TAG_QUARANTINED,
    TAG_ROW,
    TAG_TRUNCATE,
)
from airflow_cdc_provider.replay.output import OutputTarget
from airflow_cdc_provider.replay.plan import Input
from airflow_cdc_provider.replay.spec import SnapshotSpec
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr

log = logging.getLogger(__name__)

# The fold's per-key counts under --whole-transactions (fold.HELD_BACK).
HELD_BACK_COUNTS = ("held_back", "held_back_transactions")


def final_row() -> Expr:
    """A resolved row that is a snapshot's row: the rows typing reads."""
    return (E.col("_tag") == TAG_ROW) & E.col("exists")


def group_counts(resolved: DataFrame) -> list:
    """One small row per (table, tag, reason): everything the metrics need, in one Spark query.

    The same rows carry what typing needs (declared signatures, key names, the final rows' value
    types and column orders), so typing takes no query of its own.
    """
    listed = E.col("_tag").isin(TAG_IGNORED, TAG_QUARANTINED)
    final = final_row()
    held_back = [E.sum(name).alias(name) for name in HELD_BACK_COUNTS if name in resolved.columns]
    return (
        resolved.groupBy("table", "_tag", E.when(listed, E.col("first.reason")).alias("reason").column())
        .agg(
            *E.columns(
                *_group_aggregates(),
                *held_back,
                # What typing infers: the final rows' value types, and the orders they write columns in.
                E.schema_of_variant_agg(E.when(final, E.to_variant_object("image"))).alias("row_schema"),
                E.collect_set(E.when(final, E.map_keys("image"))).alias("sequences"),
            )
        )
        .collect()
    )


def _group_aggregates() -> list[Expr]:
    """The counts of ``group_counts`` that sum (or pick) over a group's rows, whatever splits them."""
    c = E.col("counts")
    return [
        *[E.sum(name).alias(name) for name in ("n", "after_as_of", "unpositioned")],
        E.sum(E.col("exists").cast("long")).alias("rows"),
        *[E.sum(c[name]).alias(name) for name in COUNTS],
        E.max("last_event_ms").alias("last_event_ms"),
        # Distinct per-key signature sets: one per schema version, however many keys.
        E.collect_set(E.when(E.col("_tag").isin(TAG_ROW, TAG_IGNORED), E.col("type_sigs"))).alias(
            "type_sigs"
        ),
        E.first(E.when(E.col("_tag") == TAG_ROW, E.col("key_names")), True).alias("key_names"),
        E.sum(E.size(E.filter("ddl_changes", lambda d: E.size(d["cols"]) > 0))).alias("drops"),
        E.sum(E.when(final_row() & E.col("unknown").isNotNull(), E.size("unknown"))).alias("unknown_values"),
    ]


def span_group_counts(spans: DataFrame, span_from: str, span_to: str, index: str) -> list:
    """``group_counts`` of every AS OF index at once, from rows that hold over ``[span_from, span_to)``.

    Exploding each row to every index it holds at and aggregating that costs one typing
    (``to_variant_object``, the schema of each final row) per row and index. Rows are first
    aggregated per span and row shape, with one final row kept per shape (a row's shape is all
    ``schema_of_variant_agg`` reads of it); only those few rows are exploded to their indexes.
    ``OUT_OF_ORDER`` (``fold_spans``), where the rows carry it, is passed on as its largest value.
    """
    out_of_order = [E.max(OUT_OF_ORDER).alias(OUT_OF_ORDER)] if OUT_OF_ORDER in spans.columns else []
    listed = E.col("_tag").isin(TAG_IGNORED, TAG_QUARANTINED)
    final = final_row()
    shaped = spans.select(
        "*",
        *E.columns(
            E.when(listed, E.col("first.reason")).alias("reason"),
            E.when(final, E.to_variant_object("image")).alias("_object"),
        ),
    ).select("*", *E.columns(E.schema_of_variant("_object").alias("_shape")))
    per_span = shaped.groupBy(span_from, span_to, "table", "_tag", "reason", "_shape").agg(
        *E.columns(
            *_group_aggregates(),
            E.any_value("_object", True).alias("_object"),
            E.collect_set(E.when(final, E.map_keys("image"))).alias("sequences"),
            *out_of_order,
        )
    )
    indexes = E.sequence(E.col(span_from), E.col(span_to) - 1)
    exploded = per_span.select("*", F.explode(indexes.column()).alias(index))
    return (
        exploded.groupBy(index, "table", "_tag", "reason")
        .agg(
            *E.columns(
                *[
                    E.sum(name).alias(name)
                    for name in ("n", "after_as_of", "unpositioned", "rows", *COUNTS, "unknown_values")
                ],
                E.max("last_event_ms").alias("last_event_ms"),
                E.array_distinct(E.flatten(E.collect_list("type_sigs"))).alias("type_sigs"),
                E.first("key_names", True).alias("key_names"),
                E.sum("drops").alias("drops"),
                E.schema_of_variant_agg("_object").alias("row_schema"),
                E.array_distinct(E.flatten(E.collect_list("sequences"))).alias("sequences"),
                *out_of_order,
            )
        )
        .collect()
    )


def needs_table_changes(groups: list) -> bool:
    """Whether an applied truncate or column drop changes rows of keys its table's other events never name."""
    applied_truncates = any(
        g["_tag"] == TAG_TRUNCATE and (g["n"] or 0) > (g["after_as_of"] or 0) for g in groups
    )
    return applied_truncates or any((g["drops"] or 0) > 0 for g in groups)


def quarantine_reasons(groups: list) -> dict[str, int]:
    """How many records were quarantined for each reason, sorted by reason."""
    reasons: dict[str, int] = {}
    for g in groups:
        if g["_tag"] == TAG_QUARANTINED:
            reasons[g["reason"]] = reasons.get(g["reason"], 0) + int(g["n"] or 0)
    return dict(sorted(reasons.items()))


def partial_updates(groups: list) -> bool:
    """Whether the fold applied partial images (for Debezium: updates with unavailable values)."""
    return any((g["partial_updates"] or 0) > 0 for g in groups if g["_tag"] == TAG_ROW)


def unavailable_values(resolved: DataFrame, groups: list) -> dict[str, dict[str, int]]:
    """``{table: {column: count}}``: the snapshot's values that are null because their column held
    an unavailable-value placeholder with no earlier version (``resolve.unknown_columns``).

    One small query, run only when ``groups`` count such values.
    """
    if not any((g["unknown_values"] or 0) > 0 for g in groups):
        return {}
    found = (
        resolved.where((final_row() & E.col("unknown").isNotNull()).column())
        .select("table", F.explode("unknown").alias("column"))
        .groupBy("table", "column")
        .count()
        .collect()
    )
    counts: dict[str, dict[str, int]] = {}
    for r in sorted(found, key=lambda r: (r["table"], r["column"])):
        counts.setdefault(r["table"], {})[r["column"]] = r["count"]
    return counts


def table_parts(name: str) -> tuple[str, ...]:
    """The parts of a table's qualified name; a name a user gave that does not parse is one part."""
    try:
        return split_qualified(name)
    except TableNameError:
        return (name,)


def build_metrics(
    spec: SnapshotSpec,
    target: OutputTarget,
    groups,
    table_paths,
    read: Input,
    quarantine_count: int,
    unavailable: dict[str, dict[str, int]] | None = None,
) -> dict:
    """The metrics object; ``unavailable`` is ``unavailable_values`` of the run's rows."""

    def zero_table() -> dict:
        return {
            "rows": 0,
            "path": None,
            "parts": [],
            "inserts": 0,
            "updates": 0,
            "deletes": 0,
            "last_event_ms": None,
            "updates_of_unknown_key": 0,
            "deletes_of_unknown_key": 0,
            "truncates": 0,
            "unavailable_values": {},
            "events": {
                "read": 0,
                "applied": 0,
                "after_as_of": 0,
                "ignored": 0,
                "duplicates": 0,
                "quarantined": 0,
            },
        }

    totals = {"read": 0, "applied": 0, "after_as_of": 0, "ignored": 0, "duplicates": 0, "quarantined": 0}
    tables: dict[str, dict] = {t: zero_table() for t in table_paths}
    ignored_reasons: dict[str, int] = {}
    for g in groups:
        tag, n = g["_tag"], int(g["n"] or 0)
        after = int(g["after_as_of"] or 0)
        entry = {
            "read": n,
            "applied": 0,
            "after_as_of": after,
            "ignored": 0,
            "duplicates": 0,
            "quarantined": 0,
        }
        t = tables.get(g["table"]) if g["table"] in tables else None
        if tag == TAG_ROW:
            applied = sum(int(g[k] or 0) for k in ("inserts", "updates", "deletes", "deletes_unknown"))
            entry.update(applied=applied, duplicates=int(g["duplicates"] or 0))
            if t is not None:
                t["rows"] += int(g["rows"] or 0)
                t["inserts"] += int(g["inserts"] or 0)
                t["updates"] += int(g["updates"] or 0)
                t["deletes"] += int(g["deletes"] or 0)
                t["updates_of_unknown_key"] += int(g["updates_unknown"] or 0)
                t["deletes_of_unknown_key"] += int(g["deletes_unknown"] or 0)
                if g["last_event_ms"] is not None:
                    t["last_event_ms"] = max(t["last_event_ms"] or g["last_event_ms"], g["last_event_ms"])
        elif tag == TAG_TRUNCATE:
            entry.update(applied=n - after)
            if t is not None:
                t["truncates"] += n - after
        elif tag == TAG_IGNORED:
            entry.update(ignored=n)
            ignored_reasons[g["reason"]] = ignored_reasons.get(g["reason"], 0) + n
        elif tag == TAG_QUARANTINED:
            entry.update(quarantined=n)
        for k, v in entry.items():
            totals[k] += v
            if t is not None:
                t["events"][k] += v
    for name, t in tables.items():
        t["path"] = table_paths[name]
        t["parts"] = list(table_parts(name))
        t["unavailable_values"] = dict((unavailable or {}).get(name, {}))
        earlier = read.base.tables.get(name, {}).get("last_event_ms") if read.base is not None else None
        if earlier is not None:
            t["last_event_ms"] = max(t["last_event_ms"] or earlier, earlier)
    files, skipped = read.files, [f for group in read.skipped.values() for f in group]
    metrics = {
        "format": spec.source_format,
        "as_of": format_as_of(spec.as_of_ms),
        "as_of_ms": spec.as_of_ms,
        "output": target.uri,
        "rows": sum(t["rows"] for t in tables.values()),
        "events": totals,
        "tables": tables,
        "ignored": dict(sorted(ignored_reasons.items())),
        "quarantine": {
            "records": quarantine_count,
            "path": target.final_uri(QUARANTINE_DIR) if quarantine_count else None,
            "reasons": quarantine_reasons(groups),
        },
        "files": {
            "read": len(files),
            "bytes": sum(f.size for f in files),
            "skipped": len(skipped),
            "bytes_skipped": sum(f.size for f in skipped),
            "skipped_because": {why: len(group) for why, group in read.skipped.items() if group},
        },
        # Records whose log position could not be read, ordered by event time and place instead.
        "ordering": {"unreadable_log_position": sum(int(g["unpositioned"] or 0) for g in groups)},
        "mode": "incremental" if read.base is not None else "full",
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    if spec.max_quarantined is not None:
        # Only with --max-quarantined: the limit, and how many records it allowed this run.
        metrics["quarantine"]["limit"] = spec.max_quarantined.text
        metrics["quarantine"]["allowed"] = spec.max_quarantined.allowed(totals["read"])
    if spec.whole_transactions:
        # Row changes on time for AS OF whose transaction is not; they count in events.after_as_of.
        metrics["transactions"] = {
            "whole": True,
            "held_back": sum(int(g["held_back_transactions"] or 0) for g in groups),
            "events_held_back": sum(int(g["held_back"] or 0) for g in groups),
        }
    if read.incremental is not None:
        metrics["incremental"] = read.incremental
    return metrics


def with_versions(metrics: dict, versions: dict[str, int]) -> dict:
    """A history's metrics: ``versions`` beside ``rows`` (the current versions), per table and in all."""
    out = {}
    for name, value in metrics.items():
        out[name] = value
        if name == "rows":
            out["versions"] = sum(versions.values())
    for table, entry in metrics["tables"].items():
        entry_out = {}
        for name, value in entry.items():
            entry_out[name] = value
            if name == "rows":
                entry_out["versions"] = versions.get(table, 0)
        out["tables"][table] = entry_out
    return out

"""The fold: every rule of DESIGN.md section 4, as one aggregation per (table, key).

Canonical events are keyed, split into what is applied and what is only counted, and grouped
once. Per key the aggregation keeps
  * the latest "resetting" event (insert, snapshot read, full-image update, delete) by position,
    picked with ``max_by`` so Spark combines map-side and ships one candidate per key per task;
  * the partial-image updates (Shareplex ``data``, Qlik ``columnMask``), merged after the fold
    column by column in position order on top of the latest reset: latest writer wins;
  * a compact list of (position, op, content hash) from which the counts are derived in position
    order: exact duplicates, deletes of unknown keys, updates that create their row, truncates.
Non-row records travel through the same aggregation under group tags, so one shuffle of one scan
yields the snapshot, the quarantine and every count; a table's DDL events (one group) also
yield the columns it added and dropped before AS OF (``ddl_changes``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from airflow_cdc_provider.formats.events import (
    IGNORED_DDL,
    IMAGE_TYPE,
    KIND_CHANGE,
    KIND_IGNORED,
    KIND_QUARANTINED,
    OP_DELETE,
    OP_INSERT,
    OP_READ,
    OP_TRUNCATE,
    OP_UPDATE,
    Q_MISSING_KEY,
    empty_image,
    plan_barrier,
)

# Group tags.
TAG_ROW = "R"  # a keyed row change
TAG_TRUNCATE = "T"
TAG_IGNORED = "I"
TAG_QUARANTINED = "Q"
TAG_NO_KEY = "K"  # row changes of a table nobody gave a key for: a configuration error

# Op codes in the counting list.
_OP_CODE = {OP_INSERT: 1, OP_READ: 1, OP_UPDATE: 2, OP_DELETE: 3}
OP_CODE_MOVED_IN = 4


@dataclass(frozen=True)
class KeyConfig:
    """``--key``: default key columns, and per-table overrides (``TABLE=COL,COL``)."""

    default: tuple[str, ...] = ()
    per_table: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def column_for(self, table: Column) -> Column:
        keys: Column = F.lit(list(self.default)) if self.default else F.lit(None).cast("array<string>")
        for name, cols in self.per_table:
            keys = F.when((table == name) | table.endswith("." + name), F.lit(list(cols))).otherwise(keys)
        return keys


def ordering(e: DataFrame) -> Column:
    """Source log position, then event time, then place in the landing (file, record, row)."""
    return F.struct(
        F.col("log_pos").alias("log_pos"),
        F.col("event_ms").alias("event_ms"),
        F.col("file").alias("file"),
        F.col("file_pos").alias("file_pos"),
        F.coalesce(F.col("sub_pos"), F.lit(0)).alias("sub_pos"),
    )


def content_hash() -> Column:
    """Identity of an exact duplicate: same table, same position, same record as landed."""
    return F.xxhash64(F.col("table"), F.col("log_pos"), F.col("event_ms"), F.col("raw"), F.col("sub_pos"))


def _key_values(image: Column, fallback: Column, record_cols: Column, keys: KeyConfig) -> Column:
    """Key values as strings (variants cannot be grouped): from ``image``, else from ``fallback``.

    Key columns named by ``--key`` are known when the plan is built, so their lookups are plain
    expressions; only records that name their own key columns need a (slower, interpreted)
    per-record walk.
    """

    def one(c: Column) -> Column:
        v = F.when(F.map_contains_key(image, c), image[c]).otherwise(fallback[c])
        return F.when(F.is_variant_null(v), F.lit(None)).otherwise(F.to_json(v))

    def static(cols: tuple[str, ...]) -> Column:
        return F.array(*[one(F.lit(c)) for c in cols]) if cols else F.lit(None).cast("array<string>")

    configured = static(keys.default)
    table = F.col("table")
    for name, cols in keys.per_table:
        configured = F.when((table == name) | table.endswith("." + name), static(cols)).otherwise(configured)
    return F.when(record_cols.isNull(), configured).otherwise(F.transform(record_cols, one))


def _new_key(keys: KeyConfig) -> Column:
    """The key a row change leaves its row under (a delete's comes from its before image)."""
    after_or_before = F.coalesce(F.col("after"), empty_image())
    before_or_after = F.coalesce(F.col("before"), empty_image())
    record_cols = F.col("key_cols")
    return F.when(
        F.col("op") == OP_DELETE, _key_values(before_or_after, after_or_before, record_cols, keys)
    ).otherwise(_key_values(after_or_before, before_or_after, record_cols, keys))


def _lacks_key(key_cols: Column, new_key: Column) -> Column:
    is_row = (F.col("kind") == KIND_CHANGE) & (F.col("op") != OP_TRUNCATE)
    return is_row & key_cols.isNotNull() & (F.size(F.array_compact(new_key)) < F.size(new_key))


def lacks_key(keys: KeyConfig) -> Column:
    """Row changes the fold will quarantine as "missing key" (callers keep their raw text)."""
    return F.coalesce(
        _lacks_key(F.coalesce(F.col("key_cols"), keys.column_for(F.col("table"))), _new_key(keys)),
        F.lit(False),
    )


def keyed_events(events: DataFrame, keys: KeyConfig, as_of_ms: int) -> DataFrame:
    """Attach group tag and key to every canonical event; split key-changing updates in two."""
    key_cols = F.coalesce(F.col("key_cols"), keys.column_for(F.col("table")))
    after_or_before = F.coalesce(F.col("after"), empty_image())
    before_or_after = F.coalesce(F.col("before"), empty_image())
    old_key = _key_values(before_or_after, after_or_before, F.col("key_cols"), keys)
    staged = plan_barrier(events).select(
        "*",
        key_cols.alias("_key_cols"),
        _new_key(keys).alias("_new_key"),
        old_key.alias("_old_key"),
        ordering(events).alias("_ord"),
    )
    missing_key = F.coalesce(_lacks_key(F.col("_key_cols"), F.col("_new_key")), F.lit(False))
    kind = F.when(missing_key, F.lit(KIND_QUARANTINED)).otherwise(F.col("kind"))
    reason = F.when(missing_key, F.lit(Q_MISSING_KEY)).otherwise(F.col("reason"))
    staged = plan_barrier(staged.withColumns({"kind": kind, "reason": reason}))

    is_change = F.col("kind") == KIND_CHANGE
    is_row = is_change & (F.col("op") != OP_TRUNCATE)
    tag = (
        F.when(F.col("kind") == KIND_IGNORED, F.lit(TAG_IGNORED))
        .when(F.col("kind") == KIND_QUARANTINED, F.lit(TAG_QUARANTINED))
        .when(F.col("op") == OP_TRUNCATE, F.lit(TAG_TRUNCATE))
        .when(F.col("_key_cols").isNull(), F.lit(TAG_NO_KEY))
        .otherwise(F.lit(TAG_ROW))
    )
    group_key = (
        F.when(tag == TAG_ROW, F.col("_new_key"))
        .when(tag == TAG_IGNORED, F.array(F.col("reason")))
        .when(
            tag == TAG_QUARANTINED,
            F.array(
                F.col("file"),
                F.col("file_pos").cast("string"),
                F.coalesce(F.col("sub_pos"), F.lit(0)).cast("string"),
            ),
        )
        .otherwise(F.array().cast("array<string>"))
    )
    key_moved = (
        is_row
        & (F.col("op") == OP_UPDATE)
        & (F.col("_old_key") != F.col("_new_key"))
        & F.col("before").isNotNull()
    )
    applied = F.coalesce(F.col("event_ms"), F.lit(0)) <= F.lit(as_of_ms)
    is_ddl = (F.col("kind") == KIND_IGNORED) & (F.col("reason") == IGNORED_DDL)
    keyed = staged.select(
        "*",
        tag.alias("_tag"),
        group_key.alias("_key"),
        (is_change & applied).alias("_applied"),
        (is_ddl & applied).alias("_ddl_applied"),
        (is_change & ~applied).alias("_after_as_of"),
        F.col("_content_hash").alias("_hash"),
        F.when(key_moved, F.array(F.lit(False), F.lit(True)))
        .otherwise(F.array(F.lit(False)))
        .alias("_split"),
        F.coalesce(key_moved, F.lit(False)).alias("_key_moved"),
    )
    # A key-changing update also deletes the old key, at the same position (never counted itself).
    keyed = plan_barrier(keyed).select("*", F.explode_outer("_split").alias("_moved_away")).drop("_split")
    return keyed.select(
        *[c for c in keyed.columns if c not in ("_key", "op", "after", "partial")],
        F.when(F.col("_moved_away"), F.col("_old_key")).otherwise(F.col("_key")).alias("_key"),
        F.when(F.col("_moved_away"), F.lit(OP_DELETE)).otherwise(F.col("op")).alias("op"),
        F.when(F.col("_moved_away"), F.lit(None).cast(IMAGE_TYPE)).otherwise(F.col("after")).alias("after"),
        F.when(F.col("_moved_away"), F.lit(False))
        .otherwise(F.coalesce(F.col("partial"), F.lit(False)))
        .alias("partial"),
        (F.col("_moved_away") & F.coalesce(F.col("partial"), F.lit(False))).alias("_moved_partially"),
    )


def fold(keyed: DataFrame, keep_resets: bool = False) -> DataFrame:
    """One aggregation per (table, tag, key): the folded state plus what the counts need.

    ``keep_resets`` also keeps every resetting image, not only the latest (``resets``): formats with
    partial images need a row's state at the moment of a key change, which may lie before it.
    Rows flagged ``_base`` (an incremental run's starting state) are applied but never counted;
    ``base_ord`` is then the position of the base's row of each key.
    """
    applied = F.col("_applied")
    from_base = F.col("_base") if "_base" in keyed.columns else F.lit(False)
    ddl = F.col("_ddl_applied")
    partial_update = applied & (F.col("op") == OP_UPDATE) & F.col("partial")
    moved_away = applied & F.col("_moved_away")
    # The old-key half of a key change is kept apart (``moves_out``), not as a reset, so that the
    # row's state just before it can still be rebuilt and carried to the new key.
    reset = applied & ~partial_update & (F.col("op") != OP_TRUNCATE) & ~F.col("_moved_away")
    ord_ = F.col("_ord")
    op_code = F.lit(0)
    for op, code in _OP_CODE.items():
        op_code = F.when(F.col("op") == op, F.lit(code)).otherwise(op_code)
    # The new-key half of a key-changing update: an update of a row that existed (under its old key).
    op_code = F.when(F.col("_key_moved") & ~F.col("_moved_away"), F.lit(OP_CODE_MOVED_IN)).otherwise(op_code)
    last_meta = F.struct(
        F.col("op"),
        F.col("event_ms"),
        F.col("log_pos"),
        F.col("file"),
        F.col("line"),
        F.col("file_pos"),
        F.col("sub_pos"),
    )
    counted = applied & ~F.col("_moved_away") & ~from_base
    # A leading 64-bit hash makes the aggregation's sort (it falls back to sorting past a few
    # hundred keys per task) compare longs instead of table names and key arrays.
    group_hash = F.xxhash64("table", "_tag", "_key").alias("_group_hash")
    resetting = F.struct(ord_.alias("ord"), F.col("op").alias("op"), F.col("after").alias("after"))
    optional = [F.collect_list(F.when(reset, resetting)).alias("resets")] if keep_resets else []
    if "_base" in keyed.columns:
        optional.append(F.max(F.when(from_base, ord_)).alias("base_ord"))
    return (
        keyed.groupBy(group_hash, "table", "_tag", "_key")
        .agg(
            *optional,
            F.count(F.when(~F.col("_moved_away") & ~from_base, 1)).alias("n"),
            F.count(F.when(F.col("_after_as_of") & ~F.col("_moved_away"), 1)).alias("after_as_of"),
            F.max_by(F.when(reset, resetting), F.when(reset, ord_)).alias("reset"),
            F.collect_list(
                F.when(partial_update, F.struct(ord_.alias("ord"), F.col("after").alias("after")))
            ).alias("partials"),
            F.collect_list(
                F.when(
                    moved_away,
                    F.struct(
                        ord_.alias("ord"),
                        F.col("_new_key").alias("to"),
                        F.col("_moved_partially").alias("partial"),
                    ),
                )
            ).alias("moves_out"),
            F.collect_list(
                F.when(
                    applied,
                    F.struct(
                        ord_.alias("ord"),
                        op_code.alias("op"),
                        F.col("_hash").alias("h"),
                        counted.alias("counted"),
                    ),
                )
            ).alias("history"),
            F.max_by(F.when(applied, last_meta), F.when(applied, ord_)).alias("last"),
            F.max(F.when(applied, F.col("event_ms"))).alias("last_event_ms"),
            F.collect_set(
                F.when((applied | ddl) & F.col("types").isNotNull(), F.map_entries(F.col("types")))
            ).alias("type_sigs"),
            F.collect_list(
                F.when(
                    ddl & (F.col("types").isNotNull() | F.col("before").isNotNull()),
                    F.struct(
                        ord_.alias("ord"),
                        F.coalesce(F.map_keys("types"), F.array().cast("array<string>")).alias("added"),
                        F.coalesce(F.map_keys("before"), F.array().cast("array<string>")).alias("cols"),
                    ),
                )
            ).alias("ddl_changes"),
            F.min_by(F.struct("file", "file_pos", "line", "sub_pos", "reason", "raw"), F.col("_ord")).alias(
                "first"
            ),
            F.first("_key_cols", ignorenulls=True).alias("key_names"),
        )
        .drop("_group_hash")
    )

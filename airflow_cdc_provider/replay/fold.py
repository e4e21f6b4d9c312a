"""The fold: every rule of DESIGN.md section 4, as one window and one aggregation per (table, key).

Canonical events are keyed, split into what is applied and what is only counted, and grouped
once. A window over each key's events in position order marks what each one adds to the counts
(exact duplicates, deletes of unknown keys, updates that create their row); the aggregation over
the same partitions and sort then keeps per key
  * the latest "resetting" event (insert, snapshot read, full-image update, delete) by position,
    picked with ``max_by``, and the counts as sums: buffers of a fixed size, whatever the key's history;
  * for formats with partial images (Shareplex ``data``, Qlik ``columnMask``) also the partial
    updates, merged after the fold column by column in position order: latest writer wins.
Non-row records travel through the same aggregation under group tags, so one shuffle of one scan
yields the snapshot, the quarantine and every count; a table's DDL events (one group) also
yield the columns it added and dropped before AS OF (``ddl_changes``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, BooleanType, StringType, StructField, StructType

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


def with_keys(events: DataFrame, keys: KeyConfig) -> DataFrame:
    """Decoded events as the run keeps them: keys attached, and only what is read after keying.

    The keys (``_key_cols``, ``_new_key``, and ``_old_key`` where a before image could move the row)
    are computed once, here, so that neither the held events nor the fold walk the images again.
    The before image is kept only for DDL events (the columns they drop) and the record's text only
    for what the fold will quarantine; a content hash stands in for it in duplicate detection.
    """
    key_cols = F.coalesce(F.col("key_cols"), keys.column_for(F.col("table")))
    old_key = _key_values(F.col("before"), F.coalesce(F.col("after"), empty_image()), F.col("key_cols"), keys)
    keyed = plan_barrier(events).select(
        "*",
        key_cols.alias("_key_cols"),
        _new_key(keys).alias("_new_key"),
        F.when(F.col("before").isNotNull(), old_key).alias("_old_key"),
    )
    lacks_key = F.coalesce(_lacks_key(F.col("_key_cols"), F.col("_new_key")), F.lit(False))
    is_ddl = (F.col("kind") == KIND_IGNORED) & (F.col("reason") == IGNORED_DDL)
    return plan_barrier(keyed).withColumns(
        {
            "_content_hash": content_hash(),
            "raw": F.when((F.col("kind") == KIND_QUARANTINED) | lacks_key, F.col("raw")),
            "before": F.when(is_ddl, F.col("before")),
        }
    )


def keyed_events(events: DataFrame, as_of_ms: int) -> DataFrame:
    """Attach group tag and key to every event of ``with_keys``; split key-changing updates in two."""
    staged = events.select("*", ordering(events).alias("_ord"))
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
    key_moved = is_row & (F.col("op") == OP_UPDATE) & (F.col("_old_key") != F.col("_new_key"))
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


def ddl_change(ord_: Column) -> Column:
    """A DDL event as a table's schema sees it: its position, the columns it adds and drops."""
    none = F.array().cast("array<string>")
    return F.struct(
        ord_.alias("ord"),
        F.coalesce(F.map_keys("types"), none).alias("added"),
        F.coalesce(F.map_keys("before"), none).alias("cols"),
    )


def table_changes(events: DataFrame, as_of_ms: int) -> DataFrame:
    """``table, truncs, drops``: each table's applied truncate positions and column drops (tiny).

    Both change every row of a table, so the counting window and each key's state need them.
    Read straight from the canonical events: neither needs a key.
    """
    applied = F.coalesce(F.col("event_ms"), F.lit(0)) <= F.lit(as_of_ms)
    is_trunc = applied & (F.col("kind") == KIND_CHANGE) & (F.col("op") == OP_TRUNCATE)
    is_drop = (
        applied
        & (F.col("kind") == KIND_IGNORED)
        & (F.col("reason") == IGNORED_DDL)
        & (F.size(F.map_keys(F.coalesce("before", empty_image()))) > 0)
    )
    drop = ddl_change(ordering(events))
    return (
        events.where(is_trunc | is_drop)
        .groupBy("table")
        .agg(
            F.collect_list(F.when(is_trunc, ordering(events))).alias("truncs"),
            F.collect_list(F.when(is_drop, drop)).alias("drops"),
        )
    )


def _counting_order() -> list[Column]:
    """Position order in which exact duplicates sit next to each other.

    The content hash sorts right after the source position and event time, before the landing
    position: two deliveries of one event share the former and differ in the latter.
    """
    o = F.col("_ord")
    return [o["log_pos"], o["event_ms"], F.col("_hash"), o["file"], o["file_pos"], o["sub_pos"]]


def _op_code() -> Column:
    code = F.lit(0)
    for op, value in _OP_CODE.items():
        code = F.when(F.col("op") == op, F.lit(value)).otherwise(code)
    # The new-key half of a key-changing update: an update of a row that existed (under its old key).
    return F.when(F.col("_key_moved") & ~F.col("_moved_away"), F.lit(OP_CODE_MOVED_IN)).otherwise(code)


def _count_flags(keyed: DataFrame, changes: DataFrame | None, group: list[str]) -> DataFrame:
    """Per applied row change, what it adds to the counts, from the events before it in position order.

    A window over each key's events (code-generated, spilling, its sort shared with the fold's
    aggregation) stands in for walking a per-key list: an event is an exact duplicate when it
    repeats the previous counted event; a delete or update finds no row when the previous applied
    event was a delete (or there was none), or a truncate of the table came after it.
    ``changes`` is None when no truncate was applied (the single-pass fold).
    """
    applied = F.col("_applied")
    from_base = F.col("_base") if "_base" in keyed.columns else F.lit(False)
    counted = applied & ~F.col("_moved_away") & ~from_base
    before = Window.partitionBy(*group).orderBy(*_counting_order()).rowsBetween(Window.unboundedPreceding, -1)
    with_truncs = (
        keyed.join(F.broadcast(changes.select("table", "truncs")), "table", "left")
        if changes is not None
        else keyed
    )
    previous = [
        F.last(F.when(counted, F.col("_hash")), ignorenulls=True).over(before).alias("_prev_hash"),
        F.last(F.when(applied, _op_code()), ignorenulls=True).over(before).alias("_prev_op"),
    ]
    if changes is not None:
        previous.append(
            F.last(F.when(applied, F.col("_ord")), ignorenulls=True).over(before).alias("_prev_ord")
        )
    staged = with_truncs.select("*", _op_code().alias("_op_code"), counted.alias("_counted"), *previous)
    truncated_since = F.lit(False)
    if changes is not None:
        ord_, prev_ord = F.col("_ord"), F.col("_prev_ord")
        truncated_since = F.when(
            F.col("truncs").isNotNull(),
            F.exists("truncs", lambda t: (t < ord_) & (prev_ord.isNull() | (t > prev_ord))),
        ).otherwise(F.lit(False))
    existed = F.col("_prev_op").isNotNull() & (F.col("_prev_op") != _OP_CODE[OP_DELETE]) & ~truncated_since
    op = F.col("_op_code")
    dup = F.col("_counted") & F.coalesce(F.col("_prev_hash") == F.col("_hash"), F.lit(False))
    count = F.col("_counted") & ~dup
    deleting = count & (op == _OP_CODE[OP_DELETE])

    def flag(condition: Column) -> Column:
        return F.when(condition, F.lit(1)).otherwise(F.lit(0))

    return staged.select(
        *keyed.columns,
        flag(count & (op == _OP_CODE[OP_INSERT])).alias("_c_inserts"),
        flag(count & ((op == _OP_CODE[OP_UPDATE]) | (op == OP_CODE_MOVED_IN))).alias("_c_updates"),
        flag(deleting & existed).alias("_c_deletes"),
        flag(dup).alias("_c_duplicates"),
        flag(deleting & ~existed).alias("_c_deletes_unknown"),
        flag(count & (op == _OP_CODE[OP_UPDATE]) & ~existed).alias("_c_updates_unknown"),
    )


_COUNTS = ("inserts", "updates", "deletes", "duplicates", "deletes_unknown", "updates_unknown")


def fold(keyed: DataFrame, changes: DataFrame | None, partial_images: bool = False) -> DataFrame:
    """One window and one aggregation per (table, tag, key): the folded state plus its counts.

    ``changes`` is ``table_changes`` of the events, or None for a single pass that assumes no
    truncate was applied (``needs_table_changes`` of its counts says whether that held). For full-image formats every aggregation buffer has a
    fixed size: the latest reset (``max_by``), the last move to another key, counts as sums. Formats
    with partial images (``partial_images``) also keep their partial updates, every reset and every
    move to another key in lists: a key change then carries the row's state at that moment.
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
    # Position fields are read from ``_ord``: the top-level copies then never enter the shuffle
    # (1M Debezium events: 166 -> 150 MiB of compressed shuffle).
    file = F.nullif(ord_["file"], F.lit(""))  # base rows without a file carry "" in ``_ord``
    last_meta = F.struct(
        F.col("op"),
        ord_["event_ms"].alias("event_ms"),
        ord_["log_pos"].alias("log_pos"),
        file.alias("file"),
        F.col("line"),
        F.col("file_pos"),
        F.col("sub_pos"),
    )
    # A leading 64-bit hash makes the sort compare longs before table names and key arrays.
    group = ["_group_hash", "table", "_tag", "_key"]
    hashed = keyed.withColumn("_group_hash", F.xxhash64("table", "_tag", "_key"))
    flagged = _count_flags(hashed, changes, group)
    resetting = F.struct(ord_.alias("ord"), F.col("op").alias("op"), F.col("after").alias("after"))
    move = F.struct(
        ord_.alias("ord"), F.col("_new_key").alias("to"), F.col("_moved_partially").alias("partial")
    )
    if partial_images:
        lists = [
            F.collect_list(F.when(reset, resetting)).alias("resets"),
            F.collect_list(
                F.when(partial_update, F.struct(ord_.alias("ord"), F.col("after").alias("after")))
            ).alias("partials"),
            F.collect_list(F.when(moved_away, move)).alias("moves_out"),
        ]
    else:
        lists = [F.max(F.when(moved_away, ord_)).alias("_last_move")]
    if "_base" in keyed.columns:
        lists.append(F.max(F.when(from_base, ord_)).alias("base_ord"))
    is_listed = F.col("_tag").isin(TAG_IGNORED, TAG_QUARANTINED)
    folded = flagged.groupBy(*group).agg(
        *lists,
        F.count(F.when(~F.col("_moved_away") & ~from_base, 1)).alias("n"),
        F.count(F.when(F.col("_after_as_of") & ~F.col("_moved_away"), 1)).alias("after_as_of"),
        F.count(F.when(F.col("log_pos_unreadable") & ~F.col("_moved_away") & ~from_base, 1)).alias(
            "unpositioned"
        ),
        F.max_by(F.when(reset, resetting), F.when(reset, ord_)).alias("reset"),
        F.struct(*[F.sum(f"_c_{name}").cast("long").alias(name) for name in _COUNTS]).alias("counts"),
        F.max_by(F.when(applied, last_meta), F.when(applied, ord_)).alias("last"),
        F.max(F.when(applied, ord_["event_ms"])).alias("last_event_ms"),
        F.collect_set(
            F.when((applied | ddl) & F.col("types").isNotNull(), F.map_entries(F.col("types")))
        ).alias("type_sigs"),
        F.collect_list(
            F.when(
                ddl & (F.col("types").isNotNull() | F.col("before").isNotNull()),
                ddl_change(ord_),
            )
        ).alias("ddl_changes"),
        F.min_by(
            F.when(
                is_listed,
                F.struct(file.alias("file"), "file_pos", "line", "sub_pos", "reason", "raw"),
            ),
            F.when(is_listed, ord_),
        ).alias("first"),
        F.first("_key_cols", ignorenulls=True).alias("key_names"),
    )
    if not partial_images:
        # Full images: the list shapes ``resolve`` reads, made from the fixed-size buffers.
        ord_type = keyed.schema["_ord"].dataType
        partial_type = StructType([StructField("ord", ord_type), StructField("after", IMAGE_TYPE)])
        move_type = StructType(
            [
                StructField("ord", ord_type),
                StructField("to", ArrayType(StringType())),
                StructField("partial", BooleanType()),
            ]
        )
        last_move = F.struct(
            F.col("_last_move").alias("ord"),
            F.lit(None).cast("array<string>").alias("to"),
            F.lit(False).alias("partial"),
        )
        folded = folded.withColumns(
            {
                "partials": F.array().cast(ArrayType(partial_type)),
                "moves_out": F.when(F.col("_last_move").isNotNull(), F.array(last_move)).otherwise(
                    F.array().cast(ArrayType(move_type))
                ),
            }
        ).drop("_last_move")
    return folded.drop("_group_hash")

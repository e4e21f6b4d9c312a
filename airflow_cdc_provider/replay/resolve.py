"""After the fold: each key's final row and its counts, derived in position order.

Runs on the aggregated rows (one per key), so the higher-order functions here walk one key's
events, never the whole input.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from airflow_cdc_provider.formats.events import IMAGE_TYPE, OP_DELETE, empty_image
from airflow_cdc_provider.replay.fold import TAG_IGNORED, TAG_ROW, TAG_TRUNCATE


def table_changes(folded: DataFrame) -> DataFrame:
    """``table, truncs, drops``: the applied truncate positions and column drops of each table."""
    tag = F.col("_tag")
    truncs = F.when(tag == TAG_TRUNCATE, F.transform("history", lambda h: h["ord"]))
    drops = F.when(tag == TAG_IGNORED, F.filter("ddl_changes", lambda c: F.size(c["cols"]) > 0))
    return (
        folded.where(tag.isin(TAG_TRUNCATE, TAG_IGNORED))
        .groupBy("table")
        .agg(
            F.flatten(F.collect_list(truncs)).alias("truncs"),
            F.flatten(F.collect_list(drops)).alias("drops"),
        )
    )


def _by_ord(left: Column, right: Column) -> Column:
    return (
        F.when(left["ord"] < right["ord"], F.lit(-1))
        .when(left["ord"] > right["ord"], F.lit(1))
        .otherwise(F.lit(0))
    )


def _walk(history: Column, truncs: Column) -> Column:
    """Counts in position order: applied ops, duplicates, deletes of unknown keys, creating updates.

    Exact duplicates sort next to each other because the content hash sorts right after the
    source position and event time, before the landing position.
    """
    sortable = F.transform(
        history,
        lambda x: F.struct(
            F.struct(
                x["ord"]["log_pos"],
                x["ord"]["event_ms"],
                x["h"],
                x["ord"]["file"],
                x["ord"]["file_pos"],
                x["ord"]["sub_pos"],
            ).alias("k"),
            x.alias("x"),
        ),
    )
    # sort_array compares with Spark's natural ordering; array_sort would call its default
    # comparator as an interpreted lambda per comparison, about three times slower here.
    ordered = F.transform(F.sort_array(sortable), lambda s: s["x"])
    zero = F.lit(0).cast("long")
    init = F.struct(
        F.lit(False).alias("exists"),
        F.lit(None).cast("long").alias("prev_h"),
        F.lit(None).alias("prev_ord"),
        zero.alias("inserts"),
        zero.alias("updates"),
        zero.alias("deletes"),
        zero.alias("duplicates"),
        zero.alias("deletes_unknown"),
        zero.alias("updates_unknown"),
    )

    def step(s: Column, x: Column) -> Column:
        truncated_between = F.coalesce(
            F.exists(truncs, lambda t: (t < x["ord"]) & (s["prev_ord"].isNull() | (t > s["prev_ord"]))),
            F.lit(False),
        )
        exists = s["exists"] & ~truncated_between
        dup = x["counted"] & F.coalesce(s["prev_h"] == x["h"], F.lit(False))
        op = x["op"]
        count = x["counted"] & ~dup
        new_exists = F.when(dup, exists).when(op == 3, F.lit(False)).otherwise(F.lit(True))
        return F.struct(
            new_exists.alias("exists"),
            F.when(x["counted"], x["h"]).otherwise(s["prev_h"]).alias("prev_h"),
            x["ord"].alias("prev_ord"),
            (s["inserts"] + F.when(count & (op == 1), 1).otherwise(0)).alias("inserts"),
            (s["updates"] + F.when(count & ((op == 2) | (op == 4)), 1).otherwise(0)).alias("updates"),
            (s["deletes"] + F.when(count & (op == 3) & exists, 1).otherwise(0)).alias("deletes"),
            (s["duplicates"] + F.when(dup, 1).otherwise(0)).alias("duplicates"),
            (s["deletes_unknown"] + F.when(count & (op == 3) & ~exists, 1).otherwise(0)).alias(
                "deletes_unknown"
            ),
            (s["updates_unknown"] + F.when(count & (op == 2) & ~exists, 1).otherwise(0)).alias(
                "updates_unknown"
            ),
        )

    # The accumulator's prev_ord starts as a typed null of the element's ord type.
    typed_init = init.withField("prev_ord", F.when(F.lit(False), ordered[0]["ord"]))
    return F.aggregate(ordered, typed_init, step)


def _merged_image(base_image: Column, base_ord: Column, later: Column, drops: Column) -> Column:
    """The base image with the later partial images laid over it in order: latest writer wins.

    A partial image that arrives with a ``base`` (the row carried over from its old key by a key
    change) starts from that base instead. When the table dropped columns, each value remembers
    when it was written, and a value written before a drop of its column is removed: a snapshot
    after ``DROP COLUMN`` no longer has it.
    """

    def start(acc: Column, p: Column) -> Column:
        return F.when(p["base"].isNotNull(), p["base"]).otherwise(acc)

    plain = F.aggregate(
        later,
        base_image,
        lambda acc, p: F.map_concat(
            F.map_filter(start(acc, p), lambda k, v: ~F.map_contains_key(p["after"], k)), p["after"]
        ),
    )

    def stamp(image: Column, ord_: Column) -> Column:
        return F.transform_values(image, lambda k, v: F.struct(v.alias("v"), ord_.alias("o")))

    stamped = F.aggregate(
        later,
        stamp(base_image, base_ord),
        lambda acc, p: F.map_concat(
            F.map_filter(
                F.when(p["base"].isNotNull(), stamp(p["base"], p["ord"])).otherwise(acc),
                lambda k, v: ~F.map_contains_key(p["after"], k),
            ),
            stamp(p["after"], p["ord"]),
        ),
    )
    surviving = F.map_filter(
        stamped,
        lambda k, s: (
            ~F.exists(
                drops, lambda d: F.array_contains(d["cols"], k) & (s["o"].isNull() | (d["ord"] > s["o"]))
            )
        ),
    )
    return F.when(
        F.coalesce(F.size(drops), F.lit(0)) > 0, F.transform_values(surviving, lambda k, s: s["v"])
    ).otherwise(plain)


def _state_before(
    limit: Column | None, carries: Column | None = None, keep_resets: bool = False, folded_reset_type=None
) -> tuple[Column, Column, Column]:
    """``(exists, image, known)`` of a row group just before position ``limit`` (at the end if None).

    The base is the latest of the last reset, truncate and move to another key before ``limit``;
    partial images after it are merged on top. Unless the fold kept every reset (``keep_resets``), it
    kept only a key's latest one, so the state before a position earlier than it is not ``known``.
    """

    def before(o: Column) -> Column:
        return F.lit(True) if limit is None else (o < limit)

    reset = F.col("reset")
    if keep_resets:
        reset = F.aggregate(
            F.filter("resets", lambda r: before(r["ord"])),
            F.lit(None).cast(folded_reset_type),
            lambda acc, r: F.when(acc.isNull() | (r["ord"] > acc["ord"]), r).otherwise(acc),
        )
    reset_in = reset.isNotNull() & before(reset["ord"])
    trunc = F.array_max(F.filter(F.coalesce(F.col("truncs"), F.array()), before))
    moved = F.array_max(F.filter(F.transform("moves_out", lambda m: m["ord"]), before))
    base_ord = F.greatest(F.when(reset_in, reset["ord"]), trunc, moved)
    base_exists = reset_in & (base_ord == reset["ord"]) & (reset["op"] != OP_DELETE)
    base_image = F.when(base_exists, F.coalesce(reset["after"], empty_image())).otherwise(empty_image())
    partials = F.filter(
        F.col("partials"), lambda p: (base_ord.isNull() | (p["ord"] > base_ord)) & before(p["ord"])
    )
    with_base = F.transform(
        partials,
        lambda p: F.struct(
            p["ord"].alias("ord"),
            p["after"].alias("after"),
            (
                F.try_element_at(F.filter(carries, lambda c: c["ord"] == p["ord"]), F.lit(1))["image"]
                if carries is not None
                else F.lit(None).cast(IMAGE_TYPE)
            ).alias("base"),
        ),
    )
    later = F.array_sort(with_base, _by_ord)
    image = _merged_image(base_image, base_ord, later, F.col("drops"))
    known = ~(reset.isNotNull() & ~reset_in)
    return base_exists | (F.size(later) > 0), image, known


def carried_rows(rows: DataFrame) -> DataFrame:
    """``table, _key, carries``: rows that moved to a new key through a partial update.

    Such an update names only the columns it changes, so the row under its new key starts from
    the row as it stood under the old key just before the move. Needs a fold with ``keep_resets``.
    """
    sources = rows.where((F.col("_tag") == TAG_ROW) & F.exists("moves_out", lambda m: m["partial"]))
    moves = sources.select("*", F.explode(F.filter("moves_out", lambda m: m["partial"])).alias("_move"))
    exists, image, known = _state_before(
        F.col("_move.ord"), keep_resets=True, folded_reset_type=rows.schema["reset"].dataType
    )
    return (
        moves.where(known & exists)
        .select(
            "table",
            F.col("_move.to").alias("_key"),
            F.struct(F.col("_move.ord").alias("ord"), image.alias("image")).alias("c"),
        )
        .groupBy("table", "_key")
        .agg(F.collect_list("c").alias("carries"))
    )


def resolve(folded: DataFrame, carry_moves: bool = False) -> DataFrame:
    """Per row group: ``exists``, the final ``image``, and the counts (other tags pass through).

    ``carry_moves``: the format has partial images, so key changes may need the old key's row
    (``folded`` is then read twice: pass a persisted one).
    """
    rows = folded.join(F.broadcast(table_changes(folded)), on="table", how="left")
    if carry_moves:
        rows = rows.join(carried_rows(rows), on=["table", "_key"], how="left")
        exists, image, _ = _state_before(None, F.col("carries"))
    else:
        exists, image, _ = _state_before(None)
    # Most keys only ever see full images: their row is the latest one, no walk needed.
    reset = F.col("reset")
    simple = (
        (F.size("partials") == 0)
        & (F.size("moves_out") == 0)
        & F.coalesce(F.size("truncs") == 0, F.lit(True))
        & F.coalesce(F.size("drops") == 0, F.lit(True))
    )
    exists = F.when(simple, F.coalesce(reset["op"] != OP_DELETE, F.lit(False))).otherwise(exists)
    image = F.when(
        simple,
        F.when(reset["op"] != OP_DELETE, F.coalesce(reset["after"], empty_image())).otherwise(empty_image()),
    ).otherwise(image)
    counts = _walk(F.col("history"), F.col("truncs"))
    is_row = F.col("_tag") == TAG_ROW
    return rows.select(
        "*",
        F.when(is_row, exists).otherwise(F.lit(False)).alias("exists"),
        F.when(is_row, image).alias("image"),
        F.when(is_row, counts).alias("counts"),
    )

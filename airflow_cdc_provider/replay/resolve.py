"""After the fold: each key's final row.

Runs on the aggregated rows (one per key). Most keys take the latest reset as it is; only keys
with partial images, moves to another key, truncates or column drops are merged in position order
by the higher-order functions here, over that key's own few entries.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType

from airflow_cdc_provider.formats.events import IMAGE_TYPE, OP_DELETE, empty_image
from airflow_cdc_provider.replay.fold import TAG_ROW


def _by_ord(left: Column, right: Column) -> Column:
    return (
        F.when(left["ord"] < right["ord"], F.lit(-1))
        .when(left["ord"] > right["ord"], F.lit(1))
        .otherwise(F.lit(0))
    )


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


def resolve(folded: DataFrame, changes: DataFrame | None, carry_moves: bool = False) -> DataFrame:
    """Per row group: ``exists`` and the final ``image`` (other tags pass through).

    ``changes`` is ``table_changes`` of the fold's events, or None when no truncate or column drop
    was applied. ``carry_moves``: the format has partial images, so key changes may need the old
    key's row (``folded`` is then read twice: pass a persisted one).
    """
    if changes is not None:
        rows = folded.join(F.broadcast(changes), on="table", how="left")
    else:
        ord_type = folded.schema["reset"].dataType["ord"].dataType
        rows = folded.select(
            "*",
            F.lit(None).cast(ArrayType(ord_type)).alias("truncs"),
            F.lit(None).cast(folded.schema["ddl_changes"].dataType).alias("drops"),
        )
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
    is_row = F.col("_tag") == TAG_ROW
    return rows.select(
        "*",
        F.when(is_row, exists).otherwise(F.lit(False)).alias("exists"),
        F.when(is_row, image).alias("image"),
    )

"""After the fold: each key's final row.

Runs on the aggregated rows (one per key). Most keys take the latest reset as it is; only keys
with partial images, moves to another key, truncates or column drops are merged in position order
by the higher-order functions here, over that key's own few entries.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType

from airflow_cdc_provider.formats import sqlexpr as E
from airflow_cdc_provider.formats.events import IMAGE_TYPE, OP_DELETE, empty_image
from airflow_cdc_provider.formats.sqlexpr import Expr
from airflow_cdc_provider.replay.fold import TAG_ROW


def by_ord(left: Expr, right: Expr) -> Expr:
    return (
        E.when(left["ord"] < right["ord"], E.lit(-1))
        .when(left["ord"] > right["ord"], E.lit(1))
        .otherwise(E.lit(0))
    )


def merged_image(base_image: Expr, base_ord: Expr, later: Expr, drops: Expr) -> Expr:
    """The base image with the later partial images laid over it in order: latest writer wins.

    A partial image that arrives with a ``base`` (the row carried over from its old key by a key
    change) starts from that base instead. When the table dropped columns, each value remembers
    when it was written, and a value written before a drop of its column is removed: a snapshot
    after ``DROP COLUMN`` no longer has it.
    """

    def start(acc: Expr, p: Expr) -> Expr:
        return E.when(p["base"].isNotNull(), p["base"]).otherwise(acc)

    plain = E.aggregate(
        later,
        base_image,
        lambda acc, p: E.map_concat(
            E.map_filter(start(acc, p), lambda k, v: ~E.map_contains_key(p["after"], k)), p["after"]
        ),
    )

    def stamp(image: Expr, ord_: Expr) -> Expr:
        return E.transform_values(image, lambda k, v: E.struct(v.alias("v"), ord_.alias("o")))

    stamped = E.aggregate(
        later,
        stamp(base_image, base_ord),
        lambda acc, p: E.map_concat(
            E.map_filter(
                E.when(p["base"].isNotNull(), stamp(p["base"], p["ord"])).otherwise(acc),
                lambda k, v: ~E.map_contains_key(p["after"], k),
            ),
            stamp(p["after"], p["ord"]),
        ),
    )
    surviving = E.map_filter(
        stamped,
        lambda k, s: (
            ~E.exists(
                drops, lambda d: E.array_contains(d["cols"], k) & (s["o"].isNull() | (d["ord"] > s["o"]))
            )
        ),
    )
    return E.when(
        E.coalesce(E.size(drops), E.lit(0)) > 0, E.transform_values(surviving, lambda k, s: s["v"])
    ).otherwise(plain)


def _state_before(
    limit: Expr | None, carries: Expr | None = None, keep_resets: bool = False, folded_reset_type=None
) -> tuple[Expr, Expr, Expr]:
    """``(exists, image, known)`` of a row group just before position ``limit`` (at the end if None).

    The base is the latest of the last reset, truncate and move to another key before ``limit``;
    partial images after it are merged on top. Unless the fold kept every reset (``keep_resets``), it
    kept only a key's latest one, so the state before a position earlier than it is not ``known``.
    """

    def before(o: Expr) -> Expr:
        return E.lit(True) if limit is None else (o < limit)

    reset = E.col("reset")
    if keep_resets:
        reset = E.aggregate(
            E.filter("resets", lambda r: before(r["ord"])),
            E.null(folded_reset_type),
            lambda acc, r: E.when(acc.isNull() | (r["ord"] > acc["ord"]), r).otherwise(acc),
        )
    reset_in = reset.isNotNull() & before(reset["ord"])
    trunc = E.array_max(E.filter(E.coalesce(E.col("truncs"), E.array()), before))
    moved = E.array_max(E.filter(E.transform("moves_out", lambda m: m["ord"]), before))
    base_ord = E.greatest(E.when(reset_in, reset["ord"]), trunc, moved)
    base_exists = reset_in & (base_ord == reset["ord"]) & (reset["op"] != OP_DELETE)
    base_image = E.when(base_exists, E.coalesce(reset["after"], empty_image())).otherwise(empty_image())
    partials = E.filter(
        E.col("partials"), lambda p: (base_ord.isNull() | (p["ord"] > base_ord)) & before(p["ord"])
    )
    with_base = E.transform(
        partials,
        lambda p: E.struct(
            p["ord"].alias("ord"),
            p["after"].alias("after"),
            (
                E.try_element_at(E.filter(carries, lambda c: c["ord"] == p["ord"]), 1)["image"]
                if carries is not None
                else E.null(IMAGE_TYPE)
            ).alias("base"),
        ),
    )
    later = E.array_sort(with_base, by_ord)
    image = merged_image(base_image, base_ord, later, E.col("drops"))
    known = ~(reset.isNotNull() & ~reset_in)
    return base_exists | (E.size(later) > 0), image, known


def carried_rows(rows: DataFrame) -> DataFrame:
    """``table, _key, carries``: rows that moved to a new key through a partial update.

    Such an update names only the columns it changes, so the row under its new key starts from
    the row as it stood under the old key just before the move. Needs a fold with ``keep_resets``.
    """
    sources = rows.where(
        ((E.col("_tag") == TAG_ROW) & E.exists("moves_out", lambda m: m["partial"])).column()
    )
    moves = sources.select(
        "*", F.explode(E.filter("moves_out", lambda m: m["partial"]).column()).alias("_move")
    )
    exists, image, known = _state_before(
        E.col("_move.ord"), keep_resets=True, folded_reset_type=rows.schema["reset"].dataType
    )
    return (
        moves.where((known & exists).column())
        .select(
            "table",
            *E.columns(
                E.col("_move.to").alias("_key"),
                E.struct(E.col("_move.ord").alias("ord"), image.alias("image")).alias("c"),
            ),
        )
        .groupBy("table", "_key")
        .agg(F.collect_list("c").alias("carries"))
    )


def with_table_changes(folded: DataFrame, changes: DataFrame | None) -> DataFrame:
    """``folded`` with its table's ``truncs`` and ``drops`` (``table_changes``; null when None)."""
    if changes is not None:
        return folded.join(F.broadcast(changes), on="table", how="left")
    ord_type = folded.schema["reset"].dataType["ord"].dataType
    return folded.select(
        "*",
        *E.columns(
            E.null(ArrayType(ord_type)).alias("truncs"),
            E.null(folded.schema["ddl_changes"].dataType).alias("drops"),
        ),
    )


# The fold's lists and the tables' changes, read by ``resolve`` and by nothing after it.
_MERGED_FROM = ("reset", "resets", "partials", "moves_out", "truncs", "drops", "carries")


def resolve(folded: DataFrame, changes: DataFrame | None, carry_moves: bool = False) -> DataFrame:
    """Per row group: ``exists`` and the final ``image`` (other tags pass through).

    ``changes`` is ``table_changes`` of the fold's events, or None when no truncate or column drop
    was applied. ``carry_moves``: the format has partial images, so key changes may need the old
    key's row (``folded`` is then read twice: pass a persisted one).
    """
    rows = with_table_changes(folded, changes)
    if carry_moves:
        rows = rows.join(carried_rows(rows), on=["table", "_key"], how="left")
        exists, image, _ = _state_before(None, E.col("carries"))
    else:
        exists, image, _ = _state_before(None)
    # Most keys only ever see full images: their row is the latest one, no walk needed.
    reset = E.col("reset")
    simple = (
        (E.size("partials") == 0)
        & (E.size("moves_out") == 0)
        & E.coalesce(E.size("truncs") == 0, E.lit(True))
        & E.coalesce(E.size("drops") == 0, E.lit(True))
    )
    exists = E.when(simple, E.coalesce(reset["op"] != OP_DELETE, E.lit(False))).otherwise(exists)
    image = E.when(
        simple,
        E.when(reset["op"] != OP_DELETE, E.coalesce(reset["after"], empty_image())).otherwise(empty_image()),
    ).otherwise(image)
    is_row = E.col("_tag") == TAG_ROW
    resolved = rows.select(
        "*",
        *E.columns(
            E.when(is_row, exists).otherwise(E.lit(False)).alias("exists"),
            E.when(is_row, image).alias("image"),
        ),
    )
    # What only the merge reads is left out: a kept result is then about half the size.
    return resolved.drop(*[c for c in _MERGED_FROM if c in resolved.columns])

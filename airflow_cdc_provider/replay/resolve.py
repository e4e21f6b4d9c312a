"""After the fold: each key's final row and its counts, derived in position order.

Runs on the aggregated rows (one per key), so the higher-order functions here walk one key's
events, never the whole input.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from airflow_cdc_provider.replay import events as ev
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
    return F.when(left["ord"] < right["ord"], F.lit(-1)).when(left["ord"] > right["ord"], F.lit(1)).otherwise(F.lit(0))


def _walk(history: Column, truncs: Column) -> Column:
    """Counts in position order: applied ops, duplicates, deletes of unknown keys, creating updates.

    Exact duplicates sort next to each other because the content hash sorts right after the
    source position and event time, before the landing position.
    """
    sortable = F.transform(
        history,
        lambda x: F.struct(
            F.struct(x["ord"]["log_pos"], x["ord"]["event_ms"], x["h"], x["ord"]["file"], x["ord"]["file_pos"], x["ord"]["sub_pos"]).alias("k"),
            x.alias("x"),
        ),
    )
    ordered = F.transform(F.array_sort(sortable), lambda s: s["x"])
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
            F.exists(truncs, lambda t: (t < x["ord"]) & (s["prev_ord"].isNull() | (t > s["prev_ord"]))), F.lit(False)
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
            (s["deletes_unknown"] + F.when(count & (op == 3) & ~exists, 1).otherwise(0)).alias("deletes_unknown"),
            (s["updates_unknown"] + F.when(count & (op == 2) & ~exists, 1).otherwise(0)).alias("updates_unknown"),
        )

    # The accumulator's prev_ord starts as a typed null of the element's ord type.
    typed_init = init.withField("prev_ord", F.when(F.lit(False), ordered[0]["ord"]))
    return F.aggregate(ordered, typed_init, step)


def _merged_image(base_image: Column, base_ord: Column, later: Column, drops: Column) -> Column:
    """The base image with the later partial images laid over it in order: latest writer wins.

    When the table dropped columns, each value remembers when it was written, and a value written
    before a drop of its column is removed: a snapshot after ``DROP COLUMN`` no longer has it.
    """
    plain = F.aggregate(
        later,
        base_image,
        lambda acc, p: F.map_concat(F.map_filter(acc, lambda k, v: ~F.map_contains_key(p["after"], k)), p["after"]),
    )
    stamped = F.aggregate(
        later,
        F.transform_values(base_image, lambda k, v: F.struct(v.alias("v"), base_ord.alias("o"))),
        lambda acc, p: F.map_concat(
            F.map_filter(acc, lambda k, v: ~F.map_contains_key(p["after"], k)),
            F.transform_values(p["after"], lambda k, v: F.struct(v.alias("v"), p["ord"].alias("o"))),
        ),
    )
    surviving = F.map_filter(
        stamped,
        lambda k, s: ~F.exists(drops, lambda d: F.array_contains(d["cols"], k) & (s["o"].isNull() | (d["ord"] > s["o"]))),
    )
    return F.when(F.coalesce(F.size(drops), F.lit(0)) > 0, F.transform_values(surviving, lambda k, s: s["v"])).otherwise(plain)


def resolve(folded: DataFrame) -> DataFrame:
    """Per row group: ``exists``, the final ``image``, and the counts (other tags pass through)."""
    rows = folded.join(F.broadcast(table_changes(folded)), on="table", how="left")
    latest_trunc = F.array_max(F.col("truncs"))
    reset = F.col("reset")
    trunc_wins = latest_trunc.isNotNull() & (reset.isNull() | (latest_trunc > reset["ord"]))
    base_ord = F.when(trunc_wins, latest_trunc).otherwise(reset["ord"])
    base_exists = ~trunc_wins & reset.isNotNull() & (reset["op"] != ev.OP_DELETE)
    base_image = F.when(base_exists, F.coalesce(reset["after"], ev.empty_image())).otherwise(ev.empty_image())
    later = F.array_sort(
        F.filter(F.col("partials"), lambda p: base_ord.isNull() | (p["ord"] > base_ord)), _by_ord
    )
    image = _merged_image(base_image, base_ord, later, F.col("drops"))
    counts = _walk(F.col("history"), F.col("truncs"))
    is_row = F.col("_tag") == TAG_ROW
    return rows.select(
        "*",
        F.when(is_row, base_exists | (F.size(later) > 0)).otherwise(F.lit(False)).alias("exists"),
        F.when(is_row, image).alias("image"),
        F.when(is_row, counts).alias("counts"),
    )

"""Row images merged in position order: partial images laid over a base image, latest writer wins.

Takes a base image (a row's last full image, or none), the partial images after it in position
order and the table's column drops; gives the merged image (``merged_image``). Shared by the fold
stage (``resolve``, each key's final row) and a history (``versions``, each version's row). The
rule is docs/design.md, "Updates: full and partial images".
"""

from __future__ import annotations

from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr


def by_ord(left: Expr, right: Expr) -> Expr:
    """Position order of two entries with an ``ord`` (an ``array_sort`` comparator)."""
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

"""Shared by both DataHub formats: pairing the before and after halves of an update."""

from __future__ import annotations

from pyspark.sql import DataFrame

from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr


def attach_before_images(
    rows: DataFrame,
    *,
    before_half: Expr,
    after_half: Expr,
    group: list[Expr],
    image: Expr,
    order: Expr,
) -> DataFrame:
    """Add ``paired_before``: for an after half, the image of the before half of the same group.

    One window, no join: rows are partitioned by ``group`` (table and sequence id) for the halves
    and by their own file position otherwise, so every record stays exactly one row and no group
    is skewed. Splitting the halves off with a filter and a union would shuffle less, but Spark
    pushes such filters down into the decoding expressions and reads and parses the landing twice.
    """
    is_half = E.coalesce(before_half | after_half, E.lit(False))
    partition = [*group, E.when(~is_half, E.col("file")), E.when(~is_half, E.col("file_pos"))]
    first = E.min_by(E.when(before_half, image), E.when(before_half, order))
    paired = first.over(f"PARTITION BY {', '.join(p.sql for p in partition)}")
    return rows.select("*", E.when(after_half, paired).alias("paired_before").column())

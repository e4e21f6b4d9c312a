"""AWS DMS's S3 target in Parquet: ``ROW_COLUMNS`` rows of ``.parquet`` files.

The same ``Op`` column as in CSV where DMS writes it; the other columns are named and typed by the
file itself. The files are read a table folder at a time; a file whose footer does not read is one
quarantined record.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import MapType, StringType, TimestampType

from airflow_cdc_provider.formats.aws_dms.definitions import Catalog
from airflow_cdc_provider.formats.aws_dms.s3_rows import OP_COLUMN, file_table
from airflow_cdc_provider.formats.common.tabular import (
    column_expr,
    declared_type,
    parquet_footers,
    parquet_frames,
)
from airflow_cdc_provider.formats.events import IMAGE_TYPE, Q_BAD_PARQUET, Q_MISSING_TABLE
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile, landed_file_column


def parquet_rows(spark: SparkSession, files: list[LandedFile], catalog: Catalog) -> list[DataFrame]:
    """DMS Parquet files, read a table folder at a time; a file whose footer does not read is one
    quarantined record."""
    footers = parquet_footers(spark, [f.path for f in files])
    readable = [f for f in files if footers[f.path] is not None]
    parts = []
    broken = [f for f in files if footers[f.path] is None]
    if broken:
        parts.append(
            file_table(spark, broken, catalog, with_names=False).select(
                "file",
                *E.columns(
                    E.lit(0).cast("bigint").alias("file_pos"),
                    E.null("bigint").alias("line"),
                    E.null("string").alias("raw"),
                    E.lit(Q_BAD_PARQUET).alias("bad"),
                ),
                "table",
                "types",
                "key_cols",
                "load",
                "file_ms",
                *E.columns(
                    E.lit(False).alias("has_op"),
                    E.null("string").alias("op_text"),
                    E.null("bigint").alias("ts_us"),
                    E.lit(False).alias("ts_bad"),
                    E.null(IMAGE_TYPE).alias("image"),
                    E.lit(False).alias("convert_failed"),
                ),
            )
        )
    if readable:
        per_file = file_table(spark, readable, catalog, with_names=False).drop("types")
        for _, frame in parquet_frames(spark, [f.path for f in readable]):
            parts.append(_parquet_group(frame, per_file, catalog.options.timestamp_column))
    return parts


def _parquet_group(df: DataFrame, per_file: DataFrame, ts_name: str | None) -> DataFrame:
    """The rows of one table folder's files (``parquet_frames``): the image and types from the
    file's own columns, ``Op`` and the ``--timestamp-column`` read apart from them."""
    fields = {f.name: f.dataType for f in df.schema.fields}
    ts_name = ts_name if ts_name in fields else None
    business = [name for name in fields if name not in (OP_COLUMN, ts_name)]
    image = E.map(*[c for name in business for c in (E.lit(name), column_expr(name).cast("variant"))])
    declared = [(name, declared_type(fields[name])) for name in business]
    types = E.map(*[c for name, t in declared if t for c in (E.lit(name), E.lit(t))])
    if ts_name is None:
        ts_us, ts_bad = E.null("bigint"), E.lit(False)
    elif isinstance(fields[ts_name], TimestampType):
        ts_us, ts_bad = E.unix_micros(column_expr(ts_name)), E.lit(False)
    else:
        text = column_expr(ts_name).cast("string")
        stamp = E.try_to_timestamp(text)
        ts_us, ts_bad = E.unix_micros(stamp), (E.trim(text) != "") & stamp.isNull()
    has_op = OP_COLUMN in fields
    rows = df.select(
        *E.columns(
            landed_file_column().alias("file"),
            E.col("_metadata.row_index").alias("file_pos"),
            E.null("bigint").alias("line"),
            E.to_json(E.struct(*[column_expr(name) for name in fields])).alias("raw"),
            E.null("string").alias("bad"),
            types.cast(MapType(StringType(), StringType())).alias("types"),
            E.lit(has_op).alias("has_op"),
            (column_expr(OP_COLUMN).cast("string") if has_op else E.null("string")).alias("op_text"),
            ts_us.alias("ts_us"),
            E.coalesce(ts_bad, E.lit(False)).alias("ts_bad"),
            image.cast(IMAGE_TYPE).alias("image"),
            E.lit(False).alias("convert_failed"),
        )
    )
    joined = rows.join(per_file, "file", "left")
    # A file of a table folder whose other files carry Op, itself without it (merged schema): no Op.
    return joined.withColumns(
        {
            "bad": E.when(E.col("table").isNull(), E.lit(Q_MISSING_TABLE)).column(),
            "has_op": (E.col("has_op") & E.col("op_text").isNotNull()).column(),
        }
    )

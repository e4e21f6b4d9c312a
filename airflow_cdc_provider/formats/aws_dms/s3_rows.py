"""What AWS DMS's S3 target lands, CSV or Parquet, once read: rows of ``ROW_COLUMNS``, and their events.

Both landings name a row's table by its file's folders and say whether it is a full load by the
file's name (``definitions``); each row carries DMS's ``Op`` column where DMS writes it. The
event of a row is the same whichever landing it came from (``tabular_events``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from airflow_cdc_provider.formats.aws_dms.definitions import Catalog, file_time_ms, is_full_load, table_of
from airflow_cdc_provider.formats.aws_dms.ordering import position
from airflow_cdc_provider.formats.events import (
    KIND_CHANGE,
    KIND_QUARANTINED,
    OP_DELETE,
    OP_INSERT,
    OP_READ,
    OP_UPDATE,
    Q_MISSING_OP,
    Q_TYPE_MISMATCH,
    Q_UNKNOWN_OP,
    canonical,
    classify,
)
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile

OP_COLUMN = "Op"

_OPS = {"I": OP_INSERT, "U": OP_UPDATE, "D": OP_DELETE}

# What `file_table` says of each landed file.
_FILE_SCHEMA = StructType(
    [
        StructField("file", StringType()),
        StructField("table", StringType()),
        StructField("names", ArrayType(StringType())),
        StructField("types", MapType(StringType(), StringType())),
        StructField("key_cols", ArrayType(StringType())),
        StructField("load", BooleanType()),
        StructField("file_ms", LongType()),
    ]
)
# What every S3 landing reader (CSV, Parquet) hands to `tabular_events`.
ROW_COLUMNS = (
    "file",
    "file_pos",
    "line",
    "raw",
    "bad",
    "table",
    "types",
    "key_cols",
    "load",
    "file_ms",
    "has_op",
    "op_text",
    "ts_us",
    "ts_bad",
    "image",
    "convert_failed",
)


def file_table(spark: SparkSession, files: list[LandedFile], catalog: Catalog, with_names: bool) -> DataFrame:
    """One row per landed file: its table, column names (CSV), types, key, load or change, name time."""
    rows = []
    for landed in files:
        table = table_of(landed.path)
        names = catalog.names(table) if with_names else None
        rows.append(
            (
                landed.path,
                table,
                list(names) if names is not None else None,
                catalog.types(table),
                catalog.keys(table),
                is_full_load(landed.path),
                file_time_ms(landed.path),
            )
        )
    return F.broadcast(spark.createDataFrame(rows, _FILE_SCHEMA))


def tabular_events(rows: DataFrame) -> DataFrame:
    """S3 rows (CSV or Parquet) to canonical events: ``Op`` (or its absence) and the row's time."""
    code = E.upper(E.trim(E.col("op_text")))
    load, has_op = E.col("load"), E.col("has_op")
    inserted = E.when(load, E.lit(OP_READ)).otherwise(E.lit(OP_INSERT))
    op = E.when(~has_op, inserted).when(code == "I", inserted)
    for letter in ("U", "D"):
        op = op.when(code == letter, E.lit(_OPS[letter]))
    bad = E.col("bad")
    kind, reason = classify(
        (bad.isNotNull(), KIND_QUARANTINED, bad),
        (has_op & E.coalesce(code == "", E.lit(True)), KIND_QUARANTINED, Q_MISSING_OP),
        (op.isNull(), KIND_QUARANTINED, Q_UNKNOWN_OP),
        (E.col("ts_bad") | E.col("convert_failed"), KIND_QUARANTINED, Q_TYPE_MISMATCH),
    )
    is_change = kind == KIND_CHANGE
    file_ms = E.col("file_ms")
    time_us = E.coalesce(E.col("ts_us"), file_ms * 1000)
    return rows.select(
        *canonical(
            table=E.col("table"),
            kind=kind,
            op=E.when(is_change, op),
            reason=reason,
            event_ms=E.coalesce(E.floor(E.col("ts_us") / 1000), file_ms),
            log_pos=position(load, time_us, E.coalesce(file_ms, E.lit(0)), E.col("file_pos")),
            sub_pos=E.lit(0),
            before=E.when(is_change & (op == OP_DELETE), E.col("image")),
            after=E.when(is_change & (op != OP_DELETE), E.col("image")),
            partial=E.lit(False),
            key_cols=E.col("key_cols"),
            types=E.when(is_change, E.col("types")),
            raw=E.col("raw"),
        )
    )

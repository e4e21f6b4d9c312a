"""Shared reading of JSON-lines landings: parse each record once with Spark's JSON reader.

Every JSON decoder parses its records with ``parse_json_records`` and a schema of its own, so the
rules for what is not a record (blank lines), what is a Kafka tombstone, and why a line cannot be
decoded (not JSON, truncated, not an object, a field of the wrong shape) are the same everywhere.
No Python runs per record: the diagnosis of a bad line uses Spark's own functions and is evaluated
only for lines whose parse failed.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from airflow_cdc_provider.landing import LandedFile, read_records
from airflow_cdc_provider.replay.events import (
    Q_NOT_JSON,
    Q_NOT_OBJECT,
    Q_TRUNCATED,
    Q_TYPE_MISMATCH,
)

CORRUPT = "_corrupt_record"


def parse_json_records(spark: SparkSession, files: list[LandedFile], schema: StructType) -> DataFrame:
    """Read ``files`` and parse each record against ``schema``.

    Returns ``file, file_pos, line, text, j, tombstone, bad`` where ``j`` is the parsed struct,
    ``tombstone`` marks Kafka tombstones (an empty line or ``null``) and ``bad`` is the quarantine
    reason for a record that did not parse (null otherwise). Whitespace-only lines are dropped:
    they are not records.
    """
    with_corrupt = StructType(list(schema.fields) + [StructField(CORRUPT, StringType())])
    records = read_records(spark, files)
    trimmed = F.trim(F.col("text"))
    records = records.where(~((trimmed == "") & (F.col("text") != "")))
    tombstone = (F.col("text") == "") | (trimmed == "null")
    parsed = F.from_json(F.col("text"), with_corrupt, {"columnNameOfCorruptRecord": CORRUPT, "mode": "PERMISSIVE"})
    out = records.select("file", "file_pos", "line", "text", "unterminated", parsed.alias("j"), tombstone.alias("tombstone"))
    return out.select(
        "file",
        "file_pos",
        "line",
        "text",
        "j",
        "tombstone",
        F.when(F.col("tombstone"), F.lit(None)).otherwise(diagnose(F.col("j." + CORRUPT), F.col("unterminated"))).alias("bad"),
    )


def diagnose(corrupt: Column, unterminated: Column) -> Column:
    """Quarantine reason for a record Spark's JSON reader flagged (null when it parsed)."""
    as_json = F.try_parse_json(corrupt)
    kind = F.substring(F.schema_of_variant(as_json), 1, 6)
    return (
        F.when(corrupt.isNull(), F.lit(None))
        .when(as_json.isNull() & unterminated, F.lit(Q_TRUNCATED))
        .when(as_json.isNull(), F.lit(Q_NOT_JSON))
        .when(kind != "OBJECT", F.lit(Q_NOT_OBJECT))
        .otherwise(F.lit(Q_TYPE_MISMATCH))
    )


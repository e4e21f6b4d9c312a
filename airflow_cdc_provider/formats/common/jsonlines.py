"""Shared reading of JSON-lines landings: parse each record once with Spark's JSON reader.

Every JSON decoder parses its records with ``parse_json_records`` and a schema of its own, so the
rules for what is not a record (blank lines), what is a Kafka tombstone, and why a line cannot be
decoded (not JSON, truncated, not an object, a field of the wrong shape) are the same everywhere.
No Python runs per record: the diagnosis of a bad line uses Spark's own functions and is evaluated
only for lines whose parse failed.

Some records are set aside before parsing, because parsing them would mislead or exhaust memory:
the stand-in for the lost rest of a damaged compressed file (truncated), bytes that are not UTF-8
(Spark would silently turn them into U+FFFD and apply a changed value), and records longer than
``MAX_RECORD_BYTES`` (no row image that large fits a Spark variant, and parsing a 50 MB line takes
around a gigabyte of heap).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from airflow_cdc_provider.formats.events import (
    Q_NOT_JSON,
    Q_NOT_OBJECT,
    Q_NOT_UTF8,
    Q_TOO_LARGE,
    Q_TRUNCATED,
    Q_TYPE_MISMATCH,
)
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile, read_records
from airflow_cdc_provider.spark.sqlexpr import Expr

CORRUPT = "_corrupt_record"
# Spark's variant size limit (16 MiB): a record longer than this cannot hold a decodable image.
MAX_RECORD_BYTES = 16 * 1024 * 1024


def parse_json_records(
    spark: SparkSession,
    files: list[LandedFile],
    schema: StructType,
    previous_when: Callable[[Expr], Expr] | None = None,
) -> DataFrame:
    """Read ``files`` and parse each record against ``schema``.

    Returns ``file, file_pos, line, text, j, tombstone, bad`` where ``j`` is the parsed struct,
    ``tombstone`` marks Kafka tombstones (an empty line or ``null``) and ``bad`` is the quarantine
    reason for a record that did not parse (null otherwise). Whitespace-only lines are dropped:
    they are not records.

    With ``previous_when`` there is also ``previous``: the text of the line just before in its
    file, when ``previous_when`` holds for that line's text (null otherwise). Landings that write a
    Kafka key on the line before its value (Debezium MongoDB) pair them this way; it costs a window
    over each file's lines, which also pairs lines on either side of a split boundary. The test
    runs on each line before the window, so the window hands on only the lines that pass it.
    """
    with_corrupt = StructType(list(schema.fields) + [StructField(CORRUPT, StringType())])
    records = read_records(spark, files)
    text = E.col("text")
    # A blank line (whitespace only, not empty) is no record; an empty line is a Kafka tombstone.
    blank = E.coalesce((E.trim(text) == "") & (text != ""), E.lit(False))
    extra: list[Column] = []
    if previous_when is not None:
        # Before blank lines go: a blank line between a key and a value leaves them unpaired.
        kept = E.when(previous_when(text), text).column()
        before = F.lag(kept, 1).over(Window.partitionBy("file").orderBy("file_pos"))
        records = records.select("*", before.alias("_before"))
        extra = [F.col("_before").alias("previous")]
    records = records.where((~blank).column())
    damaged = E.col("damaged")
    tombstone = ~damaged & ((text == "") | (E.trim(text) == "null"))
    unparsable = unparsable_reason(text, damaged, E.col("not_utf8"))
    parsed = E.from_json(text, with_corrupt, {"columnNameOfCorruptRecord": CORRUPT, "mode": "PERMISSIVE"})
    out = records.select(
        "file",
        "file_pos",
        "line",
        "text",
        "unterminated",
        unparsable.alias("unparsable").column(),
        E.when(unparsable.isNull(), parsed).alias("j").column(),
        tombstone.alias("tombstone").column(),
        *extra,
    )
    bad = E.coalesce(E.col("unparsable"), diagnose(E.col("j." + CORRUPT), E.col("unterminated")))
    return out.select(
        "file",
        "file_pos",
        "line",
        "text",
        "j",
        "tombstone",
        E.when(E.col("tombstone"), E.lit(None)).otherwise(bad).alias("bad").column(),
        *(["previous"] if extra else []),
    )


def unparsable_reason(text: Expr, damaged: Expr, not_utf8: Expr) -> Expr:
    """Quarantine reason for a record that is not handed to the JSON parser at all (null otherwise)."""
    return (
        E.when(damaged, E.lit(Q_TRUNCATED))
        .when(not_utf8, E.lit(Q_NOT_UTF8))
        .when(E.octet_length(text) > MAX_RECORD_BYTES, E.lit(Q_TOO_LARGE))
    )


def diagnose(corrupt: Expr, unterminated: Expr) -> Expr:
    """Quarantine reason for a record Spark's JSON reader flagged (null when it parsed)."""
    as_json = E.try_parse_json(corrupt)
    kind = E.substring(E.schema_of_variant(as_json), 1, 6)
    return (
        E.when(corrupt.isNull(), E.lit(None))
        .when(as_json.isNull() & unterminated, E.lit(Q_TRUNCATED))
        .when(as_json.isNull(), E.lit(Q_NOT_JSON))
        .when(kind != "OBJECT", E.lit(Q_NOT_OBJECT))
        .otherwise(E.lit(Q_TYPE_MISMATCH))
    )


def images_not_objects(bad: Expr, text: Expr, *paths: str, arrays: bool = False) -> Expr:
    """A record whose parse failed with a type mismatch because an image field is not an object.

    ``paths`` are the image fields (``$.before``); with ``arrays`` each must be an array of objects
    (Canal's ``data``/``old``). Only records flagged ``bad == type mismatch`` are parsed again: the
    guard is a CASE, not ``bad = ... AND``, because ``bad`` is null for good records and SQL's
    ``NULL AND x`` evaluates ``x`` (that re-parsed every record and was most of Canal's decode time).
    """
    v = E.try_parse_json(text)

    def not_image(path: str) -> Expr:
        value = E.variant_get(v, path, "variant")
        kind = E.schema_of_variant(value)
        if not arrays:
            return ~E.substring(kind, 1, 6).isin("OBJECT", "VOID")
        elements = E.try_variant_get(value, "$", "array<variant>")
        bad_element = E.exists(
            elements, lambda e: ~E.substring(E.schema_of_variant(e), 1, 6).isin("OBJECT", "VOID")
        )
        return ~kind.isin("VOID") & (~kind.startswith("ARRAY") | bad_element)

    any_bad = functools.reduce(operator.or_, [E.coalesce(not_image(p), E.lit(False)) for p in paths])
    return E.when(bad == Q_TYPE_MISMATCH, any_bad).otherwise(E.lit(False))

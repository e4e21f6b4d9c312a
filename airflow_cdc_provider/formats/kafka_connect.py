"""Kafka Connect schemas: column types and value conversions for JSON records that carry a schema.

Debezium (and CDL, which borrows the envelope) send ``{"schema": ..., "payload": ...}`` where the
schema names each column's Connect type and logical type. This module maps them to Spark types
and converts the JSON values (epoch days, epoch micros, Base64 bytes, two's-complement decimals)
into typed variants, as Spark expressions over a per-record column -> (type, codec) map.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, MapType, StringType, StructField, StructType

# The column level of a Connect struct schema.
COLUMN_SCHEMA = StructType(
    [
        StructField("field", StringType()),
        StructField("type", StringType()),
        StructField("name", StringType()),
        StructField("parameters", MapType(StringType(), StringType())),
    ]
)
# The record level: the envelope's fields, each possibly a struct of columns.
ENVELOPE_SCHEMA = StructType(
    [
        StructField(
            "fields",
            ArrayType(
                StructType(
                    [
                        StructField("field", StringType()),
                        StructField("name", StringType()),
                        StructField("fields", ArrayType(COLUMN_SCHEMA)),
                    ]
                )
            ),
        )
    ]
)

_PLAIN = {
    "int8": "tinyint",
    "int16": "smallint",
    "int32": "int",
    "int64": "bigint",
    "float32": "float",
    "float": "float",
    "float64": "double",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "binary",
    "struct": "string",
    "array": "string",
    "map": "string",
}
# logical name -> (spark type, codec)
_LOGICAL = {
    "org.apache.kafka.connect.data.Date": ("date", "epoch_days"),
    "io.debezium.time.Date": ("date", "epoch_days"),
    "org.apache.kafka.connect.data.Timestamp": ("timestamp", "epoch_ms"),
    "io.debezium.time.Timestamp": ("timestamp", "epoch_ms"),
    "io.debezium.time.MicroTimestamp": ("timestamp", "epoch_us"),
    "io.debezium.time.NanoTimestamp": ("timestamp", "epoch_ns"),
    "io.debezium.time.ZonedTimestamp": ("timestamp", "iso"),
    "org.apache.kafka.connect.data.Time": ("string", "time_ms"),
    "io.debezium.time.Time": ("string", "time_ms"),
    "io.debezium.time.MicroTime": ("string", "time_us"),
    "io.debezium.time.NanoTime": ("string", "time_ns"),
    "io.debezium.data.VariableScaleDecimal": ("string", "vsdecimal"),
}
DECIMAL_NAME = "org.apache.kafka.connect.data.Decimal"


def column_types(columns: Column) -> Column:
    """``array<COLUMN_SCHEMA>`` -> ``map<column, struct<type, codec>>`` (null when no schema)."""

    def entry(c: Column) -> Column:
        name = c["name"]
        plain_type = F.lit(None).cast("string")
        for connect, spark_type in _PLAIN.items():
            plain_type = F.when(c["type"] == connect, F.lit(spark_type)).otherwise(plain_type)
        spark_type = F.coalesce(plain_type, F.lit("string"))
        codec = F.when(c["type"] == "bytes", F.lit("base64")).when(c["type"].isin("struct", "array", "map"), F.lit("json"))
        for logical, (ltype, lcodec) in _LOGICAL.items():
            spark_type = F.when(name == logical, F.lit(ltype)).otherwise(spark_type)
            codec = F.when(name == logical, F.lit(lcodec)).otherwise(codec)
        scale = F.coalesce(c["parameters"]["scale"], F.lit("0"))
        precision = F.coalesce(c["parameters"]["connect.decimal.precision"], F.lit("38"))
        is_decimal = (name == DECIMAL_NAME) & (c["type"] == "bytes")
        spark_type = F.when(is_decimal, F.format_string("decimal(%s,%s)", precision, scale)).otherwise(spark_type)
        codec = F.when(is_decimal, F.concat(F.lit("decimal:"), scale)).otherwise(codec)
        return F.struct(c["field"].alias("col"), F.struct(spark_type.alias("type"), codec.alias("codec")).alias("t"))

    return F.when(columns.isNull(), F.lit(None)).otherwise(
        F.map_from_entries(F.transform(columns, entry))
    )


def _decimal_from_base64(b64: Column, scale: Column) -> Column:
    """Two's-complement big-endian bytes (Base64) with a scale -> exact decimal variant."""
    hexed = F.hex(F.try_to_binary(b64, F.lit("base64")))
    n = F.length(hexed) / 2
    negative = F.conv(F.substring(hexed, 1, 2), 16, 10).cast("int") >= 128
    idx = F.sequence(F.lit(0), (n - 1).cast("int"))

    def byte_at(i: Column, invert: bool) -> Column:
        b = F.conv(F.substring(hexed, i * 2 + 1, 2), 16, 10).cast("int")
        return (F.lit(255) - b) if invert else b

    def magnitude(invert: bool) -> Column:
        return F.aggregate(
            idx,
            F.lit(0).cast("decimal(38,0)"),
            lambda acc, i: F.try_add(F.try_multiply(acc, F.lit(256)), byte_at(i, invert)).cast("decimal(38,0)"),
        )

    unscaled = F.when(negative, -(magnitude(True) + 1)).otherwise(magnitude(False))
    digits = F.abs(unscaled).cast("string")
    s = scale.cast("int")
    padded = F.lpad(digits, F.greatest(F.length(digits), s + 1), "0")
    with_point = F.when(
        s > 0,
        F.concat(F.substring(padded, 1, F.length(padded) - s), F.lit("."), F.substring(padded, F.length(padded) - s + 1, 1000)),
    ).otherwise(padded)
    text = F.concat(F.when(unscaled < 0, F.lit("-")).otherwise(F.lit("")), with_point)
    return F.when(hexed.isNull() | (F.length(hexed) == 0), F.lit(None)).otherwise(F.try_parse_json(text))


def _time_text(micros: Column) -> Column:
    return F.date_format(F.timestamp_micros(micros), "HH:mm:ss.SSSSSS")


def convert_value(v: Column, codec: Column) -> Column:
    """A JSON value (variant) -> typed variant, by codec; null when it does not convert."""
    as_text = F.try_variant_get(v, "$", "string")
    as_long = F.try_variant_get(v, "$", "bigint")
    decimal_scale = F.element_at(F.split(codec, ":"), 2)
    return (
        F.when(codec.isNull() | (codec == "json"), v)
        .when(codec == "base64", F.try_to_binary(as_text, F.lit("base64")).cast("variant"))
        .when(codec == "epoch_days", F.date_add(F.lit("1970-01-01").cast("date"), as_long.cast("int")).cast("variant"))
        .when(codec == "epoch_ms", F.timestamp_millis(as_long).cast("variant"))
        .when(codec == "epoch_us", F.timestamp_micros(as_long).cast("variant"))
        .when(codec == "epoch_ns", F.timestamp_micros(F.floor(as_long / 1000)).cast("variant"))
        .when(codec == "iso", F.try_to_timestamp(as_text).cast("variant"))
        .when(codec == "time_ms", _time_text(as_long * 1000).cast("variant"))
        .when(codec == "time_us", _time_text(as_long).cast("variant"))
        .when(codec == "time_ns", _time_text(F.floor(as_long / 1000)).cast("variant"))
        .when(codec.startswith("decimal:"), _decimal_from_base64(as_text, decimal_scale))
        .when(
            codec == "vsdecimal",
            _decimal_from_base64(F.try_variant_get(v, "$.value", "string"), F.try_variant_get(v, "$.scale", "int")),
        )
        .otherwise(v)
    )


def convert_image(image: Column, declared: Column) -> Column:
    """Convert every value of a ``map<string,variant>`` image by the declared codec of its column."""
    return F.transform_values(
        image,
        lambda k, v: F.when(F.is_variant_null(v), v).otherwise(convert_value(v, declared[k]["codec"])),
    )


def _fits(v: Column, spark_type: Column) -> Column:
    """Whether a JSON value can be read as the plain Spark type named by ``spark_type``."""
    fits = F.lit(True)
    for t in ("tinyint", "smallint", "int", "bigint", "float", "double", "boolean"):
        fits = F.when(spark_type == t, F.try_variant_get(v, "$", t).isNotNull()).otherwise(fits)
    return fits


def image_conversion_failed(image: Column, converted: Column, declared: Column) -> Column:
    """True when a non-null value did not convert to its codec, or does not fit its declared type."""
    return F.exists(
        F.map_keys(image),
        lambda k: ~F.is_variant_null(image[k])
        & (
            converted[k].isNull()
            | (
                declared[k].isNotNull()
                & declared[k]["codec"].isNull()
                & ~_fits(converted[k], declared[k]["type"])
            )
        ),
    )

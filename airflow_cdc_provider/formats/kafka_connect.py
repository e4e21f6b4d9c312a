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
        codec = F.when(c["type"] == "bytes", F.lit("base64")).when(
            c["type"].isin("struct", "array", "map"), F.lit("json")
        )
        for logical, (ltype, lcodec) in _LOGICAL.items():
            spark_type = F.when(name == logical, F.lit(ltype)).otherwise(spark_type)
            codec = F.when(name == logical, F.lit(lcodec)).otherwise(codec)
        scale = F.coalesce(c["parameters"]["scale"], F.lit("0"))
        precision = F.coalesce(c["parameters"]["connect.decimal.precision"], F.lit("38"))
        is_decimal = (name == DECIMAL_NAME) & (c["type"] == "bytes")
        spark_type = F.when(is_decimal, F.format_string("decimal(%s,%s)", precision, scale)).otherwise(
            spark_type
        )
        codec = F.when(is_decimal, F.concat(F.lit("decimal:"), scale)).otherwise(codec)
        return F.struct(
            c["field"].alias("col"), F.struct(spark_type.alias("type"), codec.alias("codec")).alias("t")
        )

    return F.when(columns.isNull(), F.lit(None)).otherwise(F.map_from_entries(F.transform(columns, entry)))


def let(value: Column, body) -> Column:
    """Bind ``value`` once and use it in ``body`` (a lambda), instead of copying its expression."""
    return F.transform(F.array(value), body)[0]


def _decimal_from_base64(b64: Column, scale: Column) -> Column:
    """Two's-complement big-endian bytes (Base64) with a scale -> exact decimal variant.

    Up to 15 bytes (precision 36); a larger or malformed value gives null (quarantined).
    """

    def unsigned(h: Column) -> Column:
        high = F.conv(F.substring(h, 1, F.length(h) - 16), 16, 10).try_cast("decimal(38,0)")
        low = F.conv(F.substring(h, F.greatest(F.length(h) - 15, F.lit(1)), 16), 16, 10).try_cast(
            "decimal(38,0)"
        )
        two_pow_64 = F.lit("18446744073709551616").cast("decimal(38,0)")
        return F.try_add(F.try_multiply(F.coalesce(high, F.lit(0).cast("decimal(38,0)")), two_pow_64), low)

    def from_hex(h: Column) -> Column:
        # Negative: the magnitude is the bitwise NOT (hex digit complement) plus one.
        complement = F.translate(h, "0123456789ABCDEF", "FEDCBA9876543210")
        negative = F.substring(h, 1, 1) >= "8"
        signed = F.when(negative, -F.try_add(unsigned(complement), F.lit(1))).otherwise(unsigned(h))
        return F.when((F.length(h) > 0) & (F.length(h) <= 30), signed.try_cast("decimal(38,0)"))

    def to_text(u: Column) -> Column:
        s = scale.cast("int")
        digits = F.lpad(F.abs(u).cast("string"), F.greatest(F.length(F.abs(u).cast("string")), s + 1), "0")
        return let(
            digits,
            lambda d: F.concat(
                F.when(u < 0, F.lit("-")).otherwise(F.lit("")),
                F.substring(d, 1, F.length(d) - s),
                F.when(s > 0, F.concat(F.lit("."), F.substring(d, F.length(d) - s + 1, 64))).otherwise(
                    F.lit("")
                ),
            ),
        )

    unscaled = let(F.hex(F.try_to_binary(b64, F.lit("base64"))), from_hex)
    return let(unscaled, lambda u: F.when(u.isNotNull(), F.try_parse_json(to_text(u))))


_NUMBER_KINDS = ("BIGINT", "INT", "SMALLINT", "TINYINT", "DECIMAL", "DOUBLE", "FLOAT")
# Padded standard Base64, as Kafka Connect's JsonConverter writes ``bytes`` (decimal.format=BASE64).
_BASE64 = r"^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def _is_number(v: Column) -> Column:
    kind = F.schema_of_variant(v)
    return F.exists(F.array(*[F.lit(k) for k in _NUMBER_KINDS]), lambda k: kind.startswith(k))


def _decimal_value(v: Column, scale: Column) -> Column:
    """A ``org.apache.kafka.connect.data.Decimal`` value in any of its JSON encodings -> exact decimal variant.

    - Base64 text of the two's-complement unscaled bytes (``decimal.format=BASE64``, the default);
    - a JSON number (``decimal.format=NUMERIC``, KIP-481): its digits as written, never via a double;
    - a JSON string holding a number (``"12.50"``), as CDL and some sinks write decimals.
    A string that is valid padded Base64 is read as Base64 (the Connect encoding of ``bytes``), so an
    all-digit text whose length is a multiple of 4 (``"1234"``) decodes as bytes, as Connect's own
    converter would. Anything else gives null (the record is quarantined).
    """
    text = F.try_variant_get(v, "$", "string")
    # Re-parsing the number's text keeps every digit: JSON numbers land as exact decimals, and a
    # value the parser held as a double (exponent form) becomes a decimal when its text is one.
    as_number = let(F.try_parse_json(F.trim(text)), lambda n: F.when(_is_number(n), n))
    is_string = F.schema_of_variant(v) == "STRING"
    return (
        F.when(_is_number(v), as_number)
        .when(is_string & text.rlike(_BASE64), _decimal_from_base64(text, scale))
        .when(is_string, as_number)
    )


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
        .when(
            codec == "epoch_days",
            F.date_add(F.lit("1970-01-01").cast("date"), as_long.cast("int")).cast("variant"),
        )
        .when(codec == "epoch_ms", F.timestamp_millis(as_long).cast("variant"))
        .when(codec == "epoch_us", F.timestamp_micros(as_long).cast("variant"))
        .when(codec == "epoch_ns", F.timestamp_micros(F.floor(as_long / 1000)).cast("variant"))
        .when(codec == "iso", F.try_to_timestamp(as_text).cast("variant"))
        .when(codec == "time_ms", _time_text(as_long * 1000).cast("variant"))
        .when(codec == "time_us", _time_text(as_long).cast("variant"))
        .when(codec == "time_ns", _time_text(F.floor(as_long / 1000)).cast("variant"))
        .when(codec.startswith("decimal:"), _decimal_value(v, decimal_scale.cast("int")))
        .when(
            codec == "vsdecimal",
            _decimal_from_base64(
                F.try_variant_get(v, "$.value", "string"), F.try_variant_get(v, "$.scale", "int")
            ),
        )
        .otherwise(v)
    )


def convert_image(image: Column, declared: Column) -> Column:
    """Convert every value of a ``map<string,variant>`` image by the declared codec of its column.

    Without a schema block there is nothing to convert; skipping the per-value walk then matters
    because higher-order functions run interpreted, not code-generated.
    """
    converted = F.transform_values(
        image,
        lambda k, v: F.when(F.is_variant_null(v), v).otherwise(convert_value(v, declared[k]["codec"])),
    )
    return F.when(declared.isNull(), image).otherwise(converted)


def _fits(v: Column, spark_type: Column) -> Column:
    """Whether a JSON value can be read as the plain Spark type named by ``spark_type``."""
    fits = F.lit(True)
    for t in ("tinyint", "smallint", "int", "bigint", "float", "double", "boolean"):
        fits = F.when(spark_type == t, F.try_variant_get(v, "$", t).isNotNull()).otherwise(fits)
    return fits


def image_conversion_failed(image: Column, converted: Column, declared: Column) -> Column:
    """True when a non-null value did not convert to its codec, or does not fit its declared type."""
    failed = F.exists(
        F.map_keys(image),
        lambda k: (
            ~F.is_variant_null(image[k])
            & (
                converted[k].isNull()
                | (
                    declared[k].isNotNull()
                    & declared[k]["codec"].isNull()
                    & ~_fits(converted[k], declared[k]["type"])
                )
            )
        ),
    )
    return F.when(declared.isNull(), F.lit(False)).otherwise(failed)

"""Kafka Connect schemas: column types and value conversions for JSON records that carry a schema.

Debezium (and CDL, which borrows the envelope) send ``{"schema": ..., "payload": ...}`` where the
schema names each column's Connect type and logical type. This module maps them to Spark types
and converts the JSON values (epoch days, epoch micros, Base64 bytes, two's-complement decimals)
into typed variants, as Spark expressions over a per-record column -> (type, codec) map (built
as SQL text with ``sqlexpr``: these are the largest expressions a decoder plans).
"""

from __future__ import annotations

from pyspark.sql.types import ArrayType, MapType, StringType, StructField, StructType

from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr

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
_LOGICAL_TYPES = {name: spark_type for name, (spark_type, _) in _LOGICAL.items()}
_LOGICAL_CODECS = {name: codec for name, (_, codec) in _LOGICAL.items()}
# Plain types whose JSON value is not the value itself.
_PLAIN_CODECS = {"bytes": "base64", "struct": "json", "array": "json", "map": "json"}
DECIMAL_NAME = "org.apache.kafka.connect.data.Decimal"


def column_types(columns: Expr) -> Expr:
    """``array<COLUMN_SCHEMA>`` -> ``map<column, struct<type, codec>>`` (null when no schema).

    Each rule is one map lookup rather than a chain of comparisons: this walk runs interpreted,
    once per record for records that carry their schema block.
    """

    def entry(c: Expr) -> Expr:
        name, connect_type = c["name"], c["type"]
        logical_type = E.lookup(_LOGICAL_TYPES, name)
        spark_type = E.coalesce(logical_type, E.lookup(_PLAIN, connect_type), E.lit("string"))
        codec = E.when(logical_type.isNotNull(), E.lookup(_LOGICAL_CODECS, name)).otherwise(
            E.lookup(_PLAIN_CODECS, connect_type)
        )
        scale = E.coalesce(c["parameters"]["scale"], E.lit("0"))
        precision = E.coalesce(c["parameters"]["connect.decimal.precision"], E.lit("38"))
        is_decimal = (name == DECIMAL_NAME) & (connect_type == "bytes")
        spark_type = E.when(is_decimal, E.format_string("decimal(%s,%s)", precision, scale)).otherwise(
            spark_type
        )
        codec = E.when(is_decimal, E.concat(E.lit("decimal:"), scale)).otherwise(codec)
        return E.struct(
            c["field"].alias("col"), E.struct(spark_type.alias("type"), codec.alias("codec")).alias("t")
        )

    return E.when(columns.isNull(), E.lit(None)).otherwise(E.map_from_entries(E.transform(columns, entry)))


def _decimal_from_base64(b64: Expr, scale: Expr) -> Expr:
    """Two's-complement big-endian bytes (Base64) with a scale -> exact decimal variant.

    Up to 15 bytes (precision 36); a larger or malformed value gives null (quarantined).
    """

    def unsigned(h: Expr) -> Expr:
        high = E.conv(E.substring(h, 1, E.length(h) - 16), 16, 10).try_cast("decimal(38,0)")
        low = E.conv(E.substring(h, E.greatest(E.length(h) - 15, E.lit(1)), 16), 16, 10).try_cast(
            "decimal(38,0)"
        )
        two_pow_64 = E.lit("18446744073709551616").cast("decimal(38,0)")
        return E.try_add(E.try_multiply(E.coalesce(high, E.lit(0).cast("decimal(38,0)")), two_pow_64), low)

    def from_hex(h: Expr) -> Expr:
        # Negative: the magnitude is the bitwise NOT (hex digit complement) plus one.
        complement = E.translate(h, "0123456789ABCDEF", "FEDCBA9876543210")
        negative = E.substring(h, 1, 1) >= "8"
        signed = E.when(negative, -E.try_add(unsigned(complement), E.lit(1))).otherwise(unsigned(h))
        return E.when((E.length(h) > 0) & (E.length(h) <= 30), signed.try_cast("decimal(38,0)"))

    def to_text(u: Expr) -> Expr:
        s = scale.cast("int")
        digits = E.lpad(E.abs(u).cast("string"), E.greatest(E.length(E.abs(u).cast("string")), s + 1), "0")
        return E.let(
            digits,
            lambda d: E.concat(
                E.when(u < 0, E.lit("-")).otherwise(E.lit("")),
                E.substring(d, 1, E.length(d) - s),
                E.when(s > 0, E.concat(E.lit("."), E.substring(d, E.length(d) - s + 1, 64))).otherwise(
                    E.lit("")
                ),
            ),
        )

    unscaled = E.let(E.hex(E.try_to_binary(b64, "base64")), from_hex)
    return E.let(unscaled, lambda u: E.when(u.isNotNull(), E.try_parse_json(to_text(u))))


_NUMBER_KINDS = ("BIGINT", "INT", "SMALLINT", "TINYINT", "DECIMAL", "DOUBLE", "FLOAT")
# Padded standard Base64, as Kafka Connect's JsonConverter writes ``bytes`` (decimal.format=BASE64).
_BASE64 = r"^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def _is_number(v: Expr) -> Expr:
    kind = E.schema_of_variant(v)
    return E.exists(E.array(*[E.lit(k) for k in _NUMBER_KINDS]), lambda k: kind.startswith(k))


def _decimal_value(v: Expr, scale: Expr) -> Expr:
    """A ``org.apache.kafka.connect.data.Decimal`` value in any of its JSON encodings -> exact decimal variant.

    - Base64 text of the two's-complement unscaled bytes (``decimal.format=BASE64``, the default);
    - a JSON number (``decimal.format=NUMERIC``, KIP-481): its digits as written, never via a double;
    - a JSON string holding a number (``"12.50"``), as CDL and some sinks write decimals.
    A string that is valid padded Base64 is read as Base64 (the Connect encoding of ``bytes``), so an
    all-digit text whose length is a multiple of 4 (``"1234"``) decodes as bytes, as Connect's own
    converter would. Anything else gives null (the record is quarantined).
    """
    text = E.try_variant_get(v, "$", "string")
    # Re-parsing the number's text keeps every digit: JSON numbers land as exact decimals, and a
    # value the parser held as a double (exponent form) becomes a decimal when its text is one.
    as_number = E.let(E.try_parse_json(E.trim(text)), lambda n: E.when(_is_number(n), n))
    is_string = E.schema_of_variant(v) == "STRING"
    return (
        E.when(_is_number(v), as_number)
        .when(is_string & text.rlike(_BASE64), _decimal_from_base64(text, scale))
        .when(is_string, as_number)
    )


def _time_text(micros: Expr) -> Expr:
    return E.date_format(E.timestamp_micros(micros), "HH:mm:ss.SSSSSS")


def convert_value(v: Expr, codec: Expr) -> Expr:
    """A JSON value (variant) -> typed variant, by codec; null when it does not convert."""
    as_text = E.try_variant_get(v, "$", "string")
    as_long = E.try_variant_get(v, "$", "bigint")
    decimal_scale = E.element_at(E.split(codec, ":"), 2)
    return (
        E.when(codec.isNull() | (codec == "json"), v)
        .when(codec == "base64", E.try_to_binary(as_text, "base64").cast("variant"))
        .when(
            codec == "epoch_days",
            E.date_add(E.lit("1970-01-01").cast("date"), as_long.cast("int")).cast("variant"),
        )
        .when(codec == "epoch_ms", E.timestamp_millis(as_long).cast("variant"))
        .when(codec == "epoch_us", E.timestamp_micros(as_long).cast("variant"))
        .when(codec == "epoch_ns", E.timestamp_micros(E.floor(as_long / 1000)).cast("variant"))
        .when(codec == "iso", E.try_to_timestamp(as_text).cast("variant"))
        .when(codec == "time_ms", _time_text(as_long * 1000).cast("variant"))
        .when(codec == "time_us", _time_text(as_long).cast("variant"))
        .when(codec == "time_ns", _time_text(E.floor(as_long / 1000)).cast("variant"))
        .when(codec.startswith("decimal:"), _decimal_value(v, decimal_scale.cast("int")))
        .when(
            codec == "vsdecimal",
            _decimal_from_base64(
                E.try_variant_get(v, "$.value", "string"), E.try_variant_get(v, "$.scale", "int")
            ),
        )
        .otherwise(v)
    )


def convert_image(image: Expr, declared: Expr) -> Expr:
    """Convert every value of a ``map<string,variant>`` image by the declared codec of its column.

    Without a schema block there is nothing to convert; skipping the per-value walk then matters
    because higher-order functions run interpreted, not code-generated.
    """
    converted = E.transform_values(
        image,
        lambda k, v: E.when(E.is_variant_null(v), v).otherwise(convert_value(v, declared[k]["codec"])),
    )
    return E.when(declared.isNull(), image).otherwise(converted)


def _fits(v: Expr, spark_type: Expr) -> Expr:
    """Whether a JSON value can be read as the plain Spark type named by ``spark_type``."""
    fits = E.lit(True)
    for t in ("tinyint", "smallint", "int", "bigint", "float", "double", "boolean"):
        fits = E.when(spark_type == t, E.try_variant_get(v, "$", t).isNotNull()).otherwise(fits)
    return fits


def image_conversion_failed(image: Expr, converted: Expr, declared: Expr) -> Expr:
    """True when a non-null value did not convert to its codec, or does not fit its declared type."""
    failed = E.exists(
        E.map_keys(image),
        lambda k: (
            ~E.is_variant_null(image[k])
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
    return E.when(declared.isNull(), E.lit(False)).otherwise(failed)

"""Qlik Replicate values: the expressions that read one field of an MD or DT message.

Shared by the MD side (``metadata``), the typing of DT images (``images``) and the decoder: header
text, timestamps, the ``changeSequence`` position, the ``columnMask`` bits and the conversion of a
DT value to the type its MD message declares.
"""

from __future__ import annotations

from airflow_cdc_provider.formats.common.values import REPLICATE_TYPES, text_to_variant
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr

# Replicate data type -> Spark type (NUMERIC is handled with its precision and scale).
_TYPES = REPLICATE_TYPES | {
    "TIMESTAMP": "timestamp",
    "BYTES": "binary",
    "BLOB": "binary",
}


def blank_to_null(c: Expr) -> Expr:
    """Null for blank text: Replicate writes an empty string for a header it has no value for."""
    return E.when(E.trim(c) != "", c)


def utc_millis(text: Expr) -> Expr:
    """Epoch ms of a Replicate timestamp: ISO text in UTC (with or without offset), or epoch ms."""
    t = E.trim(text)
    with_zone = E.when(t.rlike(r"(Z|[+-]\d\d:?\d\d)$"), t).otherwise(E.concat(t, E.lit("Z")))
    return E.when(t.rlike(r"^\d+$"), t.try_cast("bigint")).otherwise(
        E.unix_millis(E.try_to_timestamp(with_zone))
    )


def change_sequence_position(seq: Expr) -> Expr:
    """``changeSequence`` -> ``[time part, counter high, counter low]``, order-preserving.

    35 digits do not fit a long; fixed-width slices of the zero-padded digits compare element-wise
    exactly like the string. Not all digits (or longer than 35): null.
    """
    s = E.trim(seq)
    padded = E.lpad(s, 35, "0")
    parts = E.array(
        E.substring(padded, 1, 16).try_cast("bigint"),
        E.substring(padded, 17, 10).try_cast("bigint"),
        E.substring(padded, 27, 9).try_cast("bigint"),
    )
    return E.when(s.rlike(r"^\d{1,35}$"), parts)


def spark_type(column: Expr) -> Expr:
    """A Replicate column (type, precision, scale) -> Spark SQL type name."""
    t = E.upper(E.trim(column["type"]))
    p, s = column["precision"], E.coalesce(column["scale"], E.lit(0))
    decimal_fits = (p >= 1) & (p <= 38) & (s >= 0) & (s <= p)
    numeric = E.when(decimal_fits, E.format_string("decimal(%d,%d)", p, s)).otherwise(E.lit("string"))
    out = E.when(t.isin("NUMERIC", "DECIMAL"), numeric)
    for name, spark in _TYPES.items():
        out = out.when(t == name, E.lit(spark))
    return out.otherwise(E.lit("string"))


def column_present(mask: Expr, ordinal: Expr) -> Expr:
    """Whether the bit of ``ordinal`` (1-based) is set in a little-endian hex mask.

    Byte ``i`` of the mask (hex digits ``2i+1..2i+2``) holds ordinals ``8i+1..8i+8``, lowest bit
    first; bytes past the end of the mask are zero (Replicate trims trailing zero bytes).
    """
    bit = ordinal - 1
    byte = E.conv(E.substring(mask, (E.floor(bit / 8) * 2 + 1).cast("int"), 2), 16, 10).try_cast("int")
    weight = E.pow(E.lit(2), bit % 8).cast("int")
    return E.coalesce(byte.bitwiseAND(weight) > 0, E.lit(False))


def value_text(v: Expr) -> Expr:
    """A DT value as text (a number keeps its JSON digits); JSON null -> null."""
    return E.when(~E.is_variant_null(v), E.try_variant_get(v, "$", "string"))


def declared_value(text: Expr, spark_type: Expr) -> Expr:
    """A value's text converted to its declared type (binary columns are hex in Replicate's JSON)."""
    return E.when(spark_type == "binary", E.try_to_binary(text, "hex").cast("variant")).otherwise(
        text_to_variant(text, spark_type)
    )

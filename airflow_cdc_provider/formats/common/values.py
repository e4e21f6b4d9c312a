"""Turning landed values into typed variants, shared by every decoder.

Several formats carry values as text and declare their types beside them (Canal's mysqlType,
DataHub BLOB's column types, Qlik's table structure, CDL's schema block). The decoder maps its own
type names to Spark SQL type names; the conversion from text to a typed variant is the same for all
of them and lives here, so a fix to one conversion reaches every format.

All conversions are ``try_*``: Spark 4 runs in ANSI mode, and a value that does not convert must
become a quarantined record (the caller compares input and output nulls), never a failed job.
"""

from __future__ import annotations

from collections.abc import Callable

from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr

_INTEGRAL = ("tinyint", "smallint", "int", "bigint")

# The data types of Qlik Replicate and of AWS DMS (which grew from it) -> Spark types. Each format
# adds the names only it uses, and decides itself how it keeps bytes.
REPLICATE_TYPES = {
    "INT1": "tinyint",
    "INT2": "smallint",
    "INT4": "int",
    "INT8": "bigint",
    "UINT1": "smallint",
    "UINT2": "int",
    "UINT4": "bigint",
    "UINT8": "decimal(20,0)",
    "REAL4": "float",
    "REAL8": "double",
    "BOOLEAN": "boolean",
    "DATE": "date",
    "DATETIME": "timestamp",
}


def digits_number(text: Expr) -> Expr:
    """``text`` as a ``bigint`` when it is nothing but ASCII digits (leading zeros allowed); else null.

    The same test as a ``^[0-9]+$`` match, without a regular expression per record: the number's
    own digits, zero-padded to the text's length, must give the text back.
    """
    n = text.try_cast("bigint")
    return E.when((n >= 0) & (E.lpad(n.cast("string"), E.length(text), "0") == text), n)


def present(v: Expr) -> Expr:
    """A variant unless it is missing or JSON null."""
    return E.when(v.isNotNull() & ~E.is_variant_null(v), v)


def object_map(v: Expr) -> Expr:
    """A present variant object as ``map<string,variant>``; null for anything else.

    The cast fails (to null) on a value that is no object, so it also tells objects apart, without
    ``schema_of_variant``, which would describe the whole value as text.
    """
    return E.try_variant_get(present(v), "$", "map<string,variant>")


def not_an_object(v: Expr, as_map: Expr) -> Expr:
    """A present value whose ``object_map`` (``as_map``) is null: some JSON value other than an object."""
    return present(v).isNotNull() & as_map.isNull()


def text_to_variant(text: Expr, spark_type: Expr) -> Expr:
    """Convert a text value to a variant holding the Spark type named by ``spark_type``.

    ``spark_type`` is a per-row value (the type differs per column and record). Decimals keep
    their exact digits (parsed as JSON numbers), binary is Base64, dates and timestamps are ISO
    text (timestamps without an offset are UTC). Unknown type names keep the text as a string.
    """
    t = E.lower(spark_type)
    number = E.try_parse_json(text)
    is_number = E.substring(E.schema_of_variant(number), 1, 3).isin(
        "BIG", "INT", "DEC", "DOU", "FLO", "SMA", "TIN"
    )
    return (
        E.when(text.isNull(), E.null("variant"))
        .when(t.isin(*_INTEGRAL), _integral(text, t))
        .when(t == "float", text.try_cast("float").cast("variant"))
        .when(t == "double", text.try_cast("double").cast("variant"))
        .when(t.startswith("decimal"), E.when(is_number, number))
        .when(t == "boolean", _boolean(text).cast("variant"))
        .when(t == "date", E.try_to_date(text).cast("variant"))
        .when(t == "timestamp", E.try_to_timestamp(text).cast("variant"))
        .when(t == "binary", E.try_to_binary(text, "base64").cast("variant"))
        .otherwise(text.cast("variant"))
    )


def _integral(text: Expr, t: Expr) -> Expr:
    return (
        E.when(t == "tinyint", text.try_cast("tinyint"))
        .when(t == "smallint", text.try_cast("smallint"))
        .when(t == "int", text.try_cast("int"))
        .otherwise(text.try_cast("bigint"))
        .cast("variant")
    )


def _boolean(text: Expr) -> Expr:
    lowered = E.lower(E.trim(text))
    return E.when(lowered.isin("true", "t", "1", "y", "yes"), E.lit(True)).when(
        lowered.isin("false", "f", "0", "n", "no"), E.lit(False)
    )


def text_image(image: Expr, types: Expr) -> Expr:
    """Convert a ``map<string,string>`` row image to ``map<string,variant>`` by a ``types`` map."""
    return E.transform_values(image, lambda k, v: text_to_variant(v, types[k]))


def aligned_values(image: Expr, types: Expr, convert: Callable[[Expr, Expr], Expr] = text_to_variant) -> Expr:
    """The converted values of a text ``image`` in its key order, when ``types`` declares exactly its
    columns in the same order (null otherwise: the caller converts by lookup instead).

    Producers that write a type map beside each row (Canal's mysqlType) write both from the
    table's column list, so this is the common case. Spark runs higher-order functions
    interpreted, and a map lookup in one (``types[k]``) walks the map reading every key through
    Spark's generic getters; pairing the two value arrays instead reads each value once.
    ``types`` must hold distinct keys (a map built by ``map_concat`` does): the caller rebuilds the
    image with ``map_from_arrays``, which refuses duplicates.
    """
    return E.when(
        E.map_keys(image) == E.map_keys(types),
        E.zip_with(E.map_values(image), E.map_values(types), convert),
    )


def failed_conversions(text_image_col: Expr, typed_image_col: Expr) -> Expr:
    """True when some non-null text value did not convert (the record goes to quarantine).

    ``typed_image_col`` is ``text_image_col`` converted entry by entry (``transform_values``,
    ``text_image``, or rebuilt from ``aligned_values``), so both hold their entries in the same
    order: the values are paired by position, with no lookup per key inside the lambda.
    """
    return E.array_contains(
        E.zip_with(
            E.map_values(text_image_col),
            E.map_values(typed_image_col),
            lambda t, v: t.isNotNull() & v.isNull(),
        ),
        E.lit(True),
    )

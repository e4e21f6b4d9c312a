"""MySQL column types as Canal and Maxwell declare them (``bigint(20) unsigned``, java.sql codes) -> Spark types."""

from __future__ import annotations

from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr

EMPTY_TEXT_MAP = "map<string,string>"

# MySQL type names (lower case, without length) -> Spark type; the integer ones widen when unsigned.
_MYSQL_SIGNED = {
    "tinyint": "tinyint",
    "smallint": "smallint",
    "mediumint": "int",
    "int": "int",
    "integer": "int",
    "bigint": "bigint",
}
_MYSQL_UNSIGNED = {
    "tinyint": "smallint",
    "smallint": "int",
    "mediumint": "int",
    "int": "bigint",
    "integer": "bigint",
    "bigint": "decimal(20,0)",
}
_MYSQL_PLAIN = {
    **{t: "double" for t in ("double", "double precision", "real")},
    **{t: "boolean" for t in ("bool", "boolean")},
    **{
        t: "string"
        for t in (
            "char",
            "varchar",
            "character",
            "character varying",
            "nchar",
            "nvarchar",
            "tinytext",
            "text",
            "mediumtext",
            "longtext",
            "enum",
            "set",
            "json",
            "time",
        )
    },
    **{t: "binary" for t in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")},
    "date": "date",
    "datetime": "timestamp",
    "timestamp": "timestamp",
    "year": "int",
}
_DECIMAL_NAMES = ("decimal", "numeric", "dec", "fixed")
# java.sql.Types codes (sqlType) -> Spark type, for columns whose mysqlType is missing or unknown.
_JDBC = {
    "-7": "boolean",
    "16": "boolean",
    "-6": "tinyint",
    "5": "smallint",
    "4": "int",
    "-5": "bigint",
    "7": "float",
    "6": "double",
    "8": "double",
    "2": "decimal(38,10)",
    "3": "decimal(38,10)",
    "91": "date",
    "93": "timestamp",
    "2014": "timestamp",
    **{c: "binary" for c in ("-2", "-3", "-4", "2004")},
}


def empty_text_map() -> Expr:
    return E.map().cast(EMPTY_TEXT_MAP)


def _lowered(mysql_type: Expr) -> Expr:
    return E.lower(E.trim(mysql_type))


def _type_base(low: Expr) -> Expr:
    """``bigint`` of ``bigint(20) unsigned``, ``double precision`` of itself."""
    return E.regexp_extract(low, r"^([a-z]+(?: precision| varying)?)", 1)


def mysql_spark_type(mysql_type: Expr, base: Expr | None = None) -> Expr:
    """A MySQL column type as Canal writes it (``bigint(20) unsigned``, ``NUMERIC(8,3)``) -> Spark type.

    Null for names it does not know, so the caller can fall back to ``sqlType``. ``base``
    (``_type_base``) when the caller has it: inside a lambda Spark would evaluate the regular
    expression again at every use.
    """
    low = _lowered(mysql_type)
    base = _type_base(low) if base is None else base
    first = E.regexp_extract(low, r"\(\s*(\d+)", 1).try_cast("int")
    second = E.regexp_extract(low, r"\(\s*\d+\s*,\s*(\d+)", 1).try_cast("int")
    precision = E.least(E.coalesce(first, E.lit(10)), E.lit(38))
    scale = E.least(E.coalesce(second, E.lit(0)), precision)
    integral = E.when(low.contains("unsigned"), E.lookup(_MYSQL_UNSIGNED, base)).otherwise(
        E.lookup(_MYSQL_SIGNED, base)
    )
    return (
        E.when(base.isin(*_DECIMAL_NAMES), E.format_string("decimal(%d,%d)", precision, scale))
        # FLOAT(p) with p > 24 is a double in MySQL; FLOAT(M,D) stays single precision.
        .when((base == "float") & (first > 24) & second.isNull(), E.lit("double"))
        .when(base == "float", E.lit("float"))
        .when((base == "bit") & (E.coalesce(first, E.lit(1)) == 1), E.lit("boolean"))
        .when(base == "bit", E.lit("bigint"))
        .otherwise(E.coalesce(integral, E.lookup(_MYSQL_PLAIN, base)))
    )


def jdbc_spark_type(code: Expr) -> Expr:
    """A java.sql.Types code (Canal's ``sqlType``) -> Spark type; other codes are text."""
    return E.when(code.isNotNull(), E.coalesce(E.lookup(_JDBC, E.trim(code)), E.lit("string")))


def declared_types(mysql_types: Expr, sql_types: Expr) -> Expr:
    """``map<column, spark type>`` for every column the message declares (null when none)."""
    mysql_or_empty = E.coalesce(mysql_types, empty_text_map())
    bases = E.transform(E.map_values(mysql_or_empty), lambda t: _type_base(_lowered(t)))
    spark_types = E.zip_with(
        E.map_entries(mysql_or_empty),
        bases,
        lambda e, base: E.coalesce(
            mysql_spark_type(e["value"], base),
            jdbc_spark_type(E.try_element_at(sql_types, e["key"])),
            E.lit("string"),
        ),
    )
    from_mysql = E.map_from_arrays(E.map_keys(mysql_or_empty), spark_types)
    only_jdbc = E.transform_values(
        E.map_filter(
            E.coalesce(sql_types, empty_text_map()),
            lambda k, c: c.isNotNull() & ~E.map_contains_key(mysql_or_empty, k),
        ),
        lambda k, c: jdbc_spark_type(c),
    )
    return E.when(mysql_types.isNotNull() | sql_types.isNotNull(), E.map_concat(from_mysql, only_jdbc))

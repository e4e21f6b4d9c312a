"""Canal JSON (flat messages) as Alibaba DTS and open-source Canal write them.

One message carries several rows of one table: ``data[i]`` is row i after the change and
``old[i]`` holds the previous values of only the columns that changed. Canal writes every value as
a JSON string; ``mysqlType`` (else ``sqlType``, java.sql.Types codes) says what it really is, so the
values are typed here. A column no type declares keeps its JSON type (Flink CDC's Kafka sink writes
typed JSON values and no ``mysqlType``): ``1.0`` stays the double 1.0, never the text ``"1"``. DTS instances created before 2022-03-20 put a DELETE's rows in ``old`` and
leave ``data`` null; that layout is recognised per record. DDL messages are counted, never applied;
an ``ALTER TABLE`` that adds or drops columns says so on its ignored event (see ``formats.ddl``).

The plan is built in stages (parse, declare types, type the rows once, classify, explode) with plan
barriers between them, so that the large per-value conversion appears once in the plan instead of
being copied into every later use (this halved planning time).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    MapType,
    StringType,
    StructField,
    StructType,
    VariantType,
)

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.ddl import added_columns, dropped_columns
from airflow_cdc_provider.formats.events import (
    IGNORED_DDL,
    IGNORED_HEARTBEAT,
    IGNORED_TOMBSTONE,
    IGNORED_TRANSACTION,
    IMAGE_TYPE,
    KIND_CHANGE,
    KIND_IGNORED,
    KIND_QUARANTINED,
    OP_DELETE,
    OP_INSERT,
    OP_READ,
    OP_TRUNCATE,
    OP_UPDATE,
    Q_IMAGE_NOT_OBJECT,
    Q_KEY_UNKNOWN,
    Q_MISSING_IMAGE,
    Q_MISSING_OP,
    Q_MISSING_TABLE,
    Q_TYPE_MISMATCH,
    Q_UNKNOWN_OP,
    canonical,
    classify,
    plan_barrier,
)
from airflow_cdc_provider.formats.jsonlines import images_not_objects, parse_json_records
from airflow_cdc_provider.formats.landed_files import LandedFile
from airflow_cdc_provider.formats.values import failed_conversions, text_to_variant

ROW_TYPE = MapType(StringType(), VariantType())
RECORD_SCHEMA = StructType(
    [
        # Rows as maps keep their columns in the order the message writes them (a variant object
        # would sort them by name); a row that is not an object fails the parse and is diagnosed
        # from the record's text (jsonlines.images_not_objects).
        StructField("data", ArrayType(ROW_TYPE)),
        StructField("old", ArrayType(ROW_TYPE)),
        StructField("database", StringType()),
        StructField("table", StringType()),
        StructField("type", StringType()),
        StructField("isDdl", StringType()),
        StructField("es", StringType()),
        StructField("ts", StringType()),
        StructField("id", StringType()),
        StructField("pkNames", ArrayType(StringType())),
        StructField("mysqlType", MapType(StringType(), StringType())),
        StructField("sqlType", MapType(StringType(), StringType())),
        StructField("sql", StringType()),
    ]
)

_ROW_OPS = {"INSERT": OP_INSERT, "UPDATE": OP_UPDATE, "DELETE": OP_DELETE, "INIT": OP_READ}
_TRUNCATE = "TRUNCATE"
_DDL_TYPES = ("CREATE", "ALTER", "ERASE", "QUERY", "RENAME", "CINDEX", "DINDEX", "DDL")
_HEARTBEAT_TYPES = ("MHEARTBEAT", "HEARTBEAT")
_TRANSACTION_TYPES = ("GTID", "XACOMMIT", "XAROLLBACK", "BEGIN", "COMMIT", "ROLLBACK")

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
# ALTER TABLE ... ADD [COLUMN] name type: names that start a constraint or an index are not columns.
_EMPTY_TEXT_MAP = "map<string,string>"


def _lookup(table: dict[str, str], key: Column) -> Column:
    """``table[key]`` as one map literal (null for unknown keys), not a chain of ``when``."""
    literal = F.create_map(*[F.lit(x) for pair in table.items() for x in pair])
    return F.try_element_at(literal, key)


def mysql_spark_type(mysql_type: Column) -> Column:
    """A MySQL column type as Canal writes it (``bigint(20) unsigned``, ``NUMERIC(8,3)``) -> Spark type.

    Null for names it does not know, so the caller can fall back to ``sqlType``.
    """
    low = F.lower(F.trim(mysql_type))
    base = F.regexp_extract(low, r"^([a-z]+(?: precision| varying)?)", 1)
    first = F.regexp_extract(low, r"\(\s*(\d+)", 1).try_cast("int")
    second = F.regexp_extract(low, r"\(\s*\d+\s*,\s*(\d+)", 1).try_cast("int")
    precision = F.least(F.coalesce(first, F.lit(10)), F.lit(38))
    scale = F.least(F.coalesce(second, F.lit(0)), precision)
    integral = F.when(low.contains("unsigned"), _lookup(_MYSQL_UNSIGNED, base)).otherwise(
        _lookup(_MYSQL_SIGNED, base)
    )
    return (
        F.when(base.isin(*_DECIMAL_NAMES), F.format_string("decimal(%d,%d)", precision, scale))
        # FLOAT(p) with p > 24 is a double in MySQL; FLOAT(M,D) stays single precision.
        .when((base == "float") & (first > 24) & second.isNull(), F.lit("double"))
        .when(base == "float", F.lit("float"))
        .when((base == "bit") & (F.coalesce(first, F.lit(1)) == 1), F.lit("boolean"))
        .when(base == "bit", F.lit("bigint"))
        .otherwise(F.coalesce(integral, _lookup(_MYSQL_PLAIN, base)))
    )


def jdbc_spark_type(code: Column) -> Column:
    """A java.sql.Types code (Canal's ``sqlType``) -> Spark type; other codes are text."""
    return F.when(code.isNotNull(), F.coalesce(_lookup(_JDBC, F.trim(code)), F.lit("string")))


def declared_types(mysql_types: Column, sql_types: Column) -> Column:
    """``map<column, spark type>`` for every column the message declares (null when none)."""
    empty = F.create_map().cast(_EMPTY_TEXT_MAP)
    from_mysql = F.transform_values(
        F.coalesce(mysql_types, empty),
        lambda k, t: F.coalesce(
            mysql_spark_type(t), jdbc_spark_type(F.try_element_at(sql_types, k)), F.lit("string")
        ),
    )
    only_jdbc = F.transform_values(
        F.map_filter(F.coalesce(sql_types, empty), lambda k, c: ~F.map_contains_key(from_mysql, k)),
        lambda k, c: jdbc_spark_type(c),
    )
    return F.when(mysql_types.isNotNull() | sql_types.isNotNull(), F.map_concat(from_mysql, only_jdbc))


def _latin1_bytes(text: Column) -> Column:
    """Canal writes binary columns as ISO-8859-1 text (one char per byte); other text is taken as UTF-8."""
    latin1 = text.rlike(r"\A[\x{00}-\x{FF}]*\z")
    return F.when(latin1, F.encode(text, "ISO-8859-1")).otherwise(F.try_to_binary(text, F.lit("utf-8")))


def _untyped(json_value: Column, text: Column) -> Column:
    """A value no type declares keeps its JSON type: a number stays a number, a boolean a boolean.

    Spark's JSON parser holds a number with a fraction as an exact decimal without trailing zeros
    (``1.0`` as ``1``); as a double it keeps the JSON meaning (and renders as ``1.0``, not ``1``).
    Strings keep their exact text; objects and arrays are kept as their JSON text, as before.
    """
    kind = F.schema_of_variant(json_value)
    integral = kind.isin("BIGINT", "INT", "SMALLINT", "TINYINT") | (kind == "BOOLEAN")
    fractional = kind.startswith("DECIMAL") | kind.isin("DOUBLE", "FLOAT")
    return (
        F.when(text.isNull(), F.lit(None).cast("variant"))
        .when(integral, json_value)
        .when(fractional, F.try_variant_get(json_value, "$", "double").cast("variant"))
        .otherwise(text.cast("variant"))
    )


def typed_image(image: Column, types: Column, json_image: Column | None = None) -> Column:
    """``map<string,string>`` row -> ``map<string,variant>`` of typed values.

    ``json_image`` (the same row as parsed JSON values) gives the values of columns whose type is
    not declared: Canal writes every value as a string, but some producers (Flink CDC's Kafka sink)
    write typed JSON values and no ``mysqlType``.
    """

    def value(k: Column, v: Column) -> Column:
        t = F.try_element_at(types, k)
        declared = F.when(t == "binary", _latin1_bytes(v).cast("variant")).otherwise(text_to_variant(v, t))
        if json_image is None:
            return declared
        return F.when(t.isNull(), _untyped(F.try_element_at(json_image, k), v)).otherwise(declared)

    return F.transform_values(image, value)


def _overlay(base: Column, top: Column) -> Column:
    """``base`` with the entries of ``top`` replacing or adding to it (``map_concat`` refuses duplicates)."""
    return F.map_concat(F.map_filter(base, lambda k, v: ~F.map_contains_key(top, k)), top)


def _row_texts(rows: Column, null_rows_as_empty: bool) -> Column:
    """``array<map<string,variant>>`` rows -> ``array<map<string,string>>`` of their values as text.

    A JSON null entry stays a null row (not an object), or becomes an empty row when
    ``null_rows_as_empty``: ``old`` has no values for that row.
    """

    def row(m: Column) -> Column:
        texts = F.transform_values(m, lambda k, v: F.try_variant_get(v, "$", "string"))
        if null_rows_as_empty:
            return F.when(m.isNull(), F.create_map().cast(_EMPTY_TEXT_MAP)).otherwise(texts)
        return texts

    return F.transform(rows, row)


def _not_rows(texts: Column) -> Column:
    """Some entry of a row array is not an object (a JSON null row)."""
    return F.coalesce(F.exists(texts, lambda m: m.isNull()), F.lit(False))


class CanalJsonDecoder(Decoder):
    name = "canal-json"
    description = (
        "Canal JSON (open-source Canal and Alibaba DTS): several rows per message in data/old, key from pkNames, "
        "types from mysqlType/sqlType, also the pre-2022-03-20 DTS layout"
    )
    needs = ""

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        parsed = parse_json_records(spark, files, RECORD_SCHEMA)
        records = plan_barrier(self._records(parsed))
        typed = plan_barrier(self._typed(records))
        return self._events(self._classified(typed))

    @staticmethod
    def _records(parsed: DataFrame) -> DataFrame:
        """Per message: op, where its rows are, its declared type names, its position."""
        j = F.col("j")
        kind_type = F.upper(F.trim(j["type"]))
        is_ddl = F.coalesce(F.lower(F.trim(j["isDdl"])) == "true", F.lit(False))
        op = F.when(~is_ddl, _lookup(_ROW_OPS, kind_type))
        # Before 2022-03-20 DTS put a DELETE's rows in `old` and left `data` null.
        old_layout = (op == OP_DELETE) & j["data"].isNull() & j["old"].isNotNull()
        is_ddl_event = is_ddl | kind_type.isin(*_DDL_TYPES)
        return parsed.select(
            "file",
            "file_pos",
            "line",
            "text",
            "tombstone",
            "bad",
            kind_type.alias("kind_type"),
            is_ddl_event.alias("is_ddl"),
            op.alias("op"),
            F.when(j["table"].isNotNull(), F.concat_ws(".", j["database"], j["table"])).alias("table"),
            F.when(F.size(j["pkNames"]) > 0, j["pkNames"]).alias("key_cols"),
            j["es"].alias("es_text"),
            j["es"].try_cast("bigint").alias("es"),
            j["id"].try_cast("bigint").alias("message_id"),
            F.when(old_layout, j["old"]).otherwise(j["data"]).alias("rows_source"),
            F.when((op == OP_UPDATE) & ~old_layout, j["old"]).alias("old_source"),
            # A DDL's own "declared types" are the columns it adds.
            F.when(is_ddl_event, added_columns(j["sql"])).otherwise(j["mysqlType"]).alias("mysql_types"),
            F.when(~is_ddl_event, j["sqlType"]).alias("sql_types"),
            F.when(is_ddl_event, dropped_columns(j["sql"])).alias("dropped"),
        )

    @staticmethod
    def _typed(records: DataFrame) -> DataFrame:
        """Row texts and their typed images, each conversion written once in the plan."""
        staged = records.select(
            "*",
            declared_types(F.col("mysql_types"), F.col("sql_types")).alias("types"),
            _row_texts(F.col("rows_source"), False).alias("row_texts"),
            _row_texts(F.col("old_source"), True).alias("old_texts"),
        )
        types = F.col("types")

        def typed_rows(texts: str, source: str) -> Column:
            # zip_with pads the shorter array with nulls: an `old` entry that is JSON null has no values.
            return F.zip_with(texts, F.col(source), lambda m, j: typed_image(m, types, j))

        staged = staged.select(
            "*",
            typed_rows("row_texts", "rows_source").alias("row_typed"),
            typed_rows("old_texts", "old_source").alias("old_typed"),
        )
        failed = lambda texts, typed: F.exists(  # noqa: E731
            F.zip_with(texts, typed, lambda a, b: F.coalesce(failed_conversions(a, b), F.lit(False))),
            lambda x: x,
        )
        return staged.select(
            "*",
            (
                F.coalesce(failed("row_texts", "row_typed"), F.lit(False))
                | F.coalesce(failed("old_texts", "old_typed"), F.lit(False))
            ).alias("conversion_failed"),
        )

    @staticmethod
    def _classified(typed: DataFrame) -> DataFrame:
        kind_type, op, table = F.col("kind_type"), F.col("op"), F.col("table")
        truncate = kind_type == _TRUNCATE
        kind, reason = classify(
            (F.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
            (
                images_not_objects(F.col("bad"), F.col("text"), "$.data", "$.old", arrays=True),
                KIND_QUARANTINED,
                Q_IMAGE_NOT_OBJECT,
            ),
            (F.col("bad").isNotNull(), KIND_QUARANTINED, "<bad>"),
            (truncate & table.isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
            (truncate, KIND_CHANGE, ""),
            (F.col("is_ddl"), KIND_IGNORED, IGNORED_DDL),
            (kind_type.isin(*_HEARTBEAT_TYPES), KIND_IGNORED, IGNORED_HEARTBEAT),
            (kind_type.isin(*_TRANSACTION_TYPES), KIND_IGNORED, IGNORED_TRANSACTION),
            (kind_type.isNull() | (kind_type == ""), KIND_QUARANTINED, Q_MISSING_OP),
            (op.isNull(), KIND_QUARANTINED, Q_UNKNOWN_OP),
            (table.isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
            (F.col("es_text").isNotNull() & F.col("es").isNull(), KIND_QUARANTINED, Q_TYPE_MISMATCH),
            (
                _not_rows(F.col("row_texts")) | _not_rows(F.col("old_texts")),
                KIND_QUARANTINED,
                Q_IMAGE_NOT_OBJECT,
            ),
            (
                (op == OP_DELETE) & (F.coalesce(F.size("row_texts"), F.lit(0)) < 1),
                KIND_QUARANTINED,
                Q_KEY_UNKNOWN,
            ),
            (F.coalesce(F.size("row_texts"), F.lit(0)) < 1, KIND_QUARANTINED, Q_MISSING_IMAGE),
            (F.col("conversion_failed"), KIND_QUARANTINED, Q_TYPE_MISMATCH),
        )
        reason = F.when(reason == "<bad>", F.col("bad")).when(reason == "", F.lit(None)).otherwise(reason)
        op = F.when(kind == KIND_CHANGE, F.when(truncate, F.lit(OP_TRUNCATE)).otherwise(op))
        return typed.select("*", kind.alias("kind"), reason.alias("reason"), op.alias("event_op")).drop("op")

    @staticmethod
    def _events(classified: DataFrame) -> DataFrame:
        """One event per row of a decoded row change (``sub_pos`` = row index), one for anything else."""
        op = F.col("event_op")
        old_typed = F.col("old_typed")
        empty = F.create_map().cast(IMAGE_TYPE)

        def images(row: Column, i: Column) -> Column:
            old = F.coalesce(F.try_element_at(old_typed, i + 1), empty)
            before = F.when(op == OP_DELETE, row).when(op == OP_UPDATE, _overlay(row, old))
            return F.struct(before.alias("before"), F.when(op != OP_DELETE, row).alias("after"))

        row_change = (F.col("kind") == KIND_CHANGE) & (op != OP_TRUNCATE)
        no_row = F.array(
            F.struct(
                F.lit(None).cast(IMAGE_TYPE).alias("before"), F.lit(None).cast(IMAGE_TYPE).alias("after")
            )
        )
        per_row = F.when(row_change, F.transform("row_typed", images)).otherwise(no_row)
        exploded = classified.select("*", F.posexplode(per_row).alias("sub_pos", "image"))
        ddl = (F.col("kind") == KIND_IGNORED) & (F.col("reason") == IGNORED_DDL)
        return exploded.select(
            *canonical(
                table=F.col("table"),
                kind=F.col("kind"),
                op=op,
                reason=F.col("reason"),
                event_ms=F.col("es"),
                log_pos=F.when(
                    F.col("es").isNotNull(), F.array_compact(F.array(F.col("es"), F.col("message_id")))
                ),
                sub_pos=F.col("sub_pos"),
                before=F.when(ddl, F.col("dropped")).otherwise(F.col("image.before")),
                after=F.col("image.after"),
                partial=F.lit(False),
                key_cols=F.col("key_cols"),
                types=F.when(ddl | (F.col("kind") == KIND_CHANGE), F.col("types")),
                file=F.col("file"),
                file_pos=F.col("file_pos"),
                line=F.col("line"),
                raw=F.col("text"),
            )
        )

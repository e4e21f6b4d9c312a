"""Canal JSON (flat messages) as Alibaba DTS and open-source Canal write them.

One message carries several rows of one table: ``data[i]`` is row i after the change and
``old[i]`` holds the previous values of only the columns that changed. Canal writes every value as
a JSON string; ``mysqlType`` (else ``sqlType``, java.sql.Types codes) says what it really is, so the
values are typed here. A column no type declares keeps its JSON type (Flink CDC's Kafka sink writes
typed JSON values and no ``mysqlType``): ``1.0`` stays the double 1.0, never the text ``"1"``. DTS instances created before 2022-03-20 put a DELETE's rows in ``old`` and
leave ``data`` null; that layout is recognised per record. DDL messages are counted, never applied;
an ``ALTER TABLE`` that adds or drops columns says so on its ignored event (see ``formats.ddl``).

The rows are parsed as text (``map<string,string>``), the way Canal writes them, and each value is
converted once by its declared type. The plan is built in stages (parse, declare types, convert,
type the rows, classify, explode), each a select that the next reads by column name, so that the
per-value conversion appears once in the plan instead of being copied into every later use. Only
records with a column no type declares are parsed a second time, for the JSON types of its values.

Spark runs higher-order functions interpreted, and every element one reads asks Spark for the
session's configuration (a new object each time inside a task). The type declarations a sample of
the landing shows (``_signatures``: the first records of every file and split) are therefore
resolved once, while planning; a one-row message whose declaration is one of them, and whose row
holds exactly the declared columns, is typed by plain expressions (``_Specialised``). Everything
else takes the general path, with the same result.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
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
from airflow_cdc_provider.formats.common.ddl import added_columns, dropped_columns
from airflow_cdc_provider.formats.common.jsonlines import images_not_objects, parse_json_records
from airflow_cdc_provider.formats.common.values import aligned_values, failed_conversions, text_to_variant
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
    empty_image,
    qualified_table,
)
from airflow_cdc_provider.formats.mysql.declared_types import EMPTY_TEXT_MAP, declared_types, empty_text_map
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile, first_records
from airflow_cdc_provider.spark.sqlexpr import Expr

TEXT_ROW = MapType(StringType(), StringType())
JSON_ROW = MapType(StringType(), VariantType())
RECORD_SCHEMA = StructType(
    [
        # Rows as maps keep their columns in the order the message writes them (a variant object
        # would sort them by name); a row that is not an object fails the parse and is diagnosed
        # from the record's text (jsonlines.images_not_objects). Spark's JSON reader gives a value
        # that is not a string as its JSON text.
        StructField("data", ArrayType(TEXT_ROW)),
        StructField("old", ArrayType(TEXT_ROW)),
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

# The same rows with JSON values, for the records that have columns no type declares.
JSON_ROWS_SCHEMA = StructType(
    [StructField("data", ArrayType(JSON_ROW)), StructField("old", ArrayType(JSON_ROW))]
)


def _ddl_flagged(message: Expr) -> Expr:
    """``isDdl`` set: the message's type then names no row operation."""
    return E.coalesce(E.lower(E.trim(message["isDdl"])) == "true", E.lit(False))


def _ddl_message(message: Expr) -> Expr:
    """A DDL message: flagged ``isDdl``, or of a DDL type (its rows are never applied)."""
    return _ddl_flagged(message) | E.upper(E.trim(message["type"])).isin(*_DDL_TYPES)


def _strings(values: tuple[str, ...]) -> Expr:
    return E.array(*[E.lit(v) for v in values]).cast("array<string>")


def _string_map(keys: tuple[str, ...], values: tuple[str, ...]) -> Expr:
    """A ``map<string,string>`` literal, entries in the order given."""
    return E.map_from_arrays(_strings(keys), _strings(values))


def _latin1_bytes(text: Expr) -> Expr:
    """Canal writes binary columns as ISO-8859-1 text (one char per byte); other text is taken as UTF-8."""
    latin1 = text.rlike(r"\A[\x{00}-\x{FF}]*\z")
    return E.when(latin1, E.encode(text, E.lit("ISO-8859-1"))).otherwise(E.try_to_binary(text, "utf-8"))


def _untyped(json_value: Expr, text: Expr) -> Expr:
    """A value no type declares keeps its JSON type: a number stays a number, a boolean a boolean.

    Spark's JSON parser holds a number with a fraction as an exact decimal without trailing zeros
    (``1.0`` as ``1``); as a double it keeps the JSON meaning (and renders as ``1.0``, not ``1``).
    Strings keep their exact text; objects and arrays are kept as their JSON text, as before.
    """
    kind = E.schema_of_variant(json_value)
    integral = kind.isin("BIGINT", "INT", "SMALLINT", "TINYINT") | (kind == "BOOLEAN")
    fractional = kind.startswith("DECIMAL") | kind.isin("DOUBLE", "FLOAT")
    return (
        E.when(text.isNull(), E.null("variant"))
        .when(integral, json_value)
        .when(fractional, E.try_variant_get(json_value, "$", "double").cast("variant"))
        .otherwise(text.cast("variant"))
    )


def _declared_value(text: Expr, spark_type: Expr) -> Expr:
    return E.when(spark_type == "binary", _latin1_bytes(text).cast("variant")).otherwise(
        text_to_variant(text, spark_type)
    )


def typed_row(row: Expr, types: Expr, aligned: Expr, json_row: Expr) -> Expr:
    """A text row -> ``map<string,variant>`` of typed values, in the row's column order.

    ``aligned`` holds the row's converted values when ``types`` declares exactly its columns
    (``values.aligned_values``). Otherwise the row's types are looked up once per column, and a
    column no type declares takes its JSON type from ``json_row`` (the same row as parsed JSON
    values): some producers (Flink CDC's Kafka sink) write typed JSON values and no ``mysqlType``.
    A row that names a column twice keeps both entries, as parsed.
    """
    keys = E.map_keys(row)
    row_types = E.transform(keys, lambda k: E.try_element_at(types, k))

    def value(k: Expr, v: Expr, t: Expr) -> Expr:
        return E.when(t.isNull(), _untyped(E.try_element_at(json_row, k), v)).otherwise(_declared_value(v, t))

    looked_up = E.zip_with(E.map_entries(row), row_types, lambda e, t: value(e["key"], e["value"], t))
    return (
        E.when(aligned.isNotNull(), E.map_from_arrays(keys, aligned))
        .when(E.size(E.array_distinct(keys)) == E.size(keys), E.map_from_arrays(keys, looked_up))
        # map_from_arrays refuses a key twice; such a row keeps both entries, typed in place.
        .otherwise(E.transform_values(row, lambda k, v: value(k, v, E.try_element_at(types, k))))
    )


def _not_rows(rows: Expr) -> Expr:
    """Some entry of a row array is not an object (a JSON null row)."""
    return E.coalesce(E.exists(rows, lambda m: m.isNull()), E.lit(False))


def _undeclared(rows: Expr, types: Expr) -> Expr:
    """Some row holds a column ``types`` does not declare (true when nothing is declared)."""

    def declared(m: Expr) -> Expr:
        return m.isNull() | (E.size(E.array_except(E.map_keys(m), E.map_keys(types))) == 0)

    return types.isNull() | ~E.coalesce(E.forall(rows, declared), E.lit(True))


# The sample a run plans its specialised typing on: the first records of every file and split.
_SAMPLED_RECORDS = 200
# Declared columns (summed over signatures) whose typing is specialised: bounds the plan's size.
_SPECIALISED_COLUMNS = 512
_SAMPLE_SCHEMA = StructType(
    [
        StructField("isDdl", StringType()),
        StructField("type", StringType()),
        StructField("mysqlType", MapType(StringType(), StringType())),
        StructField("sqlType", MapType(StringType(), StringType())),
    ]
)


@dataclass(frozen=True)
class _Signature:
    """A row change's type declaration (``mysqlType`` and ``sqlType``, each None when absent) and
    the Spark types ``declared_types`` gives it, in the order of its columns."""

    mysql: tuple[tuple[str, str], ...] | None
    sql: tuple[tuple[str, str], ...] | None
    names: tuple[str, ...]
    types: tuple[str, ...]

    def declares(self, mysql_types: Expr, sql_types: Expr) -> Expr:
        """The record declares exactly this (both maps, their entries in the same order)."""
        return _same_map(mysql_types, self.mysql) & _same_map(sql_types, self.sql)

    def type_map(self) -> Expr:
        return _string_map(self.names, self.types)


def _same_map(m: Expr, entries: tuple[tuple[str, str], ...] | None) -> Expr:
    if entries is None:
        return m.isNull()
    keys, values = zip(*entries) if entries else ((), ())
    return (E.map_keys(m) == _strings(keys)) & (E.map_values(m) == _strings(values))


def _signatures(spark: SparkSession, files: list[LandedFile]) -> list[_Signature]:
    """The row changes' type declarations in a sample of ``files``, most frequent first, within
    ``_SPECIALISED_COLUMNS``: one read of the text, the sampled records parsed for two fields."""
    j = E.col("j")
    declared = first_records(spark, files, _SAMPLED_RECORDS).select(
        E.from_json("text", _SAMPLE_SCHEMA).alias("j").column()
    )
    declared = declared.where((j.isNotNull() & ~_ddl_message(j)).column()).select(
        *E.columns(j["mysqlType"].alias("m"), j["sqlType"].alias("s"))
    )
    grouped = declared.groupBy(*E.columns(E.to_json("m").alias("_m"), E.to_json("s").alias("_s"))).agg(
        *E.columns(
            E.any_value("m").alias("m"),
            E.any_value("s").alias("s"),
            E.count(E.lit(1)).alias("n"),
        )
    )
    # Maps come to the driver as entry arrays: PySpark's dicts would not keep their order.
    types = declared_types(E.col("m"), E.col("s"))
    rows = grouped.select(
        "n",
        "_m",
        "_s",
        *E.columns(
            *[
                E.when(E.col(m).isNotNull(), E.arrays_zip(E.map_keys(m), E.map_values(m))).alias(m)
                for m in ("m", "s")
            ],
            E.map_keys(types).alias("names"),
            E.map_values(types).alias("types"),
        ),
    ).collect()
    chosen, budget = [], _SPECIALISED_COLUMNS
    # Sorted here, not by Spark: a handful of rows, and no extra jobs.
    for row in sorted(rows, key=lambda r: (-r["n"], r["_m"] or "", r["_s"] or "")):
        names = row["names"] or []
        if 0 < len(names) <= budget:
            chosen.append(
                _Signature(
                    mysql=None if row["m"] is None else tuple(tuple(e) for e in row["m"]),
                    sql=None if row["s"] is None else tuple(tuple(e) for e in row["s"]),
                    names=tuple(names),
                    types=tuple(row["types"]),
                )
            )
            budget -= len(names)
    return chosen


class _Specialised:
    """The typing of one-row messages whose declaration is a sampled ``_Signature``, in plain
    expressions over positions ``0 .. width-1``: no lambda, no lookup per value. It gives what
    ``typed_row`` gives such a row, and the same conversion failures."""

    def __init__(self, signatures: list[_Signature]) -> None:
        self.signatures = signatures
        self.width = max((len(s.names) for s in signatures), default=1)

    def index(self, mysql_types: Expr, sql_types: Expr, rows: Expr, old: Expr) -> Expr:
        """The signature the record declares, when its rows take this path; else null."""
        row, old_row = E.get(rows, 0), E.get(old, 0)
        chosen = E.null("int")
        for i, s in reversed(list(enumerate(self.signatures))):
            names = _strings(s.names)
            old_fits = old.isNull() | (
                (E.size(old) == 1)
                & old_row.isNotNull()
                & (E.size(E.array_except(E.map_keys(old_row), names)) == 0)
            )
            fits = (E.size(rows) == 1) & row.isNotNull() & (E.map_keys(row) == names) & old_fits
            chosen = E.when(s.declares(mysql_types, sql_types) & fits, E.lit(i)).otherwise(chosen)
        return chosen

    def types(self, index: Expr) -> Expr:
        """The signature's types, as ``declared_types`` gives them."""
        chosen = E.null(EMPTY_TEXT_MAP)
        for i, s in reversed(list(enumerate(self.signatures))):
            chosen = E.when(index == i, s.type_map()).otherwise(chosen)
        return chosen

    def row_values(self, index: Expr, row: Expr) -> Expr:
        """The values of a row that holds exactly the signature's columns, converted position by
        position by the literal type there: Spark folds each conversion to one cast."""
        texts = E.map_values(row)
        values = []
        for p in range(self.width):
            value = E.null("variant")
            for i, s in reversed(list(enumerate(self.signatures))):
                if p < len(s.types):
                    value = E.when(index == i, _declared_value(E.get(texts, p), E.lit(s.types[p]))).otherwise(
                        value
                    )
            values.append(value)
        return E.array(*values)

    def values(self, row: Expr, types: Expr) -> Expr:
        """The row's values converted by ``types``, position by position (null past its end)."""
        texts = E.map_values(row)
        return E.array(*[_declared_value(E.get(texts, p), E.get(types, p)) for p in range(self.width)])

    def key_types(self, row: Expr, types: Expr) -> Expr:
        """The declared type of each of the row's columns, position by position."""
        keys = E.map_keys(row)
        return E.array(*[E.try_element_at(types, E.get(keys, p)) for p in range(self.width)])

    @staticmethod
    def image(row: Expr, values: Expr) -> Expr:
        return E.map_from_arrays(E.map_keys(row), E.slice(values, 1, E.size(row)))

    def failed(self, row: Expr, values: Expr) -> Expr:
        """Some value of the row has text that did not convert."""
        texts = E.map_values(row)
        checks = [E.get(texts, p).isNotNull() & E.get(values, p).isNull() for p in range(self.width)]
        return E.coalesce(functools.reduce(operator.or_, checks), E.lit(False)) if checks else E.lit(False)


class CanalJsonDecoder(Decoder):
    name = "canal-json"
    description = (
        "Canal JSON (open-source Canal and Alibaba DTS): several rows per message in data/old, key from pkNames, "
        "types from mysqlType/sqlType, also the pre-2022-03-20 DTS layout"
    )
    needs = ""

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        parsed = parse_json_records(spark, files, RECORD_SCHEMA)
        specialised = _Specialised(_signatures(spark, files))
        return self._events(self._classified(self._typed(self._records(parsed), specialised)))

    @staticmethod
    def _records(parsed: DataFrame) -> DataFrame:
        """Per message: op, where its rows are, its declared type names, its position."""
        j = E.col("j")
        kind_type = E.upper(E.trim(j["type"]))
        op = E.when(~_ddl_flagged(j), E.lookup(_ROW_OPS, kind_type))
        # Before 2022-03-20 DTS put a DELETE's rows in `old` and left `data` null.
        old_layout = (op == OP_DELETE) & j["data"].isNull() & j["old"].isNotNull()
        is_ddl_event = _ddl_message(j)
        return parsed.select(
            "file",
            "file_pos",
            "line",
            "text",
            "tombstone",
            "bad",
            *E.columns(
                kind_type.alias("kind_type"),
                is_ddl_event.alias("is_ddl"),
                op.alias("op"),
                E.when(j["table"].isNotNull(), qualified_table(j["database"], j["table"])).alias("table"),
                E.when(E.size(j["pkNames"]) > 0, j["pkNames"]).alias("key_cols"),
                j["es"].alias("es_text"),
                j["es"].try_cast("bigint").alias("es"),
                j["id"].try_cast("bigint").alias("message_id"),
                E.coalesce(old_layout, E.lit(False)).alias("old_layout"),
                E.when(old_layout, j["old"]).otherwise(j["data"]).alias("rows_source"),
                E.when((op == OP_UPDATE) & ~old_layout, j["old"]).alias("old_source"),
                # A DDL's own "declared types" are the columns it adds.
                E.when(is_ddl_event, added_columns(j["sql"])).otherwise(j["mysqlType"]).alias("mysql_types"),
                E.when(~is_ddl_event, j["sqlType"]).alias("sql_types"),
                E.when(is_ddl_event, dropped_columns(j["sql"])).alias("dropped"),
            ),
        )

    @staticmethod
    def _typed(records: DataFrame, specialised: _Specialised) -> DataFrame:
        """Typed rows and whether a value failed its conversion, each conversion written once in the plan.

        Records that ``specialised`` takes (``_sig`` set) skip every step of the general path.
        """
        types, sig = E.col("types"), E.col("_sig")
        general = sig.isNull()
        row, old = E.col("_row"), E.col("_old")
        staged = records.select(
            "*",
            E.when(
                ~E.col("is_ddl"),
                specialised.index(
                    E.col("mysql_types"), E.col("sql_types"), E.col("rows_source"), E.col("old_source")
                ),
            )
            .alias("_sig")
            .column(),
        )
        staged = staged.select(
            "*",
            *E.columns(
                E.when(general, declared_types(E.col("mysql_types"), E.col("sql_types")))
                .otherwise(specialised.types(sig))
                .alias("types"),
                E.when(~general, E.get(E.col("rows_source"), 0)).alias("_row"),
                E.when(~general, E.get(E.col("old_source"), 0)).alias("_old"),
            ),
        )
        # An `old` entry that is JSON null has no values.
        old_rows = E.transform("old_source", lambda m: E.coalesce(m, empty_text_map()))
        staged = staged.select(
            *[c for c in staged.columns if c != "old_source"],
            *E.columns(
                E.when(general, old_rows).otherwise(E.col("old_source")).alias("old_source"),
                E.when(
                    general, E.transform("rows_source", lambda m: aligned_values(m, types, _declared_value))
                ).alias("row_values"),
                E.when(~general, specialised.row_values(sig, row)).alias("_row_values"),
                E.when(old.isNotNull(), specialised.key_types(old, types)).alias("_old_types"),
            ),
        )
        needs_json = general & (
            E.exists("row_values", lambda v: v.isNull()) | _undeclared(E.col("old_source"), types)
        )
        json = E.col("json")
        staged = staged.select(
            "*",
            *E.columns(
                E.when(E.coalesce(needs_json, E.lit(False)), E.from_json("text", JSON_ROWS_SCHEMA)).alias(
                    "json"
                ),
                E.when(old.isNotNull(), specialised.values(old, E.col("_old_types"))).alias("_old_values"),
            ),
        )
        json_rows = E.when(E.col("old_layout"), json["old"]).otherwise(json["data"])

        def typed_rows(rows: str, aligned: Expr | None, json_rows: Expr) -> Expr:
            no_values = E.null("array<variant>")
            return E.transform(
                rows,
                lambda m, i: typed_row(
                    m,
                    types,
                    no_values if aligned is None else E.try_element_at(aligned, i + 1),
                    E.try_element_at(json_rows, i + 1),
                ),
            )

        row_values, old_values = E.col("_row_values"), E.col("_old_values")
        staged = staged.select(
            "*",
            *E.columns(
                E.when(general, typed_rows("rows_source", E.col("row_values"), json_rows))
                .otherwise(E.array(specialised.image(row, row_values)))
                .alias("row_typed"),
                E.when(general, typed_rows("old_source", None, json["old"]))
                .otherwise(E.when(old.isNotNull(), E.array(specialised.image(old, old_values))))
                .alias("old_typed"),
            ),
        )

        def failed(rows: str, typed: str) -> Expr:
            return E.coalesce(
                E.exists(E.zip_with(rows, typed, failed_conversions), lambda x: x),
                E.lit(False),
            )

        conversion_failed = E.when(
            general, failed("rows_source", "row_typed") | failed("old_source", "old_typed")
        ).otherwise(specialised.failed(row, row_values) | specialised.failed(old, old_values))
        return staged.select("*", conversion_failed.alias("conversion_failed").column())

    @staticmethod
    def _classified(typed: DataFrame) -> DataFrame:
        kind_type, op, table = E.col("kind_type"), E.col("op"), E.col("table")
        truncate = kind_type == _TRUNCATE
        rows = E.coalesce(E.size("rows_source"), E.lit(0))
        kind, reason = classify(
            (E.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
            (
                images_not_objects(E.col("bad"), E.col("text"), "$.data", "$.old", arrays=True),
                KIND_QUARANTINED,
                Q_IMAGE_NOT_OBJECT,
            ),
            (E.col("bad").isNotNull(), KIND_QUARANTINED, E.col("bad")),
            (truncate & table.isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
            (truncate, KIND_CHANGE, None),
            (E.col("is_ddl"), KIND_IGNORED, IGNORED_DDL),
            (kind_type.isin(*_HEARTBEAT_TYPES), KIND_IGNORED, IGNORED_HEARTBEAT),
            (kind_type.isin(*_TRANSACTION_TYPES), KIND_IGNORED, IGNORED_TRANSACTION),
            (kind_type.isNull() | (kind_type == ""), KIND_QUARANTINED, Q_MISSING_OP),
            (op.isNull(), KIND_QUARANTINED, Q_UNKNOWN_OP),
            (table.isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
            (E.col("es_text").isNotNull() & E.col("es").isNull(), KIND_QUARANTINED, Q_TYPE_MISMATCH),
            # A specialised record has one row, an object (no lambda to look).
            (E.col("_sig").isNull() & _not_rows(E.col("rows_source")), KIND_QUARANTINED, Q_IMAGE_NOT_OBJECT),
            ((op == OP_DELETE) & (rows < 1), KIND_QUARANTINED, Q_KEY_UNKNOWN),
            (rows < 1, KIND_QUARANTINED, Q_MISSING_IMAGE),
            (E.col("conversion_failed"), KIND_QUARANTINED, Q_TYPE_MISMATCH),
        )
        op = E.when(kind == KIND_CHANGE, E.when(truncate, E.lit(OP_TRUNCATE)).otherwise(op))
        return typed.select(
            "*", *E.columns(kind.alias("kind"), reason.alias("reason"), op.alias("event_op"))
        ).drop("op")

    @staticmethod
    def _events(classified: DataFrame) -> DataFrame:
        """One event per row of a decoded row change (``sub_pos`` = row index), one for anything else."""
        op = E.col("event_op")
        old_typed = E.col("old_typed")

        def images(row: Expr, i: Expr) -> Expr:
            # An update's before image is its `old` row: the columns the change replaced. The engine
            # reads a before image for the key the row had, and takes absent columns from the after.
            old = E.coalesce(E.try_element_at(old_typed, i + 1), empty_image())
            before = E.when(op == OP_DELETE, row).when(op == OP_UPDATE, old)
            return E.struct(before.alias("before"), E.when(op != OP_DELETE, row).alias("after"))

        row_change = (E.col("kind") == KIND_CHANGE) & (op != OP_TRUNCATE)
        no_row = E.array(E.struct(E.null(IMAGE_TYPE).alias("before"), E.null(IMAGE_TYPE).alias("after")))
        per_row = (
            E.when(
                row_change & E.col("_sig").isNotNull(),
                E.array(images(E.get(E.col("row_typed"), 0), E.lit(0))),
            )
            .when(row_change, E.transform("row_typed", images))
            .otherwise(no_row)
        )
        exploded = classified.select("*", F.posexplode(per_row.column()).alias("sub_pos", "image"))
        ddl = (E.col("kind") == KIND_IGNORED) & (E.col("reason") == IGNORED_DDL)
        return exploded.select(
            *canonical(
                table=E.col("table"),
                kind=E.col("kind"),
                op=op,
                reason=E.col("reason"),
                event_ms=E.col("es"),
                log_pos=E.when(
                    E.col("es").isNotNull(), E.array_compact(E.array(E.col("es"), E.col("message_id")))
                ),
                sub_pos=E.col("sub_pos"),
                before=E.when(ddl, E.col("dropped")).otherwise(E.col("image.before")),
                after=E.col("image.after"),
                partial=E.lit(False),
                key_cols=E.col("key_cols"),
                types=E.when(ddl | (E.col("kind") == KIND_CHANGE), E.col("types")),
                raw=E.col("text"),
            )
        )

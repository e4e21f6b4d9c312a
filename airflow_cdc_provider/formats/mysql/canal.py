"""Canal JSON (flat messages) as Alibaba DTS and open-source Canal write them.

One message carries several rows of one table: ``data[i]`` is row i after the change and
``old[i]`` holds the previous values of only the columns that changed. Canal writes every value as
a JSON string; ``mysqlType`` (else ``sqlType``, java.sql.Types codes) says what it really is, so the
values are typed here (``canal_typing``). A column no type declares keeps its JSON type (Flink
CDC's Kafka sink writes typed JSON values and no ``mysqlType``): ``1.0`` stays the double 1.0, never
the text ``"1"``. DTS instances created before 2022-03-20 put a DELETE's rows in ``old`` and leave
``data`` null; that layout is recognised per record. DDL messages are counted, never applied; an
``ALTER TABLE`` that adds or drops columns says so on its ignored event (see ``formats.common.ddl``).

The rows are parsed as text (``map<string,string>``), the way Canal writes them, and each value is
converted once by its declared type. The plan is built in stages (parse, declare types, convert,
type the rows, classify, explode), each a select that the next reads by column name, so that the
per-value conversion appears once in the plan instead of being copied into every later use. Only
records with a column no type declares are parsed a second time, for the JSON types of its values.

Spark runs higher-order functions interpreted, and every element one reads asks Spark for the
session's configuration (a new object each time inside a task). The type declarations a sample of
the landing shows (``_signatures``: the first records of every file and split) are therefore
resolved once, while planning; a one-row message whose declaration is one of them, and whose row
holds exactly the declared columns, is typed by plain expressions (``canal_typing.Specialised``).
Everything else takes the general path, with the same result.
"""

from __future__ import annotations

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
from airflow_cdc_provider.formats.common.values import aligned_values, failed_conversions
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
from airflow_cdc_provider.formats.mysql.canal_typing import (
    Signature,
    Specialised,
    declared_value,
    typed_row,
    undeclared,
)
from airflow_cdc_provider.formats.mysql.declared_types import declared_types, empty_text_map
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


def _not_rows(rows: Expr) -> Expr:
    """Some entry of a row array is not an object (a JSON null row)."""
    return E.coalesce(E.exists(rows, lambda m: m.isNull()), E.lit(False))


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


def _signatures(spark: SparkSession, files: list[LandedFile]) -> list[Signature]:
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
                Signature(
                    mysql=None if row["m"] is None else tuple(tuple(e) for e in row["m"]),
                    sql=None if row["s"] is None else tuple(tuple(e) for e in row["s"]),
                    names=tuple(names),
                    types=tuple(row["types"]),
                )
            )
            budget -= len(names)
    return chosen


class CanalJsonDecoder(Decoder):
    name = "canal-json"
    description = (
        "Canal JSON (open-source Canal and Alibaba DTS): several rows per message in data/old, key from pkNames, "
        "types from mysqlType/sqlType, also the pre-2022-03-20 DTS layout"
    )
    needs = ""

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        parsed = parse_json_records(spark, files, RECORD_SCHEMA)
        specialised = Specialised(_signatures(spark, files))
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
    def _typed(records: DataFrame, specialised: Specialised) -> DataFrame:
        """Typed rows and whether a value failed its conversion, each conversion written once in the plan.

        Records that ``specialised`` takes (``_sig`` set) skip every step of the general path.
        """
        staged = _signature_and_types(records, specialised)
        staged = _converted_values(staged, specialised)
        staged = _json_rows_where_needed(staged, specialised)
        staged = _typed_rows(staged, specialised)
        return _with_conversion_failed(staged, specialised)

    @staticmethod
    def _classified(typed: DataFrame) -> DataFrame:
        """Each message's kind and reason, the first rule that holds deciding, and the op its
        events carry (``event_op``: a truncate, or the row op of a row change)."""
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


# The steps of `CanalJsonDecoder._typed`, in order.


def _signature_and_types(records: DataFrame, specialised: Specialised) -> DataFrame:
    """The sampled signature a row change declares (``_sig``; null: the general path), its
    declared types (``types``) and, on the specialised path, its one row and ``old`` row
    (``_row``, ``_old``)."""
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
    general = _general()
    return staged.select(
        "*",
        *E.columns(
            E.when(general, declared_types(E.col("mysql_types"), E.col("sql_types")))
            .otherwise(specialised.types(E.col("_sig")))
            .alias("types"),
            E.when(~general, E.get(E.col("rows_source"), 0)).alias("_row"),
            E.when(~general, E.get(E.col("old_source"), 0)).alias("_old"),
        ),
    )


def _converted_values(staged: DataFrame, specialised: Specialised) -> DataFrame:
    """The values converted by their declared types before the rows are put together: on the
    general path each row's values when its types declare exactly its columns (``row_values``),
    with an ``old`` entry that is JSON null made empty; on the specialised path the row's values
    (``_row_values``) and the declared types of its ``old`` row's columns (``_old_types``)."""
    types, general, old = E.col("types"), _general(), E.col("_old")
    # An `old` entry that is JSON null has no values.
    old_rows = E.transform("old_source", lambda m: E.coalesce(m, empty_text_map()))
    return staged.select(
        *[c for c in staged.columns if c != "old_source"],
        *E.columns(
            E.when(general, old_rows).otherwise(E.col("old_source")).alias("old_source"),
            E.when(
                general, E.transform("rows_source", lambda m: aligned_values(m, types, declared_value))
            ).alias("row_values"),
            E.when(~general, specialised.row_values(E.col("_sig"), E.col("_row"))).alias("_row_values"),
            E.when(old.isNotNull(), specialised.key_types(old, types)).alias("_old_types"),
        ),
    )


def _json_rows_where_needed(staged: DataFrame, specialised: Specialised) -> DataFrame:
    """The record's rows parsed again, as JSON values (``json``), only where the general path
    meets a column no type declares; and the specialised path's ``old`` values (``_old_values``)."""
    general, old = _general(), E.col("_old")
    needs_json = general & (
        E.exists("row_values", lambda v: v.isNull()) | undeclared(E.col("old_source"), E.col("types"))
    )
    return staged.select(
        "*",
        *E.columns(
            E.when(E.coalesce(needs_json, E.lit(False)), E.from_json("text", JSON_ROWS_SCHEMA)).alias("json"),
            E.when(old.isNotNull(), specialised.values(old, E.col("_old_types"))).alias("_old_values"),
        ),
    )


def _typed_rows(staged: DataFrame, specialised: Specialised) -> DataFrame:
    """The rows and ``old`` rows as typed images (``row_typed``, ``old_typed``), by whichever path
    the record takes."""
    types, general, json = E.col("types"), _general(), E.col("json")
    row, old = E.col("_row"), E.col("_old")
    json_rows = E.when(E.col("old_layout"), json["old"]).otherwise(json["data"])
    return staged.select(
        "*",
        *E.columns(
            E.when(general, _typed_each("rows_source", types, E.col("row_values"), json_rows))
            .otherwise(E.array(specialised.image(row, E.col("_row_values"))))
            .alias("row_typed"),
            E.when(general, _typed_each("old_source", types, None, json["old"]))
            .otherwise(E.when(old.isNotNull(), E.array(specialised.image(old, E.col("_old_values")))))
            .alias("old_typed"),
        ),
    )


def _with_conversion_failed(staged: DataFrame, specialised: Specialised) -> DataFrame:
    """Whether some value of a row or ``old`` row has text its declared type does not read
    (``conversion_failed``): the record is then quarantined."""

    def failed(rows: str, typed: str) -> Expr:
        return E.coalesce(
            E.exists(E.zip_with(rows, typed, failed_conversions), lambda x: x),
            E.lit(False),
        )

    row, old = E.col("_row"), E.col("_old")
    row_values, old_values = E.col("_row_values"), E.col("_old_values")
    conversion_failed = E.when(
        _general(), failed("rows_source", "row_typed") | failed("old_source", "old_typed")
    ).otherwise(specialised.failed(row, row_values) | specialised.failed(old, old_values))
    return staged.select("*", conversion_failed.alias("conversion_failed").column())


def _general() -> Expr:
    """A record of the general path: no sampled signature takes it (``_sig`` null)."""
    return E.col("_sig").isNull()


def _typed_each(rows: str, types: Expr, aligned: Expr | None, json_rows: Expr) -> Expr:
    """Each row of the array column ``rows`` typed by ``typed_row``, with its ``aligned`` values
    (None: none) and its JSON-valued twin in ``json_rows``, both by the row's index."""
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

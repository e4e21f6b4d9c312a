"""Debezium JSON: open-source Debezium, Lindorm (SQL and HBase tables) and Huawei CDL 2.0.

One decoder covers every flavour because they share the envelope (``op``, ``before``, ``after``,
``source``, ``ts_ms``), with or without the Kafka Connect ``schema`` block, wrapped in ``payload``
or bare. What differs is where the table name, the log position and the key come from, and each
is a ``coalesce`` over the places a flavour puts it.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.events import (
    IGNORED_DDL,
    IGNORED_HEARTBEAT,
    IGNORED_TOMBSTONE,
    IGNORED_TRANSACTION,
    IMAGE_TYPE,
    KIND_IGNORED,
    KIND_QUARANTINED,
    OP_DELETE,
    OP_INSERT,
    OP_READ,
    OP_TRUNCATE,
    OP_UPDATE,
    Q_BAD_BASE64,
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
from airflow_cdc_provider.formats.kafka_connect import (
    ENVELOPE_SCHEMA,
    column_types,
    convert_image,
    image_conversion_failed,
)
from airflow_cdc_provider.formats.landed_files import LandedFile

_SOURCE = StructType(
    [
        StructField(name, dtype)
        for name, dtype in [
            ("version", StringType()),
            ("connector", StringType()),
            ("ts_ms", LongType()),
            ("snapshot", StringType()),
            ("db", StringType()),
            ("schema", StringType()),
            ("table", StringType()),
            ("namespace", StringType()),
            ("file", StringType()),
            ("pos", LongType()),
            ("row", IntegerType()),
            # Text, not bigint: PostgreSQL LSNs are unsigned 64-bit, and a value outside the bigint
            # range must not make the whole record a type mismatch (see _lsn_position).
            ("lsn", StringType()),
            ("scn", StringType()),
            ("commit_scn", StringType()),
            ("change_lsn", StringType()),
            ("event_serial_no", LongType()),
            ("txId", StringType()),
        ]
    ]
)
_ENVELOPE_FIELDS = [
    StructField("op", StringType()),
    StructField("ts_ms", LongType()),
    StructField("before", IMAGE_TYPE),
    StructField("after", IMAGE_TYPE),
    StructField("source", _SOURCE),
    StructField("transaction", StructType([StructField("id", StringType())])),
    StructField("unique", IMAGE_TYPE),
    StructField("message_version", StringType()),
    StructField("HEARTBEAT_IDENTIFIER", StringType()),
    # Transaction metadata and schema-change topics share landings with row changes.
    StructField("status", StringType()),
    StructField("ddl", StringType()),
]
RECORD_SCHEMA = StructType(
    _ENVELOPE_FIELDS
    + [
        StructField("schema", ENVELOPE_SCHEMA),
        StructField("payload", StructType(_ENVELOPE_FIELDS)),
    ]
)

_OPS = {"c": OP_INSERT, "r": OP_READ, "u": OP_UPDATE, "d": OP_DELETE, "t": OP_TRUNCATE}
_SNAPSHOT_TRUE = (
    "true",
    "last",
    "first",
    "first_in_data_collection",
    "last_in_data_collection",
    "incremental",
)


def _envelope() -> Column:
    names = [f.name for f in _ENVELOPE_FIELDS]
    return F.when(F.col("j.payload").isNotNull(), F.col("j.payload")).otherwise(
        F.struct(*[F.col(f"j.{n}").alias(n) for n in names])
    )


def _qualified_table(src: Column) -> Column:
    # Lindorm names namespace.table; MySQL db.table; PostgreSQL, Oracle, SQL Server db.schema.table.
    return F.when(src["namespace"].isNotNull(), F.concat_ws(".", src["namespace"], src["table"])).otherwise(
        F.when(src["table"].isNotNull(), F.concat_ws(".", src["db"], src["schema"], src["table"]))
    )


_TWO_POW_63 = 2**63
_TWO_POW_64 = 2**64


def _lsn_position(lsn_text: Column) -> Column:
    """A PostgreSQL LSN (unsigned 64-bit, as JSON number or text) -> a position that orders as the source means.

    An LSN below 2^63 is ``[lsn]``, as before; one at or above 2^63 is ``[2^63 - 1, lsn - 2^63]``,
    which sorts after every smaller LSN (a longer array with an equal prefix sorts later). A value
    that is no unsigned 64-bit integer (e.g. ``-9223372036854776000``, Long.MIN_VALUE printed
    through a double) gives null: the record is then ordered by event time and file position,
    never quarantined.
    """
    exact = lsn_text.try_cast("decimal(38,6)")
    readable = (
        exact.isNotNull()
        & (exact >= F.lit(0))
        & (exact < F.lit(str(_TWO_POW_64)).cast("decimal(20,0)"))
        & (exact == F.floor(exact))
    )
    unsigned = exact.cast("decimal(20,0)")
    high = F.lit(str(_TWO_POW_63)).cast("decimal(20,0)")
    return (
        F.when(~readable, F.lit(None).cast("array<bigint>"))
        .when(unsigned < high, F.array(unsigned.cast("bigint")))
        .otherwise(F.array(F.lit(_TWO_POW_63 - 1).cast("bigint"), (unsigned - high).cast("bigint")))
    )


def _log_position(src: Column) -> Column:
    binlog_number = F.regexp_extract(src["file"], r"(\d+)$", 1).try_cast("bigint")
    sqlserver = F.transform(F.split(src["change_lsn"], ":"), lambda p: F.conv(p, 16, 10).try_cast("bigint"))
    return (
        F.when(src["lsn"].isNotNull(), _lsn_position(src["lsn"]))
        .when(
            src["scn"].isNotNull(),
            F.array(src["scn"].try_cast("bigint"), src["commit_scn"].try_cast("bigint")),
        )
        .when(src["change_lsn"].isNotNull(), F.concat(sqlserver, F.array(src["event_serial_no"])))
        .when(src["file"].isNotNull(), F.array(binlog_number, src["pos"], src["row"].cast("bigint")))
    )


def _op(e: Column) -> Column:
    raw = e["op"]
    mapped = F.lit(None).cast("string")
    for code, op in _OPS.items():
        mapped = F.when(raw == code, F.lit(op)).otherwise(mapped)
    snapshot = F.lower(e["source"]["snapshot"]).isin(*_SNAPSHOT_TRUE)
    return F.when((mapped == OP_INSERT) & snapshot, F.lit(OP_READ)).otherwise(mapped)


def _is_hbase(e: Column) -> Column:
    image = F.coalesce(e["after"], e["before"])
    return F.map_contains_key(image, "ROW") & e["source"]["namespace"].isNotNull()


class DebeziumJsonDecoder(Decoder):
    name = "debezium-json"
    description = (
        "Debezium JSON envelope with or without the schema block: open-source Debezium (MySQL, PostgreSQL, "
        "Oracle, SQL Server), Lindorm SQL and HBase tables, Huawei CDL message_version 2.0"
    )
    needs = "--key (except Lindorm HBase tables, keyed by ROW, and CDL records carrying `unique`)"

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        return envelope_events(parse_json_records(spark, files, RECORD_SCHEMA), options)


def envelope_events(parsed: DataFrame, options: DecodeOptions) -> DataFrame:
    """Canonical events of parsed Debezium records (``parse_json_records`` columns, ``j`` in ``RECORD_SCHEMA``).

    Shared by every landing of the Debezium envelope: JSON lines here, Avro and Parquet files in
    ``debezium_avro`` (which hands over each record as the JSON Kafka Connect's JsonConverter
    writes, with its schema block), so types, ordering and positions follow one set of rules.
    """
    e = _envelope()
    staged = plan_barrier(parsed.select("*", e.alias("e")))
    e = F.col("e")
    src = e["source"]

    # try_element_at: a heartbeat's schema has neither field, and [0] on an empty array throws (ANSI).
    declared_columns = F.coalesce(
        F.try_element_at(F.filter(F.col("j.schema.fields"), lambda f: f["field"] == "after"), F.lit(1))[
            "fields"
        ],
        F.try_element_at(F.filter(F.col("j.schema.fields"), lambda f: f["field"] == "before"), F.lit(1))[
            "fields"
        ],
    )
    declared = column_types(declared_columns)
    hbase = _is_hbase(e) & declared.isNull()
    hbase_type = F.lit("string" if options.binary_as_text else "binary")
    hbase_declared = F.transform_values(
        F.coalesce(e["after"], e["before"]),
        lambda k, v: F.struct(hbase_type.alias("type"), F.lit("base64").alias("codec")),
    )
    declared = F.when(hbase, hbase_declared).otherwise(declared)
    staged = plan_barrier(staged.select("*", declared.alias("declared")))
    declared = F.col("declared")

    after = convert_image(e["after"], declared)
    before = convert_image(e["before"], declared)
    if options.binary_as_text:

        def as_text(img: Column) -> Column:
            return F.transform_values(
                img, lambda k, v: F.try_variant_get(v, "$", "binary").cast("string").cast("variant")
            )

        after = F.when(hbase, as_text(after)).otherwise(after)
        before = F.when(hbase, as_text(before)).otherwise(before)
    staged = plan_barrier(staged.select("*", after.alias("after_typed"), before.alias("before_typed")))
    after, before = F.col("after_typed"), F.col("before_typed")

    op = _op(e)
    has_row_change = e["op"].isNotNull()
    bad_value = image_conversion_failed(e["after"], after, declared) | image_conversion_failed(
        e["before"], before, declared
    )
    base64_codec = F.exists(F.map_values(declared), lambda t: t["codec"] == "base64")

    kind, reason = classify(
        (F.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
        (
            images_not_objects(
                F.col("bad"),
                F.col("j._corrupt_record"),
                "$.payload.after",
                "$.payload.before",
                "$.after",
                "$.before",
            ),
            KIND_QUARANTINED,
            Q_IMAGE_NOT_OBJECT,
        ),
        (F.col("bad").isNotNull(), KIND_QUARANTINED, "<bad>"),
        (e["status"].isin("BEGIN", "END") & ~has_row_change, KIND_IGNORED, IGNORED_TRANSACTION),
        (e["ddl"].isNotNull() & ~has_row_change, KIND_IGNORED, IGNORED_DDL),
        (e["op"] == "m", KIND_IGNORED, "logical decoding message"),
        (
            ~has_row_change
            & (
                e["HEARTBEAT_IDENTIFIER"].isNotNull()
                | (e["ts_ms"].isNotNull() & e["source"].isNull() & e["after"].isNull() & e["before"].isNull())
            ),
            KIND_IGNORED,
            IGNORED_HEARTBEAT,
        ),
        (~has_row_change, KIND_QUARANTINED, Q_MISSING_OP),
        (op.isNull(), KIND_QUARANTINED, Q_UNKNOWN_OP),
        (_qualified_table(src).isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
        (bad_value & base64_codec, KIND_QUARANTINED, Q_BAD_BASE64),
        (bad_value, KIND_QUARANTINED, Q_TYPE_MISMATCH),
        (op.isin(OP_INSERT, OP_READ, OP_UPDATE) & e["after"].isNull(), KIND_QUARANTINED, Q_MISSING_IMAGE),
        (
            (op == OP_DELETE) & e["before"].isNull() & e["after"].isNull() & e["unique"].isNull(),
            KIND_QUARANTINED,
            Q_KEY_UNKNOWN,
        ),
    )
    reason = F.when(reason == "<bad>", F.col("bad")).otherwise(reason)
    unique_keys = F.when(e["unique"].isNotNull(), F.map_keys(e["unique"]))
    key_cols = F.when(hbase, F.array(F.lit("ROW"))).otherwise(unique_keys)
    # A delete without a before image (REPLICA IDENTITY DEFAULT) can still carry its key in `unique`.
    before_or_key = F.when(
        (op == OP_DELETE) & before.isNull() & e["unique"].isNotNull(), e["unique"]
    ).otherwise(before)
    types = F.when(declared.isNotNull(), F.transform_values(declared, lambda k, t: t["type"]))

    return staged.select(
        *canonical(
            table=_qualified_table(src),
            kind=kind,
            op=op,
            reason=reason,
            # A source.ts_ms of 0 (snapshot reads of early Debezium MySQL) is no time: the
            # envelope's ts_ms, when the connector read the row, is (as the sensor reads it).
            event_ms=F.coalesce(F.when(src["ts_ms"] != 0, src["ts_ms"]), e["ts_ms"]),
            log_pos=_log_position(src),
            log_pos_unreadable=src["lsn"].isNotNull() & _lsn_position(src["lsn"]).isNull(),
            sub_pos=F.lit(0),
            tx_id=F.coalesce(e["transaction"]["id"], src["txId"]),
            before=before_or_key,
            after=F.when(op != OP_DELETE, after),
            partial=F.lit(False),
            key_cols=key_cols,
            types=types,
            file=F.col("file"),
            file_pos=F.col("file_pos"),
            line=F.col("line"),
            raw=F.col("text"),
        )
    )

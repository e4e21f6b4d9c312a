"""The Debezium envelope, shared by the family's decoders (JSON lines, Avro and Parquet, MongoDB).

The JSON flavours are open-source Debezium, Lindorm (SQL and HBase tables) and Huawei CDL 2.0. One
decoder covers every flavour because they share the envelope (``op``, ``before``, ``after``,
``source``, ``ts_ms``), with or without the Kafka Connect ``schema`` block, wrapped in ``payload``
or bare. What differs is where the table name, the log position and the key come from, and each
is a ``coalesce`` over the places a flavour puts it.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from airflow_cdc_provider.formats.base import DecodeOptions
from airflow_cdc_provider.formats.common.jsonlines import images_not_objects
from airflow_cdc_provider.formats.common.kafka_connect import (
    ENVELOPE_SCHEMA,
    column_types,
    convert_image,
    image_conversion_failed,
)
from airflow_cdc_provider.formats.debezium.unavailable import placeholder_columns, without_columns
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
    qualified_table,
)
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr

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

# A record's Connect column types (``with_connect_types``).
CONNECT, CONNECT_NAMES, CONNECT_BASE64 = "_connect", "_connect_names", "_connect_base64"
_OPS = {"c": OP_INSERT, "r": OP_READ, "u": OP_UPDATE, "d": OP_DELETE, "t": OP_TRUNCATE}
_SNAPSHOT_TRUE = (
    "true",
    "last",
    "first",
    "first_in_data_collection",
    "last_in_data_collection",
    "incremental",
)


class Envelope:
    """The envelope's fields, from ``payload`` when the record wraps it, else from the record itself.

    One CASE per field read, rather than a struct copied per record (a struct of both images).
    Shared with ``debezium_mongodb``, whose records use the same envelope.
    """

    def __getitem__(self, name: str) -> Expr:
        return E.when(E.col("j.payload").isNotNull(), E.col(f"j.payload.{name}")).otherwise(
            E.col(f"j.{name}")
        )


def _qualified_table(src: Expr) -> Expr:
    # Lindorm names namespace.table; MySQL db.table; PostgreSQL, Oracle, SQL Server db.schema.table.
    return E.when(src["namespace"].isNotNull(), qualified_table(src["namespace"], src["table"])).otherwise(
        E.when(src["table"].isNotNull(), qualified_table(src["db"], src["schema"], src["table"]))
    )


_TWO_POW_63 = 2**63
_TWO_POW_64 = 2**64


def _lsn_position(lsn_text: Expr) -> Expr:
    """A PostgreSQL LSN (unsigned 64-bit, as JSON number or text) -> a position that orders as the source means.

    An LSN below 2^63 is ``[lsn]``; one at or above 2^63 is ``[2^63 - 1, lsn - 2^63]``,
    which sorts after every smaller LSN (a longer array with an equal prefix sorts later). A value
    that is no unsigned 64-bit integer (e.g. ``-9223372036854776000``, Long.MIN_VALUE printed
    through a double) gives null: the record is then ordered by event time and file position,
    never quarantined.
    """
    exact = lsn_text.try_cast("decimal(38,6)")
    readable = (
        exact.isNotNull()
        & (exact >= 0)
        & (exact < E.lit(str(_TWO_POW_64)).cast("decimal(20,0)"))
        & (exact == E.floor(exact))
    )
    unsigned = exact.cast("decimal(20,0)")
    high = E.lit(str(_TWO_POW_63)).cast("decimal(20,0)")
    return (
        E.when(~readable, E.null("array<bigint>"))
        .when(unsigned < high, E.array(unsigned.cast("bigint")))
        .otherwise(E.array(E.lit(_TWO_POW_63 - 1), (unsigned - high).cast("bigint")))
    )


def _log_position(src: Expr) -> Expr:
    binlog_number = E.regexp_extract(src["file"], r"(\d+)$", 1).try_cast("bigint")
    sqlserver = E.transform(E.split(src["change_lsn"], ":"), lambda p: E.conv(p, 16, 10).try_cast("bigint"))
    return (
        E.when(src["lsn"].isNotNull(), _lsn_position(src["lsn"]))
        .when(
            src["scn"].isNotNull(),
            E.array(src["scn"].try_cast("bigint"), src["commit_scn"].try_cast("bigint")),
        )
        .when(src["change_lsn"].isNotNull(), E.concat(sqlserver, E.array(src["event_serial_no"])))
        .when(src["file"].isNotNull(), E.array(binlog_number, src["pos"], src["row"].cast("bigint")))
    )


def envelope_op(raw: Expr, snapshot: Expr, ops: dict[str, str] = _OPS) -> Expr:
    """The canonical op of an envelope's ``op`` code; an insert while ``source.snapshot`` says so is a read."""
    mapped = E.when(raw == "c", E.lit(OP_INSERT))
    for code, op in ops.items():
        if code != "c":
            mapped = mapped.when(raw == code, E.lit(op))
    return E.when((raw == "c") & E.lower(snapshot).isin(*_SNAPSHOT_TRUE), E.lit(OP_READ)).otherwise(mapped)


def _declared_columns(fields: Expr) -> Expr:
    """The Connect schema's columns of the ``after`` image, else of ``before``."""

    def image_fields(name: str) -> Expr:
        # try_element_at: a heartbeat's schema has neither field, and [0] on an empty array throws (ANSI).
        return E.try_element_at(E.filter(fields, lambda f: f["field"] == name), 1)["fields"]

    return E.coalesce(image_fields("after"), image_fields("before"))


def _unavailable_left_out(staged: DataFrame, values: tuple[bytes, ...]) -> DataFrame:
    """``_after`` without the columns whose value is an unavailable-value placeholder, and those
    columns in ``_unavailable`` (null when none): before conversion, so that a placeholder in a
    typed column (``bytea``, arrays) is never read, or quarantined, as that column's value."""
    found = staged.select(
        "*", placeholder_columns(E.col("_after"), E.col("text"), values).alias("_unavailable").column()
    )
    return found.withColumn("_after", without_columns(E.col("_after"), E.col("_unavailable")).column())


def block_types(block: Expr) -> Expr:
    """The column types a schema block (JSON text) declares for the images, as ``column_types``
    gives them: null for a block without ``after`` or ``before`` (a heartbeat's)."""
    return column_types(_declared_columns(E.from_json(block, ENVELOPE_SCHEMA)["fields"]))


def with_connect_types(frame: DataFrame, types: Expr) -> DataFrame:
    """``frame`` with ``types`` (a ``column_types`` map, null without a schema block) as ``CONNECT``,
    and what the event needs of it: each column's type name (``CONNECT_NAMES``) and whether any
    column is Base64 (``CONNECT_BASE64``). Where ``frame`` has one row per schema block, each is
    walked once; the walks are higher-order functions, which run interpreted."""
    typed = frame.select("*", types.alias(CONNECT).column())
    connect = E.col(CONNECT)
    return typed.select(
        "*",
        *E.columns(
            E.when(connect.isNotNull(), E.transform_values(connect, lambda k, t: t["type"])).alias(
                CONNECT_NAMES
            ),
            E.exists(E.map_values(connect), lambda t: t["codec"] == "base64").alias(CONNECT_BASE64),
        ),
    )


def _with_raw_images(parsed: DataFrame, options: DecodeOptions, typed: bool) -> DataFrame:
    """``_after`` and ``_before`` (the images as read, without the unavailable-value placeholders,
    which go to ``_unavailable``), and unless ``typed`` the ``CONNECT`` columns of each record's own
    schema block."""
    e = Envelope()
    if not typed:
        # The guard is compiled code: records without a schema block skip the interpreted walk.
        parsed = with_connect_types(
            parsed,
            E.when(
                E.col("j.schema.fields").isNotNull(),
                column_types(_declared_columns(E.col("j.schema.fields"))),
            ),
        )
    staged = parsed.select("*", e["after"].alias("_after").column(), e["before"].alias("_before").column())
    return _unavailable_left_out(staged, options.unavailable_values)


def _with_declared_types(staged: DataFrame, options: DecodeOptions) -> DataFrame:
    """``_hbase`` (a Lindorm HBase table's record) and ``declared``, the types the values convert to:
    the Connect schema's, or for an HBase table every column Base64 (binary, or text with
    ``binary_as_text``); with ``declared_names`` and ``declared_base64`` as ``with_connect_types``
    names them."""
    e = Envelope()
    after_raw, before_raw = E.col("_after"), E.col("_before")
    # Lindorm HBase tables: no schema block, key ROW, every value Base64.
    hbase = (
        E.map_contains_key(E.coalesce(after_raw, before_raw), "ROW")
        & e["source"]["namespace"].isNotNull()
        & E.col(CONNECT).isNull()
    )
    hbase_type = "string" if options.binary_as_text else "binary"
    hbase_declared = E.transform_values(
        E.coalesce(after_raw, before_raw),
        lambda k, v: E.struct(E.lit(hbase_type).alias("type"), E.lit("base64").alias("codec")),
    )
    hbase_names = E.transform_values(E.coalesce(after_raw, before_raw), lambda k, v: E.lit(hbase_type))
    return staged.select(
        "*",
        *E.columns(
            hbase.alias("_hbase"),
            E.when(hbase, hbase_declared).otherwise(E.col(CONNECT)).alias("declared"),
            E.when(hbase, hbase_names).otherwise(E.col(CONNECT_NAMES)).alias("declared_names"),
            (hbase | E.coalesce(E.col(CONNECT_BASE64), E.lit(False))).alias("declared_base64"),
        ),
    )


def _with_typed_images(staged: DataFrame, options: DecodeOptions) -> DataFrame:
    """``after_typed`` and ``before_typed``: the images converted to their declared types (an HBase
    table's Base64 values decoded to UTF-8 text with ``binary_as_text``)."""
    after_raw, before_raw = E.col("_after"), E.col("_before")
    declared, hbase = E.col("declared"), E.col("_hbase")
    after = convert_image(after_raw, declared)
    before = convert_image(before_raw, declared)
    if options.binary_as_text:

        def as_text(img: Expr) -> Expr:
            return E.transform_values(
                img, lambda k, v: E.try_variant_get(v, "$", "binary").cast("string").cast("variant")
            )

        after = E.when(hbase, as_text(after)).otherwise(after)
        before = E.when(hbase, as_text(before)).otherwise(before)
    return staged.select("*", after.alias("after_typed").column(), before.alias("before_typed").column())


def _kind_and_reason(op: Expr) -> tuple[Expr, Expr]:
    """What a record is (a change, ignored or quarantined) and why, the first rule that holds.

    Transaction markers, schema changes, logical decoding messages and heartbeats share landings
    with row changes and are ignored; a value that did not convert quarantines its record.
    """
    e = Envelope()
    src, raw_op = e["source"], e["op"]
    after_raw, before_raw = E.col("_after"), E.col("_before")
    after, before, declared = E.col("after_typed"), E.col("before_typed"), E.col("declared")
    has_row_change = raw_op.isNotNull()
    bad_value = image_conversion_failed(after_raw, after, declared) | image_conversion_failed(
        before_raw, before, declared
    )
    base64_codec = E.col("declared_base64")
    bad = E.col("bad")
    return classify(
        (E.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
        (
            images_not_objects(
                bad, E.col("j._corrupt_record"), "$.payload.after", "$.payload.before", "$.after", "$.before"
            ),
            KIND_QUARANTINED,
            Q_IMAGE_NOT_OBJECT,
        ),
        (bad.isNotNull(), KIND_QUARANTINED, bad),
        (e["status"].isin("BEGIN", "END") & ~has_row_change, KIND_IGNORED, IGNORED_TRANSACTION),
        (e["ddl"].isNotNull() & ~has_row_change, KIND_IGNORED, IGNORED_DDL),
        (raw_op == "m", KIND_IGNORED, "logical decoding message"),
        (
            ~has_row_change
            & (
                e["HEARTBEAT_IDENTIFIER"].isNotNull()
                | (e["ts_ms"].isNotNull() & src.isNull() & after_raw.isNull() & before_raw.isNull())
            ),
            KIND_IGNORED,
            IGNORED_HEARTBEAT,
        ),
        (~has_row_change, KIND_QUARANTINED, Q_MISSING_OP),
        (op.isNull(), KIND_QUARANTINED, Q_UNKNOWN_OP),
        (_qualified_table(src).isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
        (bad_value & base64_codec, KIND_QUARANTINED, Q_BAD_BASE64),
        (bad_value, KIND_QUARANTINED, Q_TYPE_MISMATCH),
        (op.isin(OP_INSERT, OP_READ, OP_UPDATE) & after_raw.isNull(), KIND_QUARANTINED, Q_MISSING_IMAGE),
        (
            (op == OP_DELETE) & before_raw.isNull() & after_raw.isNull() & e["unique"].isNull(),
            KIND_QUARANTINED,
            Q_KEY_UNKNOWN,
        ),
    )


def envelope_events(parsed: DataFrame, options: DecodeOptions, typed: bool = False) -> DataFrame:
    """Canonical events of parsed Debezium records (``parse_json_records`` columns, ``j`` in ``RECORD_SCHEMA``).

    Shared by every landing of the Debezium envelope: JSON lines here, Avro and Parquet files in
    ``debezium_avro`` (which hands over each record as the JSON Kafka Connect's JsonConverter
    writes), so types, ordering and positions follow one set of rules. ``typed``: ``parsed``
    already carries the ``CONNECT`` columns (``with_connect_types`` of each record's file's block,
    typed once per file); by default each record's own block is walked.
    Projections in order: the raw images and Connect types, the declared types, the converted
    images, then the canonical event; each later one reads the earlier ones' results instead of
    repeating their expressions.
    """
    staged = _with_raw_images(parsed, options, typed)
    staged = _with_declared_types(staged, options)
    staged = _with_typed_images(staged, options)
    e = Envelope()
    src = e["source"]
    op = envelope_op(e["op"], src["snapshot"])
    kind, reason = _kind_and_reason(op)
    after, before = E.col("after_typed"), E.col("before_typed")
    unique = e["unique"]
    key_cols = E.when(E.col("_hbase"), E.array(E.lit("ROW"))).otherwise(
        E.when(unique.isNotNull(), E.map_keys(unique))
    )
    # A delete without a before image (REPLICA IDENTITY DEFAULT) can still carry its key in `unique`.
    before_or_key = E.when((op == OP_DELETE) & before.isNull() & unique.isNotNull(), unique).otherwise(before)
    return staged.select(
        *canonical(
            table=_qualified_table(src),
            kind=kind,
            op=op,
            reason=reason,
            # A source.ts_ms of 0 (snapshot reads of early Debezium MySQL) is no time: the
            # envelope's ts_ms, when the connector read the row, is (as the sensor reads it).
            event_ms=E.coalesce(E.when(src["ts_ms"] != 0, src["ts_ms"]), e["ts_ms"]),
            log_pos=_log_position(src),
            log_pos_unreadable=src["lsn"].isNotNull() & _lsn_position(src["lsn"]).isNull(),
            sub_pos=E.lit(0),
            tx_id=E.coalesce(e["transaction"]["id"], src["txId"]),
            before=before_or_key,
            after=E.when(op != OP_DELETE, after),
            # An update that left placeholders out carries only the columns it knows.
            partial=E.coalesce((op == OP_UPDATE) & E.col("_unavailable").isNotNull(), E.lit(False)),
            unavailable=E.when(op != OP_DELETE, E.col("_unavailable")),
            key_cols=key_cols,
            types=E.col("declared_names"),
            raw=E.col("text"),
        )
    )

"""Huawei MRS CDL JSON, ``message_version`` 1.0.

CDL 1.0 wraps one row change in the Kafka Connect ``{"schema", "payload"}`` envelope (the schema may
be ``{}`` or absent, and the payload may be bare). The payload names the change in upper case:
``OPERATION`` (INSERT/UPDATE/DELETE), ``data`` (after image), ``before``, ``unique`` (the key
columns and their values), ``TIMESTAMP`` (change time, epoch ms), ``SEG_OWNER``/``TABLE_NAME`` and
``transaction.properties``, a name/value list holding ``lsn`` and ``txId``.

Choices:
- table = ``SEG_OWNER.TABLE_NAME``. ``DATA_STORE`` is the source connector type (POSTGRESQL, ...),
  the counterpart of Debezium's ``source.connector``, not a namespace: prefixing it would name every
  PostgreSQL table ``POSTGRESQL.schema.table`` and split one table in two if the connector changed.
- position = ``[lsn, txId]`` (``scn`` when a source gives that instead of ``lsn``).
- types come from the schema block's ``data`` (or ``before``) struct through the shared Kafka Connect
  mapping. Decimals that CDL carries as strings (a ``string`` whose logical name ends in ``Decimal``)
  stay ``string``: the schema gives neither precision nor scale, so any ``decimal(p,s)`` would either
  round values or fail the job when the inferred scale differs between records. The exact digits are
  kept and the column can be cast downstream.
- a record that names no operation and carries no row but a ``HEARTBEAT_IDENTIFIER`` is a heartbeat.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    StringType,
    StructField,
    StructType,
    VariantType,
)

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.common.jsonlines import parse_json_records
from airflow_cdc_provider.formats.common.kafka_connect import (
    ENVELOPE_SCHEMA,
    column_types,
    convert_image,
    image_conversion_failed,
)
from airflow_cdc_provider.formats.common.values import not_an_object, object_map
from airflow_cdc_provider.formats.events import (
    IGNORED_HEARTBEAT,
    IGNORED_TOMBSTONE,
    KIND_IGNORED,
    KIND_QUARANTINED,
    OP_DELETE,
    OP_INSERT,
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
from airflow_cdc_provider.spark.reader import LandedFile
from airflow_cdc_provider.spark.sqlexpr import Expr

_PROPERTY = StructType([StructField("name", StringType()), StructField("value", StringType())])
# Scalars are read as text and converted with try_cast; images as variants, checked for being objects.
_PAYLOAD_FIELDS = [
    StructField("DATA_STORE", StringType()),
    StructField("SEG_OWNER", StringType()),
    StructField("TABLE_NAME", StringType()),
    StructField("TIMESTAMP", StringType()),
    StructField("OPERATION", StringType()),
    StructField("transaction", StructType([StructField("properties", ArrayType(_PROPERTY))])),
    StructField("unique", VariantType()),
    StructField("data", VariantType()),
    StructField("before", VariantType()),
    StructField("message_version", StringType()),
    StructField("HEARTBEAT_IDENTIFIER", StringType()),
]
RECORD_SCHEMA = StructType(
    _PAYLOAD_FIELDS
    + [
        StructField("schema", ENVELOPE_SCHEMA),
        StructField("payload", StructType(_PAYLOAD_FIELDS)),
    ]
)

_OPS = {"INSERT": OP_INSERT, "UPDATE": OP_UPDATE, "DELETE": OP_DELETE}


def _payload() -> Expr:
    names = [f.name for f in _PAYLOAD_FIELDS]
    return E.when(E.col("j.payload").isNotNull(), E.col("j.payload")).otherwise(
        E.struct(*[E.col(f"j.{n}").alias(n) for n in names])
    )


def _property(properties: Expr, name: str) -> Expr:
    """The value of the first property called ``name`` in any letter case.

    Compared under a case-insensitive collation, so the search is compiled code, not a lambda.
    """
    names = properties["name"].cast("array<string collate UTF8_LCASE>")
    position = E.array_position(names, E.lit(name)).cast("int")
    return E.when(position > 0, E.element_at(properties, position))["value"]


def log_position(properties: Expr) -> Expr:
    """``[lsn, txId]`` from the transaction properties (``scn`` stands in for ``lsn``); null if none."""
    lsn = E.coalesce(_property(properties, "lsn"), _property(properties, "scn")).try_cast("bigint")
    tx = _property(properties, "txId").try_cast("bigint")
    return E.when(lsn.isNotNull(), E.when(tx.isNull(), E.array(lsn)).otherwise(E.array(lsn, tx)))


class CdlJsonDecoder(Decoder):
    name = "cdl-json"
    description = (
        "Huawei MRS CDL JSON 1.0 (OPERATION, data, before, unique, TIMESTAMP, transaction lsn/txId), "
        "with or without the Kafka Connect schema block"
    )
    needs = ""
    transaction_ids = True

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        parsed = parse_json_records(spark, files, RECORD_SCHEMA)
        fields = E.col("j.schema.fields")
        declared_columns = E.coalesce(
            E.try_element_at(E.filter(fields, lambda f: f["field"] == "data"), 1)["fields"],
            E.try_element_at(E.filter(fields, lambda f: f["field"] == "before"), 1)["fields"],
        )
        staged = parsed.select(
            "*",
            *E.columns(_payload().alias("p"), column_types(declared_columns).alias("declared")),
        )
        p, declared = E.col("p"), E.col("declared")
        data, before, unique = object_map(p["data"]), object_map(p["before"]), object_map(p["unique"])
        staged = staged.select(
            "*",
            *E.columns(
                data.alias("_data"),
                before.alias("_before"),
                unique.alias("_unique"),
                convert_image(data, declared).alias("_after_typed"),
                convert_image(before, declared).alias("_before_typed"),
                convert_image(unique, declared).alias("_unique_typed"),
            ),
        )
        return self._events(staged)

    def _events(self, df: DataFrame) -> DataFrame:
        """The canonical event of each staged record: its kind (``_classified``), and a delete's
        row from ``before``, ``data`` or the key values in ``unique``, whichever it carries."""
        p, declared = E.col("p"), E.col("declared")
        after_typed, before_typed, unique_typed = (
            E.col("_after_typed"),
            E.col("_before_typed"),
            E.col("_unique_typed"),
        )
        op = _op()
        kind, reason = _classified()
        # A delete names its row in `before`; failing that, in `data` or by its key values in `unique`.
        before_image = E.when(op == OP_DELETE, E.coalesce(before_typed, after_typed, unique_typed)).otherwise(
            before_typed
        )
        unique = E.col("_unique")
        key_cols = E.when(E.size(E.map_keys(unique)) > 0, E.map_keys(unique))
        properties = p["transaction"]["properties"]
        return df.select(
            *canonical(
                table=_table(),
                kind=kind,
                op=op,
                reason=reason,
                event_ms=p["TIMESTAMP"].try_cast("bigint"),
                log_pos=log_position(properties),
                sub_pos=E.lit(0),
                tx_id=_property(properties, "txId"),
                before=before_image,
                after=E.when(op != OP_DELETE, after_typed),
                partial=E.lit(False),
                key_cols=key_cols,
                types=E.when(declared.isNotNull(), E.transform_values(declared, lambda k, t: t["type"])),
                raw=E.col("text"),
            )
        )


def _operation() -> Expr:
    """The payload's ``OPERATION``, trimmed and upper-cased."""
    return E.upper(E.trim(E.col("p")["OPERATION"]))


def _op() -> Expr:
    """The canonical op ``OPERATION`` names (null for another name)."""
    op = E.null("string")
    for name, canonical_op in _OPS.items():
        op = E.when(_operation() == name, E.lit(canonical_op)).otherwise(op)
    return op


def _table() -> Expr:
    """``SEG_OWNER.TABLE_NAME`` (``TABLE_NAME`` alone without an owner); null without a name."""
    p = E.col("p")
    return E.when(
        E.trim(p["TABLE_NAME"]) != "",
        qualified_table(E.when(E.trim(p["SEG_OWNER"]) != "", p["SEG_OWNER"]), p["TABLE_NAME"]),
    )


def _classified() -> tuple[Expr, Expr]:
    """``(kind, reason)`` of a staged record: a row change, an ignored record (tombstone, heartbeat)
    or a quarantined one, the first rule that holds deciding."""
    p, declared = E.col("p"), E.col("declared")
    data, before, unique = E.col("_data"), E.col("_before"), E.col("_unique")
    operation, op = _operation(), _op()
    has_operation = operation.isNotNull() & (operation != "")
    bad_value = (
        image_conversion_failed(data, E.col("_after_typed"), declared)
        | image_conversion_failed(before, E.col("_before_typed"), declared)
        | image_conversion_failed(unique, E.col("_unique_typed"), declared)
    )
    base64_codec = E.exists(E.map_values(declared), lambda t: t["codec"] == "base64")
    heartbeat = ~has_operation & data.isNull() & before.isNull() & p["HEARTBEAT_IDENTIFIER"].isNotNull()
    return classify(
        (E.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
        (E.col("bad").isNotNull(), KIND_QUARANTINED, E.col("bad")),
        (heartbeat, KIND_IGNORED, IGNORED_HEARTBEAT),
        (~has_operation, KIND_QUARANTINED, Q_MISSING_OP),
        (op.isNull(), KIND_QUARANTINED, Q_UNKNOWN_OP),
        (
            not_an_object(p["data"], data)
            | not_an_object(p["before"], before)
            | not_an_object(p["unique"], unique),
            KIND_QUARANTINED,
            Q_IMAGE_NOT_OBJECT,
        ),
        (_table().isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
        (bad_value & base64_codec, KIND_QUARANTINED, Q_BAD_BASE64),
        (bad_value, KIND_QUARANTINED, Q_TYPE_MISMATCH),
        (op.isin(OP_INSERT, OP_UPDATE) & data.isNull(), KIND_QUARANTINED, Q_MISSING_IMAGE),
        (
            (op == OP_DELETE) & before.isNull() & data.isNull() & unique.isNull(),
            KIND_QUARANTINED,
            Q_KEY_UNKNOWN,
        ),
    )

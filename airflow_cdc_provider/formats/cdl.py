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

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    StringType,
    StructField,
    StructType,
    VariantType,
)

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
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
)
from airflow_cdc_provider.formats.jsonlines import parse_json_records
from airflow_cdc_provider.formats.kafka_connect import (
    ENVELOPE_SCHEMA,
    column_types,
    convert_image,
    image_conversion_failed,
)
from airflow_cdc_provider.formats.landed_files import LandedFile

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


def _payload() -> Column:
    names = [f.name for f in _PAYLOAD_FIELDS]
    return F.when(F.col("j.payload").isNotNull(), F.col("j.payload")).otherwise(
        F.struct(*[F.col(f"j.{n}").alias(n) for n in names])
    )


def _present(v: Column) -> Column:
    """The value unless it is missing or JSON null."""
    return F.when(v.isNotNull() & ~F.is_variant_null(v), v)


def _not_object(v: Column) -> Column:
    return _present(v).isNotNull() & ~F.startswith(F.schema_of_variant(v), F.lit("OBJECT"))


def _image(v: Column) -> Column:
    return F.try_variant_get(_present(v), "$", "map<string,variant>")


def _property(properties: Column, name: str) -> Column:
    found = F.filter(properties, lambda p: F.lower(p["name"]) == name.lower())
    return F.try_element_at(found, F.lit(1))["value"]


def log_position(properties: Column) -> Column:
    """``[lsn, txId]`` from the transaction properties (``scn`` stands in for ``lsn``); null if none."""
    lsn = F.coalesce(_property(properties, "lsn"), _property(properties, "scn")).try_cast("bigint")
    tx = _property(properties, "txId").try_cast("bigint")
    return F.when(lsn.isNotNull(), F.filter(F.array(lsn, tx), lambda x: x.isNotNull()))


class CdlJsonDecoder(Decoder):
    name = "cdl-json"
    description = (
        "Huawei MRS CDL JSON 1.0 (OPERATION, data, before, unique, TIMESTAMP, transaction lsn/txId), "
        "with or without the Kafka Connect schema block"
    )
    needs = ""

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        parsed = parse_json_records(spark, files, RECORD_SCHEMA)
        p = _payload()
        fields = F.col("j.schema.fields")
        declared_columns = F.coalesce(
            F.try_element_at(F.filter(fields, lambda f: f["field"] == "data"), F.lit(1))["fields"],
            F.try_element_at(F.filter(fields, lambda f: f["field"] == "before"), F.lit(1))["fields"],
        )
        staged = parsed.select(
            "*",
            p.alias("p"),
            column_types(declared_columns).alias("declared"),
        )
        p, declared = F.col("p"), F.col("declared")
        data, before, unique = _image(p["data"]), _image(p["before"]), _image(p["unique"])
        staged = staged.select(
            "*",
            data.alias("_data"),
            before.alias("_before"),
            unique.alias("_unique"),
            convert_image(data, declared).alias("_after_typed"),
            convert_image(before, declared).alias("_before_typed"),
            convert_image(unique, declared).alias("_unique_typed"),
        )
        return self._events(staged)

    def _events(self, df: DataFrame) -> DataFrame:
        p, declared = F.col("p"), F.col("declared")
        data, before, unique = F.col("_data"), F.col("_before"), F.col("_unique")
        operation = F.upper(F.trim(p["OPERATION"]))
        has_operation = operation.isNotNull() & (operation != "")
        op = F.lit(None).cast("string")
        for name, canonical_op in _OPS.items():
            op = F.when(operation == name, F.lit(canonical_op)).otherwise(op)
        table = F.when(
            F.trim(p["TABLE_NAME"]) != "",
            F.concat_ws(".", F.when(F.trim(p["SEG_OWNER"]) != "", p["SEG_OWNER"]), p["TABLE_NAME"]),
        )
        bad_value = (
            image_conversion_failed(data, F.col("_after_typed"), declared)
            | image_conversion_failed(before, F.col("_before_typed"), declared)
            | image_conversion_failed(unique, F.col("_unique_typed"), declared)
        )
        base64_codec = F.exists(F.map_values(declared), lambda t: t["codec"] == "base64")
        heartbeat = ~has_operation & data.isNull() & before.isNull() & p["HEARTBEAT_IDENTIFIER"].isNotNull()
        kind, reason = classify(
            (F.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
            (F.col("bad").isNotNull(), KIND_QUARANTINED, "<bad>"),
            (heartbeat, KIND_IGNORED, IGNORED_HEARTBEAT),
            (~has_operation, KIND_QUARANTINED, Q_MISSING_OP),
            (op.isNull(), KIND_QUARANTINED, Q_UNKNOWN_OP),
            (
                _not_object(p["data"]) | _not_object(p["before"]) | _not_object(p["unique"]),
                KIND_QUARANTINED,
                Q_IMAGE_NOT_OBJECT,
            ),
            (table.isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
            (bad_value & base64_codec, KIND_QUARANTINED, Q_BAD_BASE64),
            (bad_value, KIND_QUARANTINED, Q_TYPE_MISMATCH),
            (op.isin(OP_INSERT, OP_UPDATE) & data.isNull(), KIND_QUARANTINED, Q_MISSING_IMAGE),
            (
                (op == OP_DELETE) & before.isNull() & data.isNull() & unique.isNull(),
                KIND_QUARANTINED,
                Q_KEY_UNKNOWN,
            ),
        )
        reason = F.when(reason == "<bad>", F.col("bad")).otherwise(reason)
        # A delete names its row in `before`; failing that, in `data` or by its key values in `unique`.
        before_image = F.when(
            op == OP_DELETE, F.coalesce(F.col("_before_typed"), F.col("_after_typed"), F.col("_unique_typed"))
        ).otherwise(F.col("_before_typed"))
        key_cols = F.when(F.size(F.map_keys(unique)) > 0, F.map_keys(unique))
        properties = p["transaction"]["properties"]
        return df.select(
            *canonical(
                table=table,
                kind=kind,
                op=op,
                reason=reason,
                event_ms=p["TIMESTAMP"].try_cast("bigint"),
                log_pos=log_position(properties),
                sub_pos=F.lit(0),
                tx_id=_property(properties, "txId"),
                before=before_image,
                after=F.when(op != OP_DELETE, F.col("_after_typed")),
                partial=F.lit(False),
                key_cols=key_cols,
                types=F.when(declared.isNotNull(), F.transform_values(declared, lambda k, t: t["type"])),
                file=F.col("file"),
                file_pos=F.col("file_pos"),
                line=F.col("line"),
                raw=F.col("text"),
            )
        )

"""DataWorks BLOB JSON (DataHub BLOB topics, also Alibaba's "aliyun-json" Kafka format) -> canonical events.

One JSON object per message: ``schema`` (``dataColumn`` names and types, ``primaryKey``,
``source`` db/schema/table), ``payload`` (``op``, ``before``/``after`` each holding a
``dataColumn`` object of column -> value, ``sequenceId``, ``timestamp.eventTime`` in epoch ms).

* Ops: INSERT, DELETE, UPDATE_AFTER (alone or carrying its ``before`` in the same message), plain
  UPDATE (treated as UPDATE_AFTER), and UPDATE_BEFOR / UPDATE_BEFORE (the first half of a split
  update: counted as ignored "update before image", its row becomes the update's ``before``).
  TRUNCATE empties the table. Other DDL ops (CREATE, ALTER, ERASE, QUERY, RENAME, CINDEX,
  DINDEX), MHEARTBEAT and transaction markers (TRANSACTION_BEGIN/END, GTID, XACOMMIT,
  XAROLLBACK) are ignored and counted. Ops are case-sensitive, as documented.
* Position: ``[sequenceId]``. Full-load records carry ``sequenceId`` "-1" (and ``eventTime`` -1):
  they become ``read`` events, and -1 sorts before every change's sequence id.
* Types: LONG -> bigint, STRING -> string, DOUBLE -> double, BOOLEAN -> boolean, BYTES -> binary
  (Base64), DATE -> timestamp. DATE values are epoch milliseconds of a datetime (the source's
  DATETIME/TIMESTAMP as well as DATE columns arrive as DATE, with a time of day), so ``timestamp``
  keeps them whole where ``date`` would drop the time. Values arrive as JSON of any shape (the
  Paimon fixture carries DOUBLE "1.100000" as a string) and are converted from their text.
* Key: ``schema.primaryKey`` when it names columns, else ``--key``.
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
from airflow_cdc_provider.formats.datahub_tuple import (
    IGNORED_UPDATE_BEFORE,
    attach_before_images,
)
from airflow_cdc_provider.formats.events import (
    IGNORED_DDL,
    IGNORED_HEARTBEAT,
    IGNORED_TOMBSTONE,
    IGNORED_TRANSACTION,
    KIND_CHANGE,
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
)
from airflow_cdc_provider.formats.jsonlines import parse_json_records
from airflow_cdc_provider.formats.landed_files import LandedFile
from airflow_cdc_provider.formats.values import failed_conversions, text_to_variant

FULL_LOAD_SEQUENCE_ID = -1

_AFTER_OPS = ("INSERT", "UPDATE_AFTER", "UPDATE")  # need an after image
_UPDATE_OPS = ("UPDATE_AFTER", "UPDATE")
_BEFORE_HALF_OPS = ("UPDATE_BEFOR", "UPDATE_BEFORE")
_ROW_OPS = (*_AFTER_OPS, "DELETE", *_BEFORE_HALF_OPS, "TRUNCATE")
_IGNORED_OPS = {
    "MHEARTBEAT": IGNORED_HEARTBEAT,
    "TRANSACTION_BEGIN": IGNORED_TRANSACTION,
    "TRANSACTION_END": IGNORED_TRANSACTION,
    "GTID": IGNORED_TRANSACTION,
    "XACOMMIT": IGNORED_TRANSACTION,
    "XAROLLBACK": IGNORED_TRANSACTION,
    "CREATE": IGNORED_DDL,
    "ALTER": IGNORED_DDL,
    "ERASE": IGNORED_DDL,
    "QUERY": IGNORED_DDL,
    "RENAME": IGNORED_DDL,
    "CINDEX": IGNORED_DDL,
    "DINDEX": IGNORED_DDL,
}
# BLOB (StreamX) type -> Spark SQL type.
BLOB_TYPES = {
    "LONG": "bigint",
    "STRING": "string",
    "DOUBLE": "double",
    "BOOLEAN": "boolean",
    "DATE": "timestamp",
    "BYTES": "binary",
}


def _strings(*names: str) -> StructType:
    return StructType([StructField(n, StringType()) for n in names])


_SCHEMA_BLOCK = StructType(
    [
        StructField("dataColumn", ArrayType(_strings("name", "type"))),
        StructField("primaryKey", ArrayType(StringType())),
        StructField("source", _strings("dbType", "dbName", "schemaName", "tableName")),
    ]
)
_PAYLOAD = StructType(
    [
        StructField("op", StringType()),
        # Images as variants: an image that is not an object is diagnosed, not lost.
        StructField("before", VariantType()),
        StructField("after", VariantType()),
        StructField("sequenceId", StringType()),
        StructField("timestamp", _strings("eventTime", "systemTime", "checkpointTime")),
    ]
)
BLOB_SCHEMA = StructType([StructField("schema", _SCHEMA_BLOCK), StructField("payload", _PAYLOAD)])


class DatahubBlobDecoder(Decoder):
    name = "datahub-blob"
    description = "DataWorks/DataHub BLOB JSON (schema.dataColumn, payload.op/before/after, sequenceId)"
    needs = ""

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        parsed = parse_json_records(spark, files, BLOB_SCHEMA)
        return _events(_fields(parsed))


def _image_parts(image: Column, name: str) -> list[Column]:
    """The raw pieces of one ``payload.before/after`` variant, each extracted once."""
    return [
        image.alias(name),
        F.try_variant_get(image, "$.dataColumn", "variant").alias(name + "_data"),
        F.try_variant_get(image, "$.dataColumn", "map<string,string>").alias(name + "_map"),
    ]


def _image_state(name: str) -> list[Column]:
    """``<name>_present``, ``<name>_obj`` and ``<name>_text`` (``dataColumn`` as a text map).

    Absent means missing, JSON null, ``{}`` or ``{"dataColumn": null}``; ``"x"`` or
    ``{"dataColumn": [1]}`` is present but not an object. Values become their text (numbers as
    written, objects and arrays as JSON) for the typed conversion.
    """
    image, data, text_map = F.col(name), F.col(name + "_data"), F.col(name + "_map")
    given = image.isNotNull() & ~F.is_variant_null(image)
    data_given = data.isNotNull() & ~F.is_variant_null(data)
    # Only an image without `dataColumn` needs the (whole-value) type check.
    outer_is_object = F.when(data.isNotNull(), F.lit(True)).otherwise(
        F.substring(F.schema_of_variant(image), 1, 6) == "OBJECT"
    )
    present = F.coalesce(given & (~outer_is_object | data_given), F.lit(False))
    is_object = F.coalesce(given & data_given & text_map.isNotNull(), F.lit(False))
    return [
        present.alias(name + "_present"),
        is_object.alias(name + "_obj"),
        F.when(is_object, text_map).alias(name + "_text"),
    ]


def _typed_value(text: Column, blob_type: Column) -> Column:
    """One value to a typed variant; DATE is epoch ms (a timestamp text is accepted too)."""
    date_ms = F.trim(text).try_cast("bigint")
    as_date = F.when(date_ms.isNotNull(), F.timestamp_millis(date_ms)).otherwise(F.try_to_timestamp(text))
    spark_type = _spark_type(blob_type)
    return F.when(text.isNotNull() & (blob_type == "DATE"), as_date.cast("variant")).otherwise(
        text_to_variant(text, spark_type)
    )


def _spark_type(blob_type: Column) -> Column:
    out: Column = F.lit(None).cast("string")
    for name, spark_type in BLOB_TYPES.items():
        out = F.when(blob_type == name, F.lit(spark_type)).otherwise(out)
    return out


def _declared_types(columns: Column) -> Column:
    """``name -> BLOB type`` from ``schema.dataColumn`` (first declaration of a name wins)."""
    names = F.transform(columns, lambda c: c["name"])
    first = F.filter(
        columns, lambda c, i: c["name"].isNotNull() & (F.array_position(names, c["name"]) == i + 1)
    )
    return F.map_from_entries(F.transform(first, lambda c: F.struct(c["name"], F.upper(F.trim(c["type"])))))


def _fields(parsed: DataFrame) -> DataFrame:
    """Stage 1: the message's fields and both images as text maps (each computed once per record)."""
    j = F.col("j")
    payload = j["payload"]
    source = j["schema"]["source"]
    table_parts = [F.nullif(F.trim(source[n]), F.lit("")) for n in ("dbName", "schemaName", "tableName")]
    seq_text = F.trim(payload["sequenceId"])
    timestamps = payload["timestamp"]
    event_text = F.coalesce(F.trim(timestamps["eventTime"]), F.trim(timestamps["systemTime"]))
    keys = j["schema"]["primaryKey"]
    extracted = parsed.select(
        "file",
        "file_pos",
        "line",
        "text",
        "bad",
        "tombstone",
        payload["op"].alias("op"),
        F.when(table_parts[2].isNotNull(), F.concat_ws(".", *table_parts)).alias("table"),
        seq_text.alias("seq_text"),
        event_text.alias("event_text"),
        F.when(F.size(keys) > 0, keys).alias("key_cols"),
        _declared_types(j["schema"]["dataColumn"]).alias("blob_types"),
        *_image_parts(payload["before"], "before"),
        *_image_parts(payload["after"], "after"),
    )
    seq, event_ms = F.col("seq_text").try_cast("bigint"), F.col("event_text").try_cast("bigint")
    return extracted.select(
        "file",
        "file_pos",
        "line",
        "text",
        "bad",
        "tombstone",
        "op",
        "table",
        "key_cols",
        "blob_types",
        seq.alias("seq"),
        (F.col("seq_text").isNotNull() & (F.col("seq_text") != "") & seq.isNull()).alias("seq_bad"),
        event_ms.alias("event_ms"),
        (F.col("event_text").isNotNull() & (F.col("event_text") != "") & event_ms.isNull()).alias("time_bad"),
        *_image_state("before"),
        *_image_state("after"),
    )


def _typed_images(fields: DataFrame) -> DataFrame:
    """Stage 2: both images typed by the declared types, and the declared Spark types."""
    blob_types = F.col("blob_types")

    def typed(text_map: Column) -> Column:
        return F.transform_values(text_map, lambda k, v: _typed_value(v, blob_types[k]))

    spark_types = F.map_filter(
        F.transform_values(blob_types, lambda k, t: _spark_type(t)), lambda k, t: t.isNotNull()
    )
    return fields.select(
        "*",
        typed(F.col("before_text")).alias("before_typed"),
        typed(F.col("after_text")).alias("after_typed"),
        F.when(F.size(spark_types) > 0, spark_types).alias("types"),
    )


def _failures(text_map: Column, typed_map: Column, blob_types: Column) -> tuple[Column, Column]:
    """(bad Base64, any conversion failure) for one image."""
    base64 = F.exists(
        F.map_keys(text_map),
        lambda k: text_map[k].isNotNull() & typed_map[k].isNull() & (blob_types[k] == "BYTES"),
    )
    other = failed_conversions(text_map, typed_map)
    return F.coalesce(base64, F.lit(False)), F.coalesce(other, F.lit(False))


def _classified(staged: DataFrame) -> DataFrame:
    """Stage 3: kind and reason per message, its row image, and an update's own before image."""
    op = F.col("op")
    # INSERT/UPDATE carry their row in `after`; DELETE and the first half of a split update in
    # `before` (or, when only `after` is there, in `after`).
    row_from_after = op.isin(*_AFTER_OPS) | (op.isin("DELETE", *_BEFORE_HALF_OPS) & ~F.col("before_present"))
    row_text = F.when(row_from_after, F.col("after_text")).otherwise(F.col("before_text"))
    row_typed = F.when(row_from_after, F.col("after_typed")).otherwise(F.col("before_typed"))
    row_present = F.col("after_present") | (~op.isin(*_AFTER_OPS) & F.col("before_present"))
    row_obj = F.when(row_from_after, F.col("after_obj")).otherwise(F.col("before_obj"))
    # An UPDATE_AFTER that carries its before image in the same message.
    own_before = op.isin(*_UPDATE_OPS) & F.col("before_present")
    row_base64, row_failed = _failures(row_text, row_typed, F.col("blob_types"))
    own_base64, own_failed = _failures(F.col("before_text"), F.col("before_typed"), F.col("blob_types"))
    has_row = op != "TRUNCATE"

    kind, reason = classify(
        (F.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
        (op.isNull() | (F.trim(op) == ""), KIND_QUARANTINED, Q_MISSING_OP),
        *[(op == name, KIND_IGNORED, why) for name, why in _IGNORED_OPS.items()],
        (~op.isin(*_ROW_OPS), KIND_QUARANTINED, Q_UNKNOWN_OP),
        (F.col("seq_bad") | F.col("time_bad"), KIND_QUARANTINED, Q_TYPE_MISMATCH),
        (F.col("table").isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
        ((op == "DELETE") & ~row_present, KIND_QUARANTINED, Q_KEY_UNKNOWN),
        (has_row & ~row_present, KIND_QUARANTINED, Q_MISSING_IMAGE),
        (has_row & (~row_obj | (own_before & ~F.col("before_obj"))), KIND_QUARANTINED, Q_IMAGE_NOT_OBJECT),
        (has_row & (row_base64 | (own_before & own_base64)), KIND_QUARANTINED, Q_BAD_BASE64),
        (has_row & (row_failed | (own_before & own_failed)), KIND_QUARANTINED, Q_TYPE_MISMATCH),
        (op.isin(*_BEFORE_HALF_OPS), KIND_IGNORED, IGNORED_UPDATE_BEFORE),
    )
    read_bad = F.col("bad").isNotNull()
    return staged.select(
        "file",
        "file_pos",
        "line",
        "text",
        "op",
        "table",
        "seq",
        "event_ms",
        "key_cols",
        "types",
        F.when(read_bad, F.lit(KIND_QUARANTINED)).otherwise(kind).alias("kind"),
        F.when(read_bad, F.col("bad")).otherwise(reason).alias("reason"),
        row_typed.alias("row"),
        F.when(own_before, F.col("before_typed")).alias("own_before"),
    )


def _events(fields: DataFrame) -> DataFrame:
    classified = _classified(_typed_images(fields))
    before_half = (F.col("reason") == IGNORED_UPDATE_BEFORE) & F.col("seq").isNotNull()
    after_half = (
        (F.col("kind") == KIND_CHANGE)
        & F.col("op").isin(*_UPDATE_OPS)
        & F.col("own_before").isNull()
        & F.col("seq").isNotNull()
    )
    paired = attach_before_images(
        classified,
        before_half=before_half,
        after_half=after_half,
        group=[F.col("table"), F.col("seq")],
        image=F.col("row"),
        order=F.struct("file", "file_pos"),
    )
    return paired.select(*canonical(**_canonical_columns()))


def _canonical_columns() -> dict[str, Column]:
    op = F.col("op")
    is_change = F.col("kind") == KIND_CHANGE
    full_load = F.col("seq") == F.lit(FULL_LOAD_SEQUENCE_ID)
    op_name = (
        F.when(op == "INSERT", F.when(full_load, F.lit(OP_READ)).otherwise(F.lit(OP_INSERT)))
        .when(op.isin(*_UPDATE_OPS), F.lit(OP_UPDATE))
        .when(op == "DELETE", F.lit(OP_DELETE))
        .when(op == "TRUNCATE", F.lit(OP_TRUNCATE))
    )
    is_row = is_change & (op != "TRUNCATE")
    return {
        "table": F.col("table"),
        "kind": F.col("kind"),
        "op": F.when(is_change, op_name),
        "reason": F.col("reason"),
        "event_ms": F.col("event_ms"),
        "log_pos": F.when(F.col("seq").isNotNull(), F.array(F.col("seq"))),
        "sub_pos": F.lit(0),
        "before": F.when(is_change & (op == "DELETE"), F.col("row")).when(
            is_change & op.isin(*_UPDATE_OPS), F.coalesce(F.col("own_before"), F.col("paired_before"))
        ),
        "after": F.when(is_change & op.isin(*_AFTER_OPS), F.col("row")),
        "partial": F.when(is_row, F.lit(False)),
        "key_cols": F.when(is_change, F.col("key_cols")),
        "types": F.when(is_row, F.col("types")),
        "file": F.col("file"),
        "file_pos": F.col("file_pos"),
        "line": F.col("line"),
        "raw": F.col("text"),
    }

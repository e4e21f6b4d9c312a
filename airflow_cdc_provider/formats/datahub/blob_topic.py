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
* Transactions (``--whole-transactions`` only): records carry no transaction id, so the row
  changes between a TRANSACTION_BEGIN and the next TRANSACTION_END of the same file are one
  transaction, named by the file and the BEGIN's place in it. A BEGIN whose END has not landed
  in that file (before the next BEGIN) leaves its transaction unfinished: held back.
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
from airflow_cdc_provider.formats.common.values import failed_conversions, text_to_variant
from airflow_cdc_provider.formats.datahub.pairing import attach_before_images
from airflow_cdc_provider.formats.events import (
    IGNORED_DDL,
    IGNORED_HEARTBEAT,
    IGNORED_TOMBSTONE,
    IGNORED_TRANSACTION,
    IGNORED_UPDATE_BEFORE,
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
    qualified_table,
)
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile
from airflow_cdc_provider.spark.sqlexpr import Expr

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
    transaction_ids = True  # from the TRANSACTION_BEGIN/END markers (see the module docstring)

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        parsed = parse_json_records(spark, files, BLOB_SCHEMA)
        return _events(_fields(parsed), options.whole_transactions)


def _image_parts(image: Expr, name: str) -> list[Expr]:
    """The raw pieces of one ``payload.before/after`` variant, each extracted once."""
    return [
        image.alias(name),
        E.try_variant_get(image, "$.dataColumn", "variant").alias(name + "_data"),
        E.try_variant_get(image, "$.dataColumn", "map<string,string>").alias(name + "_map"),
    ]


def _image_state(name: str) -> list[Expr]:
    """``<name>_present``, ``<name>_obj`` and ``<name>_text`` (``dataColumn`` as a text map).

    Absent means missing, JSON null, ``{}`` or ``{"dataColumn": null}``; ``"x"`` or
    ``{"dataColumn": [1]}`` is present but not an object. Values become their text (numbers as
    written, objects and arrays as JSON) for the typed conversion.
    """
    image, data, text_map = E.col(name), E.col(name + "_data"), E.col(name + "_map")
    given = image.isNotNull() & ~E.is_variant_null(image)
    data_given = data.isNotNull() & ~E.is_variant_null(data)
    # Only an image without `dataColumn` needs the (whole-value) type check.
    outer_is_object = E.when(data.isNotNull(), E.lit(True)).otherwise(
        E.substring(E.schema_of_variant(image), 1, 6) == "OBJECT"
    )
    present = E.coalesce(given & (~outer_is_object | data_given), E.lit(False))
    is_object = E.coalesce(given & data_given & text_map.isNotNull(), E.lit(False))
    return [
        present.alias(name + "_present"),
        is_object.alias(name + "_obj"),
        E.when(is_object, text_map).alias(name + "_text"),
    ]


def _typed_value(text: Expr, blob_type: Expr) -> Expr:
    """One value to a typed variant; DATE is epoch ms (a timestamp text is accepted too)."""
    date_ms = E.trim(text).try_cast("bigint")
    as_date = E.when(date_ms.isNotNull(), E.timestamp_millis(date_ms)).otherwise(E.try_to_timestamp(text))
    spark_type = _spark_type(blob_type)
    return E.when(text.isNotNull() & (blob_type == "DATE"), as_date.cast("variant")).otherwise(
        text_to_variant(text, spark_type)
    )


def _spark_type(blob_type: Expr) -> Expr:
    types = list(BLOB_TYPES.items())
    out = E.when(blob_type == types[0][0], E.lit(types[0][1]))
    for name, spark_type in types[1:]:
        out = out.when(blob_type == name, E.lit(spark_type))
    return out


def _declared_types(columns: Expr) -> Expr:
    """``name -> BLOB type`` from ``schema.dataColumn`` (first declaration of a name wins)."""
    names = E.transform(columns, lambda c: c["name"])
    first = E.filter(
        columns, lambda c, i: c["name"].isNotNull() & (E.array_position(names, c["name"]) == i + 1)
    )
    return E.map_from_entries(
        E.transform(
            first, lambda c: E.struct(c["name"].alias("name"), E.upper(E.trim(c["type"])).alias("type"))
        )
    )


def _fields(parsed: DataFrame) -> DataFrame:
    """Stage 1: the message's fields and both images as text maps (each computed once per record)."""
    j = E.col("j")
    payload = j["payload"]
    source = j["schema"]["source"]
    table_parts = [E.nullif(E.trim(source[n]), E.lit("")) for n in ("dbName", "schemaName", "tableName")]
    seq_text = E.trim(payload["sequenceId"])
    timestamps = payload["timestamp"]
    event_text = E.coalesce(E.trim(timestamps["eventTime"]), E.trim(timestamps["systemTime"]))
    keys = j["schema"]["primaryKey"]
    extracted = parsed.select(
        "file",
        "file_pos",
        "line",
        "text",
        "bad",
        "tombstone",
        *E.columns(
            payload["op"].alias("op"),
            E.when(table_parts[2].isNotNull(), qualified_table(*table_parts)).alias("table"),
            seq_text.alias("seq_text"),
            event_text.alias("event_text"),
            E.when(E.size(keys) > 0, keys).alias("key_cols"),
            _declared_types(j["schema"]["dataColumn"]).alias("blob_types"),
            *_image_parts(payload["before"], "before"),
            *_image_parts(payload["after"], "after"),
        ),
    )
    seq_text, event_text = E.col("seq_text"), E.col("event_text")
    seq, event_ms = seq_text.try_cast("bigint"), event_text.try_cast("bigint")
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
        *E.columns(
            seq.alias("seq"),
            (seq_text.isNotNull() & (seq_text != "") & seq.isNull()).alias("seq_bad"),
            event_ms.alias("event_ms"),
            (event_text.isNotNull() & (event_text != "") & event_ms.isNull()).alias("time_bad"),
            *_image_state("before"),
            *_image_state("after"),
        ),
    )


def _typed_images(fields: DataFrame) -> DataFrame:
    """Stage 2: both images typed by the declared types, and the declared Spark types."""
    blob_types = E.col("blob_types")

    def typed(text_map: Expr) -> Expr:
        return E.transform_values(text_map, lambda k, v: _typed_value(v, blob_types[k]))

    spark_types = E.map_filter(
        E.transform_values(blob_types, lambda k, t: _spark_type(t)), lambda k, t: t.isNotNull()
    )
    return fields.select(
        "*",
        *E.columns(
            typed(E.col("before_text")).alias("before_typed"),
            typed(E.col("after_text")).alias("after_typed"),
            E.when(E.size(spark_types) > 0, spark_types).alias("types"),
        ),
    )


def _failures(text_map: Expr, typed_map: Expr, blob_types: Expr) -> tuple[Expr, Expr]:
    """(bad Base64, any conversion failure) for one image."""
    base64 = E.exists(
        E.map_keys(text_map),
        lambda k: text_map[k].isNotNull() & typed_map[k].isNull() & (blob_types[k] == "BYTES"),
    )
    other = failed_conversions(text_map, typed_map)
    return E.coalesce(base64, E.lit(False)), E.coalesce(other, E.lit(False))


def _classified(staged: DataFrame) -> DataFrame:
    """Stage 3: kind and reason per message, its row image, and an update's own before image."""
    op = E.col("op")
    # INSERT/UPDATE carry their row in `after`; DELETE and the first half of a split update in
    # `before` (or, when only `after` is there, in `after`).
    row_from_after = op.isin(*_AFTER_OPS) | (op.isin("DELETE", *_BEFORE_HALF_OPS) & ~E.col("before_present"))
    row_text = E.when(row_from_after, E.col("after_text")).otherwise(E.col("before_text"))
    row_typed = E.when(row_from_after, E.col("after_typed")).otherwise(E.col("before_typed"))
    row_present = E.col("after_present") | (~op.isin(*_AFTER_OPS) & E.col("before_present"))
    row_obj = E.when(row_from_after, E.col("after_obj")).otherwise(E.col("before_obj"))
    # An UPDATE_AFTER that carries its before image in the same message.
    own_before = op.isin(*_UPDATE_OPS) & E.col("before_present")
    row_base64, row_failed = _failures(row_text, row_typed, E.col("blob_types"))
    own_base64, own_failed = _failures(E.col("before_text"), E.col("before_typed"), E.col("blob_types"))
    has_row = op != "TRUNCATE"

    kind, reason = classify(
        (E.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
        (op.isNull() | (E.trim(op) == ""), KIND_QUARANTINED, Q_MISSING_OP),
        *[(op == name, KIND_IGNORED, why) for name, why in _IGNORED_OPS.items()],
        (~op.isin(*_ROW_OPS), KIND_QUARANTINED, Q_UNKNOWN_OP),
        (E.col("seq_bad") | E.col("time_bad"), KIND_QUARANTINED, Q_TYPE_MISMATCH),
        (E.col("table").isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
        ((op == "DELETE") & ~row_present, KIND_QUARANTINED, Q_KEY_UNKNOWN),
        (has_row & ~row_present, KIND_QUARANTINED, Q_MISSING_IMAGE),
        (has_row & (~row_obj | (own_before & ~E.col("before_obj"))), KIND_QUARANTINED, Q_IMAGE_NOT_OBJECT),
        (has_row & (row_base64 | (own_before & own_base64)), KIND_QUARANTINED, Q_BAD_BASE64),
        (has_row & (row_failed | (own_before & own_failed)), KIND_QUARANTINED, Q_TYPE_MISMATCH),
        (op.isin(*_BEFORE_HALF_OPS), KIND_IGNORED, IGNORED_UPDATE_BEFORE),
    )
    read_bad = E.col("bad").isNotNull()
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
        *E.columns(
            E.when(read_bad, E.lit(KIND_QUARANTINED)).otherwise(kind).alias("kind"),
            E.when(read_bad, E.col("bad")).otherwise(reason).alias("reason"),
            row_typed.alias("row"),
            E.when(own_before, E.col("before_typed")).alias("own_before"),
        ),
    )


def _transactions(events: DataFrame) -> DataFrame:
    """``tx_id`` and ``tx_end`` of the row changes between a file's TRANSACTION_BEGIN and END markers.

    One window over each file in landing order: the latest BEGIN and END at or before a record
    say whether it is inside a transaction (and which); the next ones after it whether that
    transaction's END landed. Every change of a transaction carries the same ``tx_end``, so
    ``transactions.with_transaction_times`` holds back one whose END never came.
    """
    upto = "PARTITION BY `file` ORDER BY `file_pos` ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
    onward = "PARTITION BY `file` ORDER BY `file_pos` ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING"
    op = E.col("op")
    begin = E.when(op == "TRANSACTION_BEGIN", E.col("file_pos"))
    end = E.when(op == "TRANSACTION_END", E.col("file_pos"))
    marked = events.select(
        "*",
        *E.columns(
            E.max(begin).over(upto).alias("_begun"),
            E.max(end).over(upto).alias("_ended"),
            E.min(begin).over(onward).alias("_next_begin"),
            E.min(end).over(onward).alias("_next_end"),
        ),
    )
    begun, ended = E.col("_begun"), E.col("_ended")
    inside = (E.col("kind") == KIND_CHANGE) & begun.isNotNull() & (ended.isNull() | (ended < begun))
    next_begin, next_end = E.col("_next_begin"), E.col("_next_end")
    closed = next_end.isNotNull() & (next_begin.isNull() | (next_end < next_begin))
    return marked.select(
        "*",
        *E.columns(
            E.when(inside, E.concat_ws(":", E.col("file"), begun.cast("string"))).alias("tx_id"),
            E.when(inside, closed).alias("tx_end"),
        ),
    ).drop("_begun", "_ended", "_next_begin", "_next_end")


def _events(fields: DataFrame, whole_transactions: bool) -> DataFrame:
    classified = _classified(_typed_images(fields))
    before_half = (E.col("reason") == IGNORED_UPDATE_BEFORE) & E.col("seq").isNotNull()
    after_half = (
        (E.col("kind") == KIND_CHANGE)
        & E.col("op").isin(*_UPDATE_OPS)
        & E.col("own_before").isNull()
        & E.col("seq").isNotNull()
    )
    paired = attach_before_images(
        classified,
        before_half=before_half,
        after_half=after_half,
        group=[E.col("table"), E.col("seq")],
        image=E.col("row"),
        order=E.struct("file", "file_pos"),
    )
    if not whole_transactions:
        return paired.select(*canonical(**_canonical_columns()))
    in_tx = _transactions(paired)
    return in_tx.select(*canonical(**_canonical_columns(), tx_id=E.col("tx_id"), tx_end=E.col("tx_end")))


def _canonical_columns() -> dict[str, Expr]:
    op = E.col("op")
    is_change = E.col("kind") == KIND_CHANGE
    full_load = E.col("seq") == FULL_LOAD_SEQUENCE_ID
    op_name = (
        E.when(op == "INSERT", E.when(full_load, E.lit(OP_READ)).otherwise(E.lit(OP_INSERT)))
        .when(op.isin(*_UPDATE_OPS), E.lit(OP_UPDATE))
        .when(op == "DELETE", E.lit(OP_DELETE))
        .when(op == "TRUNCATE", E.lit(OP_TRUNCATE))
    )
    is_row = is_change & (op != "TRUNCATE")
    return {
        "table": E.col("table"),
        "kind": E.col("kind"),
        "op": E.when(is_change, op_name),
        "reason": E.col("reason"),
        "event_ms": E.col("event_ms"),
        "log_pos": E.when(E.col("seq").isNotNull(), E.array(E.col("seq"))),
        "sub_pos": E.lit(0),
        "before": E.when(is_change & (op == "DELETE"), E.col("row")).when(
            is_change & op.isin(*_UPDATE_OPS), E.coalesce(E.col("own_before"), E.col("paired_before"))
        ),
        "after": E.when(is_change & op.isin(*_AFTER_OPS), E.col("row")),
        "partial": E.when(is_row, E.lit(False)),
        "key_cols": E.when(is_change, E.col("key_cols")),
        "types": E.when(is_row, E.col("types")),
        "raw": E.col("text"),
    }

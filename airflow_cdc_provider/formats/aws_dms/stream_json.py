"""AWS DMS's Kafka and Kinesis targets: JSON lines, one row change per record.

A record is ``{"data": {...}, "metadata": {"timestamp", "record-type", "operation", "schema-name",
"table-name", "transaction-id", ...}}``. ``data`` columns named ``BI_<column>`` (and a
``before-image`` object beside ``data``) are an update's before image, never columns of the
snapshot. ``record-type`` ``control`` records (create-table, drop-table, column changes) are DDL,
ignored. A change's time is ``metadata.timestamp``.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StringType, StructField, StructType

from airflow_cdc_provider.formats.aws_dms.definitions import Catalog
from airflow_cdc_provider.formats.aws_dms.ordering import position
from airflow_cdc_provider.formats.common.jsonlines import CORRUPT, images_not_objects, parse_json_records
from airflow_cdc_provider.formats.events import (
    IGNORED_DDL,
    IGNORED_TOMBSTONE,
    IMAGE_TYPE,
    KIND_CHANGE,
    KIND_IGNORED,
    KIND_QUARANTINED,
    OP_DELETE,
    OP_INSERT,
    OP_READ,
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
    qualified_table,
)
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile
from airflow_cdc_provider.spark.sqlexpr import Expr

BEFORE_PREFIX = "BI_"
BEFORE_IMAGE_FIELD = "before-image"

_JSON_OPS = {"load": OP_READ, "insert": OP_INSERT, "update": OP_UPDATE, "delete": OP_DELETE}
_METADATA_FIELDS = (
    "timestamp",
    "record-type",
    "operation",
    "partition-key-type",
    "schema-name",
    "table-name",
    "transaction-id",
)
RECORD_SCHEMA = StructType(
    [
        StructField("data", IMAGE_TYPE),
        StructField("metadata", StructType([StructField(n, StringType()) for n in _METADATA_FIELDS])),
        StructField(BEFORE_IMAGE_FIELD, IMAGE_TYPE),
    ]
)


def json_events(spark: SparkSession, files: list[LandedFile], catalog: Catalog) -> DataFrame:
    """The canonical event of each JSON record: its op, table and time read once (``_record_fields``),
    then classified (``_classified``) and laid out as the event."""
    staged = _record_fields(parse_json_records(spark, files, RECORD_SCHEMA))
    kind, reason = _classified()
    op, row, stamp = E.col("_op"), E.col("_row"), E.col("_stamp")
    # The before image: the BI_ columns, or a before-image object.
    before = E.coalesce(E.col(f"j.{BEFORE_IMAGE_FIELD}"), E.when(E.size("_bi") > 0, E.col("_bi")))
    is_change = kind == KIND_CHANGE
    return staged.select(
        *canonical(
            table=E.col("_table"),
            kind=kind,
            op=E.when(is_change, op),
            reason=reason,
            event_ms=E.unix_millis(stamp),
            log_pos=position(op == OP_READ, E.unix_micros(stamp)),
            sub_pos=E.lit(0),
            tx_id=_metadata()["transaction-id"],
            before=E.when(is_change & (op == OP_DELETE), row).when(is_change & (op == OP_UPDATE), before),
            after=E.when(is_change & (op != OP_DELETE), row),
            partial=E.lit(False),
            key_cols=_definition_keys(catalog, E.col("_table")),
            raw=E.col("text"),
        )
    )


def _metadata() -> Expr:
    """The record's ``metadata`` object: every field of it is read as text."""
    return E.col("j.metadata")


def _record_type() -> Expr:
    """``record-type`` (``data``, ``control``), trimmed and lower-cased."""
    return E.lower(E.trim(_metadata()["record-type"]))


def _operation() -> Expr:
    """``operation`` (``load``, ``insert``, ``update``, ``delete``), trimmed and lower-cased."""
    return E.lower(E.trim(_metadata()["operation"]))


def _record_fields(parsed: DataFrame) -> DataFrame:
    """``parsed`` with the record's op (``_op``), table (``_table``), time (``_stamp``), and ``data``
    split into the row (``_row``) and its BI_ columns (``_bi``): each computed once, read by name."""
    meta = _metadata()
    op = E.null("string")
    for code, name in _JSON_OPS.items():
        op = E.when(_operation() == code, E.lit(name)).otherwise(op)
    table_name = E.nullif(E.trim(meta["table-name"]), E.lit(""))
    table = E.when(
        table_name.isNotNull(), qualified_table(E.nullif(E.trim(meta["schema-name"]), E.lit("")), table_name)
    )
    stamp = E.try_to_timestamp(meta["timestamp"])
    before_columns, row = _before_columns_split(E.col("j.data"), E.col("text"))
    return parsed.select(
        "*",
        *E.columns(
            op.alias("_op"),
            table.alias("_table"),
            stamp.alias("_stamp"),
            before_columns.alias("_bi"),
            row.alias("_row"),
        ),
    )


def _before_columns_split(data: Expr, text: Expr) -> tuple[Expr, Expr]:
    """The BI_ columns of ``data`` (prefix dropped), and the row without them.

    The walks over ``data`` run only where the text names a BI_ column (or escapes a character,
    which could spell one): most records, inserts and deletes, have none.
    """
    may_hold_before = text.contains(f'"{BEFORE_PREFIX}') | text.contains("\\u")
    before_columns = E.when(
        may_hold_before,
        E.transform_keys(
            E.map_filter(data, lambda k, v: k.startswith(BEFORE_PREFIX)),
            lambda k, v: E.substring(k, len(BEFORE_PREFIX) + 1, 1 << 20),
        ),
    )
    row = E.when(may_hold_before, E.map_filter(data, lambda k, v: ~k.startswith(BEFORE_PREFIX))).otherwise(
        data
    )
    return before_columns, row


def _classified() -> tuple[Expr, Expr]:
    """``(kind, reason)`` of a record staged by ``_record_fields``: a row change, an ignored record
    (tombstone, DDL) or a quarantined one, the first rule that holds deciding."""
    meta, data, bad = _metadata(), E.col("j.data"), E.col("bad")
    op, record_type = E.col("_op"), _record_type()
    return classify(
        (E.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
        (
            images_not_objects(bad, E.col(f"j.{CORRUPT}"), "$.data", f"$['{BEFORE_IMAGE_FIELD}']"),
            KIND_QUARANTINED,
            Q_IMAGE_NOT_OBJECT,
        ),
        (bad.isNotNull(), KIND_QUARANTINED, bad),
        (record_type == "control", KIND_IGNORED, IGNORED_DDL),
        (_operation().isNull(), KIND_QUARANTINED, Q_MISSING_OP),
        (op.isNull() | (record_type.isNotNull() & (record_type != "data")), KIND_QUARANTINED, Q_UNKNOWN_OP),
        (E.col("_table").isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
        (meta["timestamp"].isNotNull() & E.col("_stamp").isNull(), KIND_QUARANTINED, Q_TYPE_MISMATCH),
        ((op != OP_DELETE) & data.isNull(), KIND_QUARANTINED, Q_MISSING_IMAGE),
        ((op == OP_DELETE) & data.isNull(), KIND_QUARANTINED, Q_KEY_UNKNOWN),
    )


def _definition_keys(catalog: Catalog, table: Expr) -> Expr:
    """Key columns the table definitions give (null where ``--key`` decides or none is defined)."""
    keyed = {name: keys for name in catalog.definitions if (keys := catalog.keys(name))}
    if not keyed:
        return E.null("array<string>")
    lookup = E.map(*[c for name, keys in keyed.items() for c in (E.lit(name), E.array(*map(E.lit, keys)))])
    return lookup[table]

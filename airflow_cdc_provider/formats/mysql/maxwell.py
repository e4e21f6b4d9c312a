"""Maxwell JSON: one row change per record, as Maxwell's daemon writes MySQL binlog rows.

``data`` is the row after the change (the deleted row for a delete) and ``old`` holds the previous
values of only the columns that changed, so the before image of an update is ``data`` overlaid
with ``old`` (a key column in ``old`` moves the row). The key is the record's
``primary_key_columns`` (``output_primary_key_columns``), else an object ``primary_key``'s names,
else ``--key``. Values keep their JSON types (Maxwell declares none).

Order: the binlog ``position`` (``master.000003:1234``, ``output_binlog_position``) as
``[1, file number, offset, row]``, else ``[0, ts, xid, row]``; ``row`` is ``xoffset``, and the
``commit: true`` row of a transaction, which Maxwell writes without ``xoffset``, comes after its
other rows. Records without a position therefore order before those with one. ``ts`` is in
seconds (13 digits and more: milliseconds).

``bootstrap-insert`` rows are a full load (op read); ``bootstrap-start`` and ``bootstrap-complete``
are ignored markers. DDL records (``output_ddl``: ``table-create``, ``table-alter``,
``database-create`` ...) are ignored as DDL; the columns an ``ALTER TABLE`` in their ``sql`` adds or
drops take effect as for Canal (``formats.ddl``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import ArrayType, MapType, StringType, StructField, StructType, VariantType

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.common.ddl import added_columns, dropped_columns
from airflow_cdc_provider.formats.common.jsonlines import images_not_objects, parse_json_records
from airflow_cdc_provider.formats.common.values import digits_number, object_map
from airflow_cdc_provider.formats.events import (
    IGNORED_BOOTSTRAP,
    IGNORED_DDL,
    IGNORED_TOMBSTONE,
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
    empty_image,
    overlay,
    qualified_table,
)
from airflow_cdc_provider.formats.mysql.declared_types import declared_types
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile
from airflow_cdc_provider.spark.sqlexpr import Expr

_IMAGE = MapType(StringType(), VariantType())
RECORD_SCHEMA = StructType(
    [
        StructField("database", StringType()),
        StructField("table", StringType()),
        StructField("type", StringType()),
        # Read as text and converted with try_cast: an odd value never costs the whole record.
        StructField("ts", StringType()),
        StructField("xid", StringType()),
        StructField("xoffset", StringType()),
        StructField("commit", StringType()),
        StructField("position", StringType()),
        # Images as maps keep their columns in the order the record writes them; an image that is
        # not an object fails the parse and is diagnosed from the record's text.
        StructField("data", _IMAGE),
        StructField("old", _IMAGE),
        StructField("primary_key_columns", ArrayType(StringType())),
        StructField("primary_key", VariantType()),
        StructField("sql", StringType()),
    ]
)

_ROW_OPS = {"insert": OP_INSERT, "update": OP_UPDATE, "delete": OP_DELETE, "bootstrap-insert": OP_READ}
_BOOTSTRAP_MARKERS = ("bootstrap-start", "bootstrap-complete")
_DDL_TYPES = (
    "database-create",
    "database-alter",
    "database-drop",
    "table-create",
    "table-alter",
    "table-drop",
    "ddl",
)
# The commit row of a transaction carries no xoffset: it is the transaction's last row.
_COMMIT_ROW = 1 << 62


def seconds_or_millis(text: Expr) -> Expr:
    """Maxwell's ``ts`` as epoch ms: seconds, or milliseconds when it has 13 digits or more."""
    t = E.trim(text)
    number = t.try_cast("bigint")
    return E.when(t.rlike(r"^\d{13,}$"), number).otherwise(E.try_multiply(number, 1000))


_POSITION = r"^\s*\S*?(\d+)\s*:\s*(\d+)\s*$"
# Java's \s: the whitespace the pattern allows around the parts.
_SPACES = (" ", "\t", "\n", "\x0b", "\f", "\r")


def binlog_position(position: Expr) -> Expr:
    """``master.000003:1234`` -> ``[3, 1234]``; null when it does not read so.

    The rule is the pattern ``_POSITION``: the offset is the digits after the last colon, the file
    number the digits that end the file name before it. A regular expression costs two matches a
    record, more than the rest of reading it, so the usual shape (no spaces, the number after the
    name's last dot) is read with plain string functions and only other texts take the pattern.
    """
    offset_text = E.substring_index(position, E.lit(":"), -1)
    name = E.substring(position, 1, E.length(position) - E.length(offset_text) - 1)
    number, offset = digits_number(E.substring_index(name, E.lit("."), -1)), digits_number(offset_text)
    plain = position.contains(":")
    for space in _SPACES:
        plain = plain & ~position.contains(space)
    pattern_number = E.regexp_extract(position, _POSITION, 1).try_cast("bigint")
    pattern_offset = E.regexp_extract(position, _POSITION, 2).try_cast("bigint")
    return E.when(plain & number.isNotNull() & offset.isNotNull(), E.array(number, offset)).when(
        pattern_number.isNotNull() & pattern_offset.isNotNull(), E.array(pattern_number, pattern_offset)
    )


class MaxwellJsonDecoder(Decoder):
    name = "maxwell-json"
    description = (
        "Maxwell JSON (data/old, ts in seconds, xid/xoffset/commit, binlog position): key from "
        "primary_key_columns, bootstrap-insert as full load, DDL records ignored"
    )
    needs = "--key (when records carry no primary_key_columns)"
    transaction_ids = True

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        parsed = parse_json_records(spark, files, RECORD_SCHEMA)
        return self._events(self._records(parsed))

    @staticmethod
    def _records(parsed: DataFrame) -> DataFrame:
        j = E.col("j")
        # The time and the binlog position feed several columns: computed once, in their own projection.
        timed = parsed.select(
            "*",
            *E.columns(
                seconds_or_millis(j["ts"]).alias("_ts_ms"), binlog_position(j["position"]).alias("_binlog")
            ),
        )
        type_ = E.lower(E.trim(j["type"]))
        is_ddl = type_.isin(*_DDL_TYPES)
        ts_ms = E.col("_ts_ms")
        xid = E.trim(j["xid"]).try_cast("bigint")
        commit = E.lower(E.trim(j["commit"])) == "true"
        row = E.coalesce(
            E.trim(j["xoffset"]).try_cast("bigint"),
            E.when(commit, E.lit(_COMMIT_ROW).cast("bigint")),
            E.lit(0).cast("bigint"),
        )
        binlog = E.col("_binlog")
        log_pos = E.when(
            j["position"].isNotNull(), E.concat(E.array(E.lit(1).cast("bigint")), binlog, E.array(row))
        ).when(ts_ms.isNotNull(), E.array(E.lit(0).cast("bigint"), E.floor(ts_ms / 1000), xid, row))
        pk = j["primary_key"]
        pk_names = E.map_keys(object_map(pk))  # null unless primary_key is an object
        key_cols = E.coalesce(
            E.when(E.size(j["primary_key_columns"]) > 0, j["primary_key_columns"]),
            E.when(E.size(pk_names) > 0, pk_names),
        )
        return timed.select(
            "file",
            "file_pos",
            "line",
            "text",
            "tombstone",
            "bad",
            *E.columns(
                j["type"].alias("type_text"),
                type_.alias("type"),
                is_ddl.alias("is_ddl"),
                E.when(~is_ddl, E.lookup(_ROW_OPS, type_)).alias("op"),
                E.when(j["table"].isNotNull(), qualified_table(j["database"], j["table"])).alias("table"),
                j["ts"].alias("ts_text"),
                ts_ms.alias("event_ms"),
                log_pos.alias("log_pos"),
                (j["position"].isNotNull() & binlog.isNull()).alias("log_pos_unreadable"),
                j["xid"].alias("tx_id"),
                E.when(
                    j["xid"].isNotNull() | j["commit"].isNotNull(), E.coalesce(commit, E.lit(False))
                ).alias("tx_end"),
                key_cols.alias("key_cols"),
                j["data"].alias("data"),
                E.coalesce(j["old"], empty_image()).alias("old"),
                E.when(is_ddl, declared_types(added_columns(j["sql"]), E.null("map<string,string>"))).alias(
                    "ddl_types"
                ),
                E.when(is_ddl, dropped_columns(j["sql"])).alias("dropped"),
            ),
        )

    @staticmethod
    def _events(records: DataFrame) -> DataFrame:
        op, data, type_ = E.col("op"), E.col("data"), E.col("type")
        bad = E.col("bad")
        kind, reason = classify(
            (E.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
            (
                images_not_objects(bad, E.col("text"), "$.data", "$.old"),
                KIND_QUARANTINED,
                Q_IMAGE_NOT_OBJECT,
            ),
            (bad.isNotNull(), KIND_QUARANTINED, bad),
            (E.col("type_text").isNull() | (type_ == ""), KIND_QUARANTINED, Q_MISSING_OP),
            (E.col("is_ddl"), KIND_IGNORED, IGNORED_DDL),
            (type_.isin(*_BOOTSTRAP_MARKERS), KIND_IGNORED, IGNORED_BOOTSTRAP),
            (op.isNull(), KIND_QUARANTINED, Q_UNKNOWN_OP),
            (E.col("table").isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
            (E.col("ts_text").isNotNull() & E.col("event_ms").isNull(), KIND_QUARANTINED, Q_TYPE_MISMATCH),
            ((op == OP_DELETE) & data.isNull(), KIND_QUARANTINED, Q_KEY_UNKNOWN),
            (data.isNull(), KIND_QUARANTINED, Q_MISSING_IMAGE),
        )
        is_change = kind == KIND_CHANGE
        ddl = (kind == KIND_IGNORED) & (reason == IGNORED_DDL)
        before = E.when(op == OP_DELETE, data).when(op == OP_UPDATE, overlay(data, E.col("old")))
        return records.select(
            *canonical(
                table=E.col("table"),
                kind=kind,
                op=E.when(is_change, op),
                reason=reason,
                event_ms=E.col("event_ms"),
                log_pos=E.col("log_pos"),
                log_pos_unreadable=E.col("log_pos_unreadable"),
                sub_pos=E.lit(0),
                tx_id=E.col("tx_id"),
                tx_end=E.col("tx_end"),
                before=E.when(is_change, before).when(ddl, E.col("dropped")),
                after=E.when(is_change & (op != OP_DELETE), data),
                partial=E.lit(False),
                key_cols=E.col("key_cols"),
                types=E.when(ddl, E.col("ddl_types")),
                raw=E.col("text"),
            )
        )

"""Shareplex JSON as Alibaba DTS writes it: ``meta`` (op, time, scn, trans, seq, rowid, table), ``data``, ``key``.

An update carries only the changed columns in ``data`` and the row's old identifying values in
``key``: the after image is ``key`` overlaid with ``data`` (columns absent from both keep their
value: partial image) and the before image is ``key``, so a key change moves the row. The Oracle
row address ``meta.rowid`` is no column of the source table: it is put into the images as column
``rowid`` only where ``--key`` makes it the key (tables without a key) or ``--with-metadata`` asks
for source metadata. ``UPDATE BEFORE`` / ``UPDATE AFTER`` pairs are joined inside their
transaction: the AFTER event gets the BEFORE record's values as its before image and the BEFORE
record itself is counted as ignored. ``DROP COLUMN`` is a DDL event whose ``before`` image names
the dropped columns. Shareplex declares no types: values keep their JSON types.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import MapType, StringType, StructField, StructType, VariantType

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.events import (
    IGNORED_DDL,
    IGNORED_TOMBSTONE,
    IGNORED_UPDATE_BEFORE,
    KIND_CHANGE,
    KIND_IGNORED,
    KIND_QUARANTINED,
    OP_DELETE,
    OP_INSERT,
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
)
from airflow_cdc_provider.formats.jsonlines import images_not_objects, parse_json_records
from airflow_cdc_provider.formats.landed_files import LandedFile

_META_FIELDS = ("time", "userid", "op", "scn", "rowid", "trans", "seq", "size", "table", "idx", "posttime")
RECORD_SCHEMA = StructType(
    [
        StructField("meta", StructType([StructField(name, StringType()) for name in _META_FIELDS])),
        # Images as maps keep their columns in the order the record writes them (a variant object
        # would sort them by name); an image that is not an object fails the parse and is diagnosed
        # from the record's text (jsonlines.images_not_objects).
        StructField("data", MapType(StringType(), VariantType())),
        StructField("key", MapType(StringType(), VariantType())),
    ]
)

# Ignored-record reason for an UPDATE BEFORE record: its values travel in the paired UPDATE AFTER event.
IGNORED_UPDATE_BEFORE = IGNORED_UPDATE_BEFORE
ROWID_COLUMN = "rowid"

_BEFORE = "update before"
_AFTER = "update after"
_DROP_COLUMN = "drop column"
# meta.op as written (upper-cased, runs of blanks/underscores as one blank) -> what it does.
_OPS = {
    "INS": OP_INSERT,
    "INSERT": OP_INSERT,
    "UPD": OP_UPDATE,
    "UPDATE": OP_UPDATE,
    "DEL": OP_DELETE,
    "DELETE": OP_DELETE,
    "TRUNCATE": OP_TRUNCATE,
    "TRUNC": OP_TRUNCATE,
    "DROP COLUMN": _DROP_COLUMN,
    "DROPCOLUMN": _DROP_COLUMN,
    "UPDATE BEFORE": _BEFORE,
    "UPD BEFORE": _BEFORE,
    "UPDATEBEFORE": _BEFORE,
    "UPDATE AFTER": _AFTER,
    "UPD AFTER": _AFTER,
    "UPDATEAFTER": _AFTER,
}
_IMAGE = "map<string,variant>"


def _lookup(table: dict[str, str], key: Column) -> Column:
    literal = F.create_map(*[F.lit(x) for pair in table.items() for x in pair])
    return F.try_element_at(literal, key)


def _op(raw: Column) -> Column:
    normalised = F.regexp_replace(F.upper(F.trim(raw)), r"[\s_]+", " ")
    return _lookup(_OPS, normalised)


def event_millis(time: Column) -> Column:
    """``meta.time`` -> epoch ms. ISO text without an offset is UTC; digits are epoch seconds (ms if 13+)."""
    t = F.trim(time)
    digits = t.rlike(r"^\d+$")
    has_zone = t.rlike(r"(?i)(Z|[+-]\d{2}:?\d{2})$")
    instant = F.when(has_zone, t.try_cast("timestamp")).otherwise(
        F.concat(t, F.lit("Z")).try_cast("timestamp")
    )
    number = t.try_cast("bigint")
    return (
        F.when(digits & (F.length(t) >= 13), number)
        .when(digits, F.try_multiply(number, F.lit(1000)))
        .otherwise(F.unix_millis(instant))
    )


def transaction_number(trans: Column) -> Column:
    """``meta.trans`` as a number: digits as they are, Oracle ``usn.slot.sqn`` packed into 16+16+32 bits."""
    parts = F.regexp_extract_all(trans, F.lit(r"(\d+)"), 1)
    usn, slot, sqn = (F.try_element_at(parts, F.lit(i)).try_cast("bigint") for i in (1, 2, 3))
    fits = (usn < 1 << 15) & (slot < 1 << 16) & (sqn < 1 << 32)
    packed = F.shiftleft(usn, 48) + F.shiftleft(slot, 32) + sqn
    return F.when(trans.rlike(r"^\s*\d+\s*$"), F.trim(trans).try_cast("bigint")).when(
        trans.rlike(r"^\s*\d+\.\d+\.\d+\s*$") & fits, packed
    )


def _overlay(base: Column, top: Column) -> Column:
    """``base`` with the entries of ``top`` replacing or adding to it (``map_concat`` refuses duplicates).

    Replaced values keep their place in ``base`` and new columns follow, so an update's image keeps
    the row's column order (the key's) rather than moving the changed columns to the end.
    """
    replaced = F.transform_values(
        base, lambda k, v: F.when(F.map_contains_key(top, k), F.try_element_at(top, k)).otherwise(v)
    )
    return F.map_concat(replaced, F.map_filter(top, lambda k, v: ~F.map_contains_key(base, k)))


def _empty() -> Column:
    return F.create_map().cast(_IMAGE)


def rowid_wanted(options: DecodeOptions, table: Column) -> Column:
    """Whether ``table``'s rows carry ``rowid``: under ``--with-metadata``, or when its key includes it.

    The key is resolved as the engine resolves ``--key``: ``--key TABLE=COLS`` (the table's qualified
    name or its last part) overrides the default ``--key COLS``, the last matching entry winning.
    """
    if options.with_metadata:
        return F.lit(True)
    wanted = F.lit(ROWID_COLUMN in options.key_columns)
    for name, cols in options.table_keys.items():
        wanted = F.when((table == name) | table.endswith("." + name), F.lit(ROWID_COLUMN in cols)).otherwise(
            wanted
        )
    return F.coalesce(wanted, F.lit(False))


class ShareplexJsonDecoder(Decoder):
    name = "shareplex-json"
    description = (
        "Shareplex JSON as Alibaba DTS writes it (meta/data/key): partial update images, position scn/trans/seq, "
        "meta.rowid usable as key column rowid"
    )
    needs = "--key (or --key rowid)"
    partial_images = True

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        parsed = parse_json_records(spark, files, RECORD_SCHEMA)
        records = self._records(parsed, options)
        paired = self._paired(records)
        return self._events(paired)

    @staticmethod
    def _records(parsed: DataFrame, options: DecodeOptions) -> DataFrame:
        meta = F.col("j.meta")
        data, key = F.col("j.data"), F.col("j.key")
        idx = F.split(meta["idx"], "/")
        seq = F.coalesce(meta["seq"].try_cast("bigint"), F.try_element_at(idx, F.lit(1)).try_cast("bigint"))
        size = F.coalesce(meta["size"].try_cast("bigint"), F.try_element_at(idx, F.lit(2)).try_cast("bigint"))
        fallback_table = F.lit(options.table).cast("string")
        table = F.coalesce(meta["table"], fallback_table)
        # Only a rowid the rows carry may identify a row (a delete that names nothing else).
        rowid = F.when(rowid_wanted(options, table), meta["rowid"])
        return parsed.select(
            "file",
            "file_pos",
            "line",
            "text",
            "tombstone",
            "bad",
            meta["op"].alias("op_text"),
            _op(meta["op"]).alias("op"),
            table.alias("table"),
            meta["time"].alias("time_text"),
            event_millis(meta["time"]).alias("event_ms"),
            meta["scn"].try_cast("bigint").alias("scn"),
            transaction_number(meta["trans"]).alias("trans_number"),
            meta["trans"].alias("trans"),
            seq.alias("seq"),
            (seq == size).alias("tx_end"),
            rowid.alias("rowid"),
            F.when(rowid.isNotNull(), F.create_map(F.lit(ROWID_COLUMN), rowid.cast("variant")))
            .otherwise(_empty())
            .alias("rowid_image"),
            data.isNotNull().alias("has_data"),
            key.isNotNull().alias("has_key"),
            data.alias("data"),
            key.alias("key"),
        )

    @staticmethod
    def _paired(records: DataFrame) -> DataFrame:
        """Give each UPDATE AFTER the values of the UPDATE BEFORE just before it in its transaction."""
        pair_op = F.col("op").isin(_BEFORE, _AFTER)
        # Other records get a group of their own: they take part in the window but never pair.
        group = F.when(
            pair_op, F.coalesce(F.col("trans"), F.concat(F.lit("file "), F.col("file")))
        ).otherwise(F.concat(F.col("file"), F.lit(" "), F.col("file_pos").cast("string")))
        w = Window.partitionBy(F.col("table"), group).orderBy(F.col("seq"), F.col("file"), F.col("file_pos"))
        previous = F.lag(F.struct("op", "data", "key"), 1).over(w)
        paired_before = F.when(
            (F.col("op") == _AFTER) & (previous["op"] == _BEFORE),
            _overlay(F.coalesce(previous["key"], _empty()), F.coalesce(previous["data"], _empty())),
        )
        return records.select("*", paired_before.alias("paired_before"))

    @staticmethod
    def _events(paired: DataFrame) -> DataFrame:
        op, data, key = F.col("op"), F.col("data"), F.col("key")
        has_data, has_key = F.col("has_data"), F.col("has_key")
        kind, reason = classify(
            (F.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
            (
                images_not_objects(F.col("bad"), F.col("text"), "$.data", "$.key"),
                KIND_QUARANTINED,
                Q_IMAGE_NOT_OBJECT,
            ),
            (F.col("bad").isNotNull(), KIND_QUARANTINED, "<bad>"),
            (F.col("op_text").isNull() | (F.trim(F.col("op_text")) == ""), KIND_QUARANTINED, Q_MISSING_OP),
            (op.isNull(), KIND_QUARANTINED, Q_UNKNOWN_OP),
            (F.col("table").isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
            (F.col("time_text").isNotNull() & F.col("event_ms").isNull(), KIND_QUARANTINED, Q_TYPE_MISMATCH),
            (op == _DROP_COLUMN, KIND_IGNORED, IGNORED_DDL),
            (op == _BEFORE, KIND_IGNORED, IGNORED_UPDATE_BEFORE),
            (op.isin(OP_INSERT, OP_UPDATE, _AFTER) & ~has_data, KIND_QUARANTINED, Q_MISSING_IMAGE),
            (
                (op == OP_DELETE) & ~has_data & ~has_key & F.col("rowid").isNull(),
                KIND_QUARANTINED,
                Q_KEY_UNKNOWN,
            ),
        )
        reason = F.when(reason == "<bad>", F.col("bad")).otherwise(reason)

        # rowid goes last: the table's own columns keep their order before it.
        rowid_image = F.col("rowid_image")
        key_image = F.coalesce(key, _empty())
        data_image = F.coalesce(data, _empty())
        old_values = F.coalesce(F.col("paired_before"), _empty())
        identified = _overlay(old_values, key_image)  # what the record says the row was
        before = (
            F.when(op == OP_DELETE, _overlay(_overlay(key_image, data_image), rowid_image))
            .when(
                op.isin(OP_UPDATE, _AFTER) & (F.size(identified) + F.size(rowid_image) > 0),
                _overlay(identified, rowid_image),
            )
            # DROP COLUMN: the columns it removes, with no values.
            .when(
                op == _DROP_COLUMN,
                F.transform_values(
                    F.when(has_data, data_image).otherwise(key_image),
                    lambda k, v: F.lit(None).cast("variant"),
                ),
            )
        )
        after = F.when(
            op.isin(OP_INSERT, OP_UPDATE, _AFTER), _overlay(_overlay(identified, data_image), rowid_image)
        )
        is_change = kind == KIND_CHANGE
        canonical_op = F.when(op.isin(_AFTER), F.lit(OP_UPDATE)).otherwise(op)
        return paired.select(
            *canonical(
                table=F.col("table"),
                kind=kind,
                op=F.when(is_change, canonical_op),
                reason=reason,
                event_ms=F.col("event_ms"),
                log_pos=F.when(
                    F.col("scn").isNotNull(), F.array(F.col("scn"), F.col("trans_number"), F.col("seq"))
                ),
                sub_pos=F.lit(0),
                tx_id=F.col("trans"),
                tx_end=F.col("tx_end"),
                before=F.when(is_change | ((kind == KIND_IGNORED) & (op == _DROP_COLUMN)), before),
                after=F.when(is_change, after),
                partial=F.when(is_change, op.isin(OP_UPDATE, _AFTER)),
                file=F.col("file"),
                file_pos=F.col("file_pos"),
                line=F.col("line"),
                raw=F.col("text"),
            )
        )

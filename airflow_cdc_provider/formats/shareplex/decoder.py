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

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import MapType, StringType, StructField, StructType, VariantType

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.common.jsonlines import images_not_objects, parse_json_records
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
    dotted_table,
    empty_image,
    overlay,
    table_matches,
)
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile
from airflow_cdc_provider.spark.sqlexpr import Expr

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


def _op(raw: Expr) -> Expr:
    normalised = E.regexp_replace(E.upper(E.trim(raw)), r"[\s_]+", " ")
    return E.lookup(_OPS, normalised)


def event_millis(time: Expr) -> Expr:
    """``meta.time`` -> epoch ms. ISO text without an offset is UTC; digits are epoch seconds (ms if 13+)."""
    t = E.trim(time)
    digits = t.rlike(r"^\d+$")
    has_zone = t.rlike(r"(?i)(Z|[+-]\d{2}:?\d{2})$")
    instant = E.when(has_zone, t.try_cast("timestamp")).otherwise(
        E.concat(t, E.lit("Z")).try_cast("timestamp")
    )
    number = t.try_cast("bigint")
    return (
        E.when(digits & (E.length(t) >= 13), number)
        .when(digits, E.try_multiply(number, 1000))
        .otherwise(E.unix_millis(instant))
    )


def transaction_number(trans: Expr) -> Expr:
    """``meta.trans`` as a number: digits as they are, Oracle ``usn.slot.sqn`` packed into 16+16+32 bits."""
    parts = E.regexp_extract_all(trans, r"(\d+)", 1)
    usn, slot, sqn = (E.try_element_at(parts, i).try_cast("bigint") for i in (1, 2, 3))
    fits = (usn < 1 << 15) & (slot < 1 << 16) & (sqn < 1 << 32)
    packed = E.shiftleft(usn, 48) + E.shiftleft(slot, 32) + sqn
    return E.when(trans.rlike(r"^\s*\d+\s*$"), E.trim(trans).try_cast("bigint")).when(
        trans.rlike(r"^\s*\d+\.\d+\.\d+\s*$") & fits, packed
    )


def rowid_wanted(options: DecodeOptions, table: Expr) -> Expr:
    """Whether ``table``'s rows carry ``rowid``: under ``--with-metadata``, or when its key includes it.

    The key is resolved as the engine resolves ``--key``: ``--key TABLE=COLS`` (the table's qualified
    name or its last part) overrides the default ``--key COLS``, the last matching entry winning.
    """
    if options.with_metadata:
        return E.lit(True)
    wanted = E.lit(ROWID_COLUMN in options.key_columns)
    for name, cols in options.table_keys.items():
        wanted = E.when(table_matches(table, (name,)), E.lit(ROWID_COLUMN in cols)).otherwise(wanted)
    return E.coalesce(wanted, E.lit(False))


class ShareplexJsonDecoder(Decoder):
    name = "shareplex-json"
    description = (
        "Shareplex JSON as Alibaba DTS writes it (meta/data/key): partial update images, position scn/trans/seq, "
        "meta.rowid usable as key column rowid"
    )
    needs = "--key (or --key rowid)"
    partial_images = True
    transaction_ids = True

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        parsed = parse_json_records(spark, files, RECORD_SCHEMA)
        records = self._records(parsed, options)
        paired = self._paired(records)
        return self._events(paired)

    @staticmethod
    def _records(parsed: DataFrame, options: DecodeOptions) -> DataFrame:
        meta = E.col("j.meta")
        data, key = E.col("j.data"), E.col("j.key")
        idx = E.split(meta["idx"], "/")
        seq = E.coalesce(meta["seq"].try_cast("bigint"), E.try_element_at(idx, 1).try_cast("bigint"))
        size = E.coalesce(meta["size"].try_cast("bigint"), E.try_element_at(idx, 2).try_cast("bigint"))
        fallback_table = E.lit(options.table).cast("string")
        table = E.coalesce(dotted_table(meta["table"]), fallback_table)
        # Only a rowid the rows carry may identify a row (a delete that names nothing else).
        rowid = E.when(rowid_wanted(options, table), meta["rowid"])
        return parsed.select(
            "file",
            "file_pos",
            "line",
            "text",
            "tombstone",
            "bad",
            *E.columns(
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
                E.when(rowid.isNotNull(), E.map(E.lit(ROWID_COLUMN), rowid.cast("variant")))
                .otherwise(empty_image())
                .alias("rowid_image"),
                data.isNotNull().alias("has_data"),
                key.isNotNull().alias("has_key"),
                data.alias("data"),
                key.alias("key"),
            ),
        )

    @staticmethod
    def _paired(records: DataFrame) -> DataFrame:
        """Give each UPDATE AFTER the values of the UPDATE BEFORE just before it in its transaction."""
        op, file = E.col("op"), E.col("file")
        pair_op = op.isin(_BEFORE, _AFTER)
        # Other records get a group of their own: they take part in the window but never pair.
        group = E.when(pair_op, E.coalesce("trans", E.concat(E.lit("file "), file))).otherwise(
            E.concat(file, E.lit(" "), E.col("file_pos").cast("string"))
        )
        order = ", ".join(E.col(c).sql for c in ("seq", "file", "file_pos"))
        window = f"PARTITION BY {E.col('table').sql}, {group.sql} ORDER BY {order}"
        previous = E.call("lag", E.struct("op", "data", "key"), 1).over(window)
        with_previous = records.select("*", previous.alias("_previous").column())
        previous = E.col("_previous")
        paired_before = E.when(
            (op == _AFTER) & (previous["op"] == _BEFORE),
            overlay(E.coalesce(previous["key"], empty_image()), E.coalesce(previous["data"], empty_image())),
        )
        return with_previous.select("*", paired_before.alias("paired_before").column()).drop("_previous")

    @staticmethod
    def _events(paired: DataFrame) -> DataFrame:
        """The canonical event of each record: its kind (``_classified``), its images put together
        from ``key``, ``data``, the paired before values and ``rowid`` (``_image_parts``)."""
        op = E.col("op")
        kind, reason = _classified()
        staged = _image_parts(paired)
        is_change = kind == KIND_CHANGE
        canonical_op = E.when(op.isin(_AFTER), E.lit(OP_UPDATE)).otherwise(op)
        return staged.select(
            *canonical(
                table=E.col("table"),
                kind=kind,
                op=E.when(is_change, canonical_op),
                reason=reason,
                event_ms=E.col("event_ms"),
                log_pos=E.when(E.col("scn").isNotNull(), E.array("scn", "trans_number", "seq")),
                sub_pos=E.lit(0),
                tx_id=E.col("trans"),
                tx_end=E.col("tx_end"),
                before=E.when(is_change | ((kind == KIND_IGNORED) & (op == _DROP_COLUMN)), _before_image()),
                after=E.when(is_change, _after_image()),
                partial=E.when(is_change, op.isin(OP_UPDATE, _AFTER)),
                raw=E.col("text"),
            )
        )


def _classified() -> tuple[Expr, Expr]:
    """``(kind, reason)`` of a record of ``_records``: a row change, an ignored record (tombstone,
    DDL, the BEFORE half of an update pair) or a quarantined one, the first rule that holds deciding."""
    op, bad = E.col("op"), E.col("bad")
    has_data, has_key = E.col("has_data"), E.col("has_key")
    return classify(
        (E.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
        (
            images_not_objects(bad, E.col("text"), "$.data", "$.key"),
            KIND_QUARANTINED,
            Q_IMAGE_NOT_OBJECT,
        ),
        (bad.isNotNull(), KIND_QUARANTINED, bad),
        (E.col("op_text").isNull() | (E.trim("op_text") == ""), KIND_QUARANTINED, Q_MISSING_OP),
        (op.isNull(), KIND_QUARANTINED, Q_UNKNOWN_OP),
        (E.col("table").isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
        (E.col("time_text").isNotNull() & E.col("event_ms").isNull(), KIND_QUARANTINED, Q_TYPE_MISMATCH),
        (op == _DROP_COLUMN, KIND_IGNORED, IGNORED_DDL),
        (op == _BEFORE, KIND_IGNORED, IGNORED_UPDATE_BEFORE),
        (op.isin(OP_INSERT, OP_UPDATE, _AFTER) & ~has_data, KIND_QUARANTINED, Q_MISSING_IMAGE),
        (
            (op == OP_DELETE) & ~has_data & ~has_key & E.col("rowid").isNull(),
            KIND_QUARANTINED,
            Q_KEY_UNKNOWN,
        ),
    )


def _image_parts(paired: DataFrame) -> DataFrame:
    """``paired`` with the parts the images are made of: ``key`` and ``data`` (``_key_image``,
    ``_data_image``, empty when absent), what the record says the row was (``_identified``: the
    paired BEFORE values overlaid with ``key``), a delete's row (``_deleted``) and the row an
    insert or update writes (``_written``).

    Each overlay reads columns of an earlier select, so no image expression is copied into the next.
    """
    op = E.col("op")
    staged = paired.select(
        "*",
        *E.columns(
            E.coalesce(E.col("key"), empty_image()).alias("_key_image"),
            E.coalesce(E.col("data"), empty_image()).alias("_data_image"),
        ),
    )
    key_image, data_image = E.col("_key_image"), E.col("_data_image")
    old_values = E.coalesce(E.col("paired_before"), empty_image())
    staged = staged.select("*", overlay(old_values, key_image).alias("_identified").column())
    return staged.select(
        "*",
        *E.columns(
            E.when(op == OP_DELETE, overlay(key_image, data_image)).alias("_deleted"),
            E.when(op.isin(OP_INSERT, OP_UPDATE, _AFTER), overlay(E.col("_identified"), data_image)).alias(
                "_written"
            ),
        ),
    )


def _before_image() -> Expr:
    """The before image, from ``_image_parts``: a delete's row, the row an update identifies, or
    the columns a DROP COLUMN removes (with no values). ``rowid`` goes last: the table's own
    columns keep their order before it."""
    op, rowid_image, identified = E.col("op"), E.col("rowid_image"), E.col("_identified")
    return (
        E.when(op == OP_DELETE, overlay(E.col("_deleted"), rowid_image))
        .when(
            op.isin(OP_UPDATE, _AFTER) & (E.size(identified) + E.size(rowid_image) > 0),
            overlay(identified, rowid_image),
        )
        # DROP COLUMN: the columns it removes, with no values.
        .when(
            op == _DROP_COLUMN,
            E.transform_values(
                E.when(E.col("has_data"), E.col("_data_image")).otherwise(E.col("_key_image")),
                lambda k, v: E.null("variant"),
            ),
        )
    )


def _after_image() -> Expr:
    """The after image of an insert or update: the row it writes, ``rowid`` last."""
    op = E.col("op")
    return E.when(op.isin(OP_INSERT, OP_UPDATE, _AFTER), overlay(E.col("_written"), E.col("rowid_image")))

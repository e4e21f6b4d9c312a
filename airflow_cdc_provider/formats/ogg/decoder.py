"""Oracle GoldenGate JSON, as GoldenGate for Big Data's JSON formatter writes it (one operation per record).

``table`` is ``SCHEMA.TABLE`` (used as it is), ``op_type`` I/U/D/T (the spelled-out names too),
``op_ts`` the operation's commit time in UTC (``YYYY-MM-DD HH:MM:SS.ffffff``; ISO text with ``T``
or an offset reads the same), ``pos`` the trail position: a string of digits whose order is the
source's, turned into two 18-digit numbers (left-padded to 36 digits) that compare the same way.
``primary_keys`` names the key (else ``--key``); ``before``/``after`` are the row images, values
keeping their JSON types (the formatter declares none). ``current_ts`` (when GoldenGate wrote the
record) and ``tokens`` are not used: the order is ``pos``, then ``op_ts``, then the landing.

When the source logs compressed updates, an update's ``after`` holds only the key and the columns
that changed. An update is partial (the columns it does not carry keep their value) unless its after
image carries a non-key column with the same value as in its before image (a full image does; a
compressed one never does); an update without a before image cannot tell, and is partial. A partial
image of a full row is the row itself, so nothing is lost when a full image is taken for a partial
one. ``T`` empties the table.
Transaction fields the formatter can add (``xid``, ``txind``) give ``tx_id`` and ``tx_end``.

With the formatter's missing-column flags on (``includeIsMissingFields``), each column ``COL`` of an
image has a boolean ``COL_isMissing`` beside it. The flags are metadata, never columns: a true flag
means ``COL`` is absent from that image (the trail does not hold it; absent is not null), so ``COL``
leaves the image whatever value the formatter wrote for it, and an update whose after image has a
true flag is partial; a false flag leaves ``COL`` as it is, null or a value. A field
``X_isMissing`` is read as a flag only when its value is a JSON boolean, ``X`` is in the same image
or the flag is true, and the image has no ``X_isMissing_isMissing``: with the flags on, a source
column that happens to be named ``X_isMissing`` has a flag of its own, which makes it a column.
With the flags off nothing tells them apart: a boolean source column ``X_isMissing`` that is true,
or sits beside a column ``X``, is taken for a flag.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import ArrayType, MapType, StringType, StructField, StructType, VariantType

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.common.jsonlines import images_not_objects, parse_json_records
from airflow_cdc_provider.formats.events import (
    IGNORED_TOMBSTONE,
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
)
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile
from airflow_cdc_provider.spark.sqlexpr import Expr

_IMAGE = MapType(StringType(), VariantType())
RECORD_SCHEMA = StructType(
    [
        StructField("table", StringType()),
        StructField("op_type", StringType()),
        StructField("op_ts", StringType()),
        StructField("current_ts", StringType()),
        StructField("pos", StringType()),
        StructField("primary_keys", ArrayType(StringType())),
        StructField("before", _IMAGE),
        StructField("after", _IMAGE),
        StructField("xid", StringType()),
        StructField("txind", StringType()),
    ]
)
_OPS = {
    "I": OP_INSERT,
    "INSERT": OP_INSERT,
    "U": OP_UPDATE,
    "UPDATE": OP_UPDATE,
    "D": OP_DELETE,
    "DELETE": OP_DELETE,
    "T": OP_TRUNCATE,
    "TRUNCATE": OP_TRUNCATE,
}
# pos is compared as 36 zero-padded digits, in two 18-digit halves (each below 2^63).
_POS_DIGITS = 36
# GoldenGate's missing-column flag of column COL is the field COL_isMissing of the same image.
MISSING_FLAG_SUFFIX = "_isMissing"


def op_millis(text: Expr) -> Expr:
    """``op_ts`` -> epoch ms: ``YYYY-MM-DD HH:MM:SS[.ffffff]`` (or ISO with ``T``) in UTC unless it names an offset."""
    t = E.trim(text)
    with_zone = E.when(t.rlike(r"(?i)(Z|[+-]\d{2}:?\d{2})$"), t).otherwise(E.concat(t, E.lit("Z")))
    return E.unix_millis(E.try_to_timestamp(with_zone))


def trail_position(pos: Expr) -> Expr:
    """``pos`` (digits, e.g. ``00000000000000000000143``) -> ``[high 18 digits, low 18 digits]``.

    Zero-padding to one width makes the element-wise order the string's (and the number's). Null
    for a position that is not 1 to 36 digits.
    """
    p = E.trim(pos)
    padded = E.lpad(p, _POS_DIGITS, "0")
    half = _POS_DIGITS // 2
    parts = E.array(
        E.substring(padded, 1, half).try_cast("bigint"),
        E.substring(padded, half + 1, half).try_cast("bigint"),
    )
    return E.when(p.rlike(rf"^\d{{1,{_POS_DIGITS}}}$"), parts)


def _is_missing_flag(image: Expr, name: Expr, value: Expr) -> Expr:
    """Whether the field ``name`` (holding ``value``) of ``image`` is GoldenGate's missing-column flag
    of another column rather than a column of the source (the rule of the module docstring)."""
    column = E.left(name, E.length(name) - len(MISSING_FLAG_SUFFIX))
    flag = (
        name.endswith(MISSING_FLAG_SUFFIX)
        & (E.schema_of_variant(value) == "BOOLEAN")
        & ~E.map_contains_key(image, E.concat(name, E.lit(MISSING_FLAG_SUFFIX)))
        & (E.map_contains_key(image, column) | E.try_variant_get(value, "$", "boolean"))
    )
    return E.coalesce(flag, E.lit(False))


def _is_true_missing_flag(image: Expr, name: Expr, value: Expr) -> Expr:
    """A flag saying that its column is absent from ``image``."""
    return _is_missing_flag(image, name, value) & E.coalesce(
        E.try_variant_get(value, "$", "boolean"), E.lit(False)
    )


def without_missing_flags(image: Expr) -> Expr:
    """``image`` without its missing-column flags and without the columns a true flag marks absent.

    A flagged column must not reach the image at all: an absent column keeps its previous value in
    a partial update, where a null (what the formatter may write for it) would overwrite it.
    """

    def marked_absent(name: Expr) -> Expr:
        flag_name = E.concat(name, E.lit(MISSING_FLAG_SUFFIX))
        return _is_true_missing_flag(image, flag_name, E.try_element_at(image, flag_name))

    return E.map_filter(image, lambda k, v: ~_is_missing_flag(image, k, v) & ~marked_absent(k))


def has_true_missing_flag(image: Expr) -> Expr:
    """Whether some column of ``image`` is flagged absent: the image is then certainly partial,
    whatever the unchanged columns it also carries suggest."""
    flags = E.map_filter(image, lambda k, v: _is_true_missing_flag(image, k, v))
    return E.coalesce(E.size(flags) > 0, E.lit(False))


class OggJsonDecoder(Decoder):
    name = "ogg-json"
    description = (
        "Oracle GoldenGate JSON (table, op_type I/U/D/T, op_ts, pos, primary_keys, before/after): "
        "compressed updates as partial images, truncate"
    )
    needs = "--key (when records carry no primary_keys)"
    partial_images = True
    transaction_ids = True

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        parsed = parse_json_records(spark, files, RECORD_SCHEMA)
        j = E.col("j")
        staged = _flags_removed(parsed, j["before"], j["after"])
        op = _op()
        before, after = E.col("_before"), E.col("_after")
        position = trail_position(j["pos"])
        kind, reason = _classified()
        is_change = kind == KIND_CHANGE
        txind = E.upper(E.trim(j["txind"]))
        return staged.select(
            *canonical(
                table=_table(),
                kind=kind,
                op=E.when(is_change, op),
                reason=reason,
                event_ms=op_millis(j["op_ts"]),
                log_pos=position,
                log_pos_unreadable=j["pos"].isNotNull() & position.isNull(),
                sub_pos=E.lit(0),
                tx_id=j["xid"],
                tx_end=E.when(txind.isNotNull(), txind.isin("E", "W")),
                before=E.when(
                    is_change,
                    E.when(op == OP_DELETE, E.coalesce(before, after)).when(op == OP_UPDATE, before),
                ),
                after=E.when(is_change & op.isin(OP_INSERT, OP_UPDATE), after),
                partial=E.coalesce(is_change & _partial_update(options), E.lit(False)),
                key_cols=E.when(E.size(j["primary_keys"]) > 0, j["primary_keys"]),
                raw=E.col("text"),
            )
        )


def _op_text() -> Expr:
    """``op_type`` as written, trimmed and upper-cased."""
    return E.upper(E.trim(E.col("j")["op_type"]))


def _op() -> Expr:
    """The canonical op ``op_type`` names (null for another name)."""
    return E.lookup(_OPS, _op_text())


def _table() -> Expr:
    """``table`` as written (``SCHEMA.TABLE``), null when blank."""
    j = E.col("j")
    return E.when(E.trim(j["table"]) != "", dotted_table(E.trim(j["table"])))


def _classified() -> tuple[Expr, Expr]:
    """``(kind, reason)`` of a record with its flags removed (``_flags_removed``): a row change, a
    tombstone (ignored) or a quarantined record, the first rule that holds deciding."""
    j, bad, op_text, op = E.col("j"), E.col("bad"), _op_text(), _op()
    before, after = E.col("_before"), E.col("_after")
    return classify(
        (E.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
        (
            images_not_objects(bad, E.col("text"), "$.before", "$.after"),
            KIND_QUARANTINED,
            Q_IMAGE_NOT_OBJECT,
        ),
        (bad.isNotNull(), KIND_QUARANTINED, bad),
        (op_text.isNull() | (op_text == ""), KIND_QUARANTINED, Q_MISSING_OP),
        (op.isNull(), KIND_QUARANTINED, Q_UNKNOWN_OP),
        (_table().isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
        (j["op_ts"].isNotNull() & op_millis(j["op_ts"]).isNull(), KIND_QUARANTINED, Q_TYPE_MISMATCH),
        (op.isin(OP_INSERT, OP_UPDATE) & after.isNull(), KIND_QUARANTINED, Q_MISSING_IMAGE),
        ((op == OP_DELETE) & before.isNull() & after.isNull(), KIND_QUARANTINED, Q_KEY_UNKNOWN),
    )


def _partial_update(options: DecodeOptions) -> Expr:
    """Whether an update's after image is partial (the rule of the module docstring).

    Compressed updates: the after image carries only the key and the changed columns. A full image
    carries some column whose value did not change; without a before image nobody can tell.
    """
    j, before, after = E.col("j"), E.col("_before"), E.col("_after")
    key_names = E.coalesce(
        E.when(E.size(j["primary_keys"]) > 0, j["primary_keys"]),
        E.array(*[E.lit(c) for c in options.key_columns]).cast("array<string>"),
    )
    carries_unchanged = E.exists(
        E.map_keys(after),
        lambda k: (
            ~E.array_contains(key_names, k)
            & E.map_contains_key(before, k)
            & (E.to_json(before[k]) == E.to_json(after[k]))
        ),
    )
    return (_op() == OP_UPDATE) & (
        E.col("_after_flags_absent") | before.isNull() | ~E.coalesce(carries_unchanged, E.lit(False))
    )


def _flags_removed(parsed: DataFrame, before: Expr, after: Expr) -> DataFrame:
    """``parsed`` with ``_before``/``_after`` (the images without missing-column flags) and
    ``_after_flags_absent`` (a true flag in the after image).

    The walks over the images run only where the text names a flag (or escapes a character, which
    could spell one): records written with the flags off pass their images on as they are.
    """
    text = E.col("text")
    may_flag = text.contains(MISSING_FLAG_SUFFIX) | text.contains("\\u")
    return parsed.select(
        "*",
        *E.columns(
            E.when(may_flag, without_missing_flags(before)).otherwise(before).alias("_before"),
            E.when(may_flag, without_missing_flags(after)).otherwise(after).alias("_after"),
            (may_flag & has_true_missing_flag(after)).alias("_after_flags_absent"),
        ),
    )

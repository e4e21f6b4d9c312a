"""Debezium's MongoDB connector: the Debezium envelope whose documents are extended-JSON strings.

The envelope (``op``, ``ts_ms``, ``source``, ``transaction``, bare or in a Kafka Connect ``payload``)
is the one ``envelope`` reads; what differs is the row images. ``after`` and ``before`` (a
pre-image) are strings holding the whole document as MongoDB extended JSON, an update may carry
only what changed (``updateDescription`` in 2.x change-streams mode, ``patch`` with ``$set``/
``$unset`` or a ``$v: 2`` ``diff`` in 1.x oplog mode), and a delete usually carries no document at
all: its key is the Kafka message key, which landings that keep keys write on the line before the
value (``{"id": "<extended JSON of _id>"}``; that line is counted as ignored, reason ``Kafka key``),
or the 1.x ``filter``.

The key is ``_id``. Snapshot columns are the documents' top-level fields; values are converted
from extended JSON once, by ``extended_json`` (which lists what each wrapper becomes).

Strings, booleans, ``$date`` columns and the text forms are declared (a column that holds a date in
one document and text in another stops the job as a type change, never silently nulls); numbers
are typed from their values like other formats' undeclared columns.

An update that only names changed fields is a partial image (the columns it names replace the
row's, removed fields become null). One that changes a field inside a nested document or array
(a dotted path, a truncated array, a ``diff`` sub-document) cannot be applied to the top-level
columns without the full document and is set aside (``update of a nested field without the full
document``): capture with ``capture.mode=change_streams_update_full`` to have ``after``.

Order: ``source.ts_ms`` and ``source.ord`` (the oplog time and its increment), then the event time,
then the landing.
"""

from __future__ import annotations

import functools
import operator

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    VariantType,
)

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.common.jsonlines import parse_json_records
from airflow_cdc_provider.formats.debezium.envelope import Envelope, envelope_op
from airflow_cdc_provider.formats.debezium.extended_json import (
    CONVERTED,
    converted_document,
    failed,
    image_of,
    types_of,
)
from airflow_cdc_provider.formats.events import (
    IGNORED_HEARTBEAT,
    IGNORED_KAFKA_KEY,
    IGNORED_TOMBSTONE,
    IGNORED_TRANSACTION,
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
    Q_NESTED_UPDATE,
    Q_TYPE_MISMATCH,
    Q_UNKNOWN_OP,
    canonical,
    classify,
    qualified_table,
)
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile
from airflow_cdc_provider.spark.sqlexpr import Expr

KEY_COLUMN = "_id"
# A Kafka key line is short; longer lines are never taken for one (and are not re-parsed to check).
# Bytes, not characters: a string's byte length is known without reading it.
_KEY_LINE_MAX_BYTES = 4096

_SOURCE = StructType(
    [
        StructField("version", StringType()),
        StructField("connector", StringType()),
        StructField("ts_ms", LongType()),
        StructField("snapshot", StringType()),
        StructField("db", StringType()),
        StructField("collection", StringType()),
        StructField("ord", LongType()),
    ]
)
_ENVELOPE_FIELDS = [
    StructField("op", StringType()),
    StructField("ts_ms", LongType()),
    # Documents are extended-JSON strings; a landing that wrote them as objects reads the same
    # (Spark hands an object to a string field as its JSON text).
    StructField("after", StringType()),
    StructField("before", StringType()),
    StructField("patch", StringType()),
    StructField("filter", StringType()),
    StructField(
        "updateDescription",
        StructType(
            [
                StructField("updatedFields", StringType()),
                StructField("removedFields", ArrayType(StringType())),
                StructField("truncatedArrays", StringType()),
            ]
        ),
    ),
    StructField("source", _SOURCE),
    StructField("transaction", StructType([StructField("id", StringType())])),
    StructField("status", StringType()),
]
RECORD_SCHEMA = StructType(_ENVELOPE_FIELDS + [StructField("payload", StructType(_ENVELOPE_FIELDS))])

_OPS = {"c": OP_INSERT, "r": OP_READ, "u": OP_UPDATE, "d": OP_DELETE}
_TEXTS = MapType(StringType(), StringType())
_VALUES = MapType(StringType(), VariantType())
# The record's columns every stage carries.
_RECORD = ("file", "file_pos", "line", "text", "tombstone", "bad")
# The documents a record can carry, each converted on its own.
_DOCUMENTS = (
    "after_doc",
    "before_doc",
    "replacement_doc",
    "updated_doc",
    "set_doc",
    "diff_u_doc",
    "diff_i_doc",
    "filter_doc",
    "key_doc",
)


def _overlay(base: Expr, top: Expr) -> Expr:
    """``base`` with ``top``'s fields in place of its own and ``top``'s other fields after them.

    Pass columns or lambda variables: each is read several times. Converted values are never
    null, so ``top[k]`` is null only where ``top`` lacks ``k``. Maps without a common field (a
    partial update's fields beside its ``_id``) are concatenated without a walk over them.
    """
    disjoint = E.size(E.array_intersect(E.map_keys(base), E.map_keys(top))) == 0
    replaced = E.transform_values(base, lambda k, v: E.coalesce(top[k], v))
    walked = E.map_concat(replaced, E.map_filter(top, lambda k, t: ~E.map_contains_key(base, k)))
    return E.when(disjoint, E.map_concat(base, top)).otherwise(walked)


def _id_document(id_text: Expr) -> Expr:
    """A Kafka key's ``id`` (extended JSON of ``_id``) as the document ``{"_id": ...}``."""
    return E.concat(E.lit('{"_id":'), id_text, E.lit("}"))


def is_key_line(text: Expr) -> Expr:
    """A Kafka key as Debezium writes it: ``{"id": ...}``, bare or in a Connect ``payload``."""
    # Cheap tests first: a value names its "op", a key never does; only the rest is parsed again.
    short = (E.octet_length(text) <= _KEY_LINE_MAX_BYTES) & ~text.contains('"op"') & text.contains('"id"')
    keys = E.array_sort(E.json_object_keys(text))
    payload_keys = E.json_object_keys(E.get_json_object(text, "$.payload"))
    bare = keys == E.array(E.lit("id"))
    wrapped = keys.isin(E.array(E.lit("payload")), E.array(E.lit("payload"), E.lit("schema"))) & (
        payload_keys == E.array(E.lit("id"))
    )
    return E.coalesce(E.when(short, bare | wrapped), E.lit(False))


def key_line_id(key_line: Expr) -> Expr:
    """The ``id`` text of a line ``is_key_line`` accepted (``previous`` holds no other line)."""
    return E.coalesce(E.get_json_object(key_line, "$.id"), E.get_json_object(key_line, "$.payload.id"))


def _with_patch(records: DataFrame, patch_text: Expr) -> DataFrame:
    """``records`` with a 1.x ``patch`` parsed in stages, each text once: ``_patch`` (its fields),
    ``_ops`` (the same, when it holds update operators or a ``$v: 2`` diff) and ``_diff``."""
    patch = E.col("_patch")
    # An update operator is a key starting with $. In the keys' JSON text an element's opening
    # quote follows [ or , (a quote inside a key is escaped), so this finds exactly those.
    operators = E.to_json(E.map_keys(patch)).rlike(r'[\[,]"\$')
    return (
        records.select("*", E.from_json(patch_text, _TEXTS).alias("_patch").column())
        .select("*", E.when(operators | E.map_contains_key(patch, "diff"), patch).alias("_ops").column())
        .select("*", E.from_json(E.col("_ops")["diff"], _TEXTS).alias("_diff").column())
    )


def _patch_parts(patch_text: Expr) -> dict[str, Expr]:
    """A 1.x ``patch`` in parts, from the columns of ``_with_patch`` (all null without a patch).

    ``not_object``; ``replacement``, the whole document when the patch has no update operators;
    the documents of fields it sets (``set``, the ``$v: 2`` diff's ``diff_u`` and ``diff_i``); the
    names it removes (``unset``, from ``$unset`` and the diff's ``d``); ``nested``, a diff key
    for a nested field.
    """
    no_names = E.array().cast("array<string>")
    patch, ops, diff = E.col("_patch"), E.col("_ops"), E.col("_diff")
    removed = [E.from_json(ops["$unset"], _TEXTS), E.from_json(diff["d"], _TEXTS)]
    return {
        "not_object": patch_text.isNotNull() & patch.isNull(),
        "replacement": E.when(ops.isNull(), patch_text),
        "set": ops["$set"],
        "diff_u": diff["u"],
        "diff_i": diff["i"],
        "unset": E.when(
            patch_text.isNotNull(),
            E.flatten(E.array(*[E.coalesce(E.map_keys(r), no_names) for r in removed])),
        ),
        "nested": E.size(E.array_except(E.map_keys(diff), E.array(E.lit("u"), E.lit("i"), E.lit("d")))) > 0,
    }


def _any(conditions: list[Expr]) -> Expr:
    return functools.reduce(operator.or_, conditions)


def _any_dotted(names: Expr) -> Expr:
    """Whether a name in the array has a dot (null names are none)."""
    return E.array_join(names, ",").contains(".")


class DebeziumMongodbDecoder(Decoder):
    name = "debezium-mongodb"
    description = (
        "Debezium MongoDB connector: extended-JSON after/before documents keyed by _id (Kafka key lines "
        "paired with their values), updateDescription/patch partial updates, top-level fields as columns"
    )
    needs = ""
    partial_images = True
    transaction_ids = True

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        parsed = parse_json_records(spark, files, RECORD_SCHEMA, previous_when=is_key_line)
        return self._events(self._images(self._converted(self._documents(parsed))))

    @staticmethod
    def _documents(parsed: DataFrame) -> DataFrame:
        """Per record: the envelope fields read later, whether it is a key line, and the text of every
        document it carries (with the names a partial update removes)."""
        e = Envelope()
        src = e["source"]
        description = e["updateDescription"]
        parsed = _with_patch(parsed, e["patch"])
        patch = _patch_parts(e["patch"])
        no_names = E.array().cast("array<string>")
        # Fields set (documents) and removed (names) by a partial update, whatever its form.
        unset_names = E.flatten(
            E.array(E.coalesce(description["removedFields"], no_names), E.coalesce(patch["unset"], no_names))
        )
        truncated = E.coalesce(E.trim(description["truncatedArrays"]).isin("[]", "null"), E.lit(True))
        documents = {
            "after_doc": e["after"],
            "before_doc": e["before"],
            "replacement_doc": patch["replacement"],
            "updated_doc": description["updatedFields"],
            "set_doc": patch["set"],
            "diff_u_doc": patch["diff_u"],
            "diff_i_doc": patch["diff_i"],
            "filter_doc": e["filter"],
            "key_doc": _id_document(key_line_id(E.col("previous"))),
        }
        envelope = E.struct(
            e["op"].alias("op"),
            e["ts_ms"].alias("ts_ms"),
            src.alias("source"),
            e["transaction"].alias("transaction"),
            e["status"].alias("status"),
            (e["after"].isNull() & e["before"].isNull()).alias("no_documents"),
        )
        return parsed.select(
            *_RECORD,
            *E.columns(
                envelope.alias("e"),
                envelope_op(e["op"], src["snapshot"], _OPS).alias("op"),
                E.when(src["collection"].isNotNull(), qualified_table(src["db"], src["collection"])).alias(
                    "table"
                ),
                is_key_line(E.col("text")).alias("is_key"),
                (_any_dotted(unset_names) | E.coalesce(patch["nested"], E.lit(False)) | ~truncated).alias(
                    "nested_unset"
                ),
                unset_names.alias("unset_names"),
                E.coalesce(patch["not_object"], E.lit(False)).alias("patch_not_object"),
                *[doc.alias(f"{name}_text") for name, doc in documents.items()],
            ),
        )

    @staticmethod
    def _converted(documents: DataFrame) -> DataFrame:
        """Every document converted, and whether its text is not a JSON object."""
        parsed = documents.select(
            "*",
            *E.columns(
                *[
                    E.from_json(E.col(f"{name}_text"), schema).alias(f"{name}_{part}")
                    for name in _DOCUMENTS
                    for part, schema in (("values", _VALUES), ("texts", _TEXTS))
                ]
            ),
        )
        columns = []
        for name in _DOCUMENTS:
            values = E.col(f"{name}_values")
            columns += [
                converted_document(values, E.col(f"{name}_texts")).alias(name),
                (E.col(f"{name}_text").isNotNull() & values.isNull()).alias(f"{name}_not_object"),
            ]
        return parsed.select(
            *_RECORD,
            "e",
            "op",
            "table",
            "is_key",
            "nested_unset",
            "unset_names",
            "patch_not_object",
            *E.columns(columns),
        )

    @staticmethod
    def _images(staged: DataFrame) -> DataFrame:
        op = E.col("op")
        empty = E.map().cast(CONVERTED)
        sets = [E.col(n) for n in ("updated_doc", "set_doc", "diff_u_doc", "diff_i_doc")]
        # The sets given, overlaid in order (one set, the usual case, as it is).
        given = functools.reduce(
            operator.add, [E.when(s.isNotNull(), E.lit(1)).otherwise(E.lit(0)) for s in sets]
        )
        set_fields = E.when(given == 1, E.coalesce(*sets)).when(
            given > 1,
            E.aggregate(
                E.array(*sets), empty, lambda acc, s: E.when(s.isNull(), acc).otherwise(_overlay(acc, s))
            ),
        )
        set_names = E.concat(*[E.map_keys(E.coalesce(s, empty)) for s in sets])
        unset = E.col("unset_names")
        null_value = E.struct(
            E.null("variant").alias("v"), E.null("string").alias("t"), E.lit(True).alias("ok")
        )
        unset_fields = E.map_from_arrays(unset, E.array_repeat(null_value, E.size(unset)))
        has_partial = (given > 0) | (E.size(unset) > 0)
        # _id: the document's own, else the Kafka key, else the 1.x filter.
        id_image = E.coalesce(
            *[
                E.when(
                    E.map_contains_key(E.col(d), KEY_COLUMN), E.map(E.lit(KEY_COLUMN), E.col(d)[KEY_COLUMN])
                )
                for d in ("key_doc", "filter_doc", "before_doc")
            ]
        )
        full_after = E.coalesce(E.col("after_doc"), E.col("replacement_doc"))
        partial_fields = _overlay(E.coalesce(set_fields, empty), unset_fields)
        after = E.when(op.isin(OP_INSERT, OP_READ, OP_UPDATE) & full_after.isNotNull(), full_after).when(
            (op == OP_UPDATE) & has_partial, _overlay(E.coalesce(id_image, empty), partial_fields)
        )
        before = E.when(op == OP_DELETE, E.coalesce(E.col("before_doc"), id_image)).when(
            op == OP_UPDATE, E.col("before_doc")
        )
        return staged.select(
            *_RECORD,
            "e",
            "is_key",
            "op",
            "table",
            *E.columns(
                after.alias("after_c"),
                before.alias("before_c"),
                ((op == OP_UPDATE) & full_after.isNull() & has_partial).alias("partial"),
                (
                    (op == OP_UPDATE) & full_after.isNull() & (E.col("nested_unset") | _any_dotted(set_names))
                ).alias("nested"),
                _any([E.col(f"{d}_not_object") for d in _DOCUMENTS] + [E.col("patch_not_object")]).alias(
                    "not_object"
                ),
                _any([failed(E.col(d)) for d in _DOCUMENTS]).alias("conversion_failed"),
            ),
        )

    @staticmethod
    def _events(images: DataFrame) -> DataFrame:
        e = E.col("e")
        src = e["source"]
        op = E.col("op")
        has_op = e["op"].isNotNull()
        bad = E.col("bad")
        after_c, before_c = E.col("after_c"), E.col("before_c")
        kind, reason = classify(
            (E.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
            (bad.isNull() & E.col("is_key"), KIND_IGNORED, IGNORED_KAFKA_KEY),
            (bad.isNotNull(), KIND_QUARANTINED, bad),
            (e["status"].isin("BEGIN", "END") & ~has_op, KIND_IGNORED, IGNORED_TRANSACTION),
            (
                ~has_op & e["ts_ms"].isNotNull() & src.isNull() & e["no_documents"],
                KIND_IGNORED,
                IGNORED_HEARTBEAT,
            ),
            (~has_op, KIND_QUARANTINED, Q_MISSING_OP),
            (op.isNull(), KIND_QUARANTINED, Q_UNKNOWN_OP),
            (E.col("table").isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
            (E.col("not_object"), KIND_QUARANTINED, Q_IMAGE_NOT_OBJECT),
            (E.col("conversion_failed"), KIND_QUARANTINED, Q_TYPE_MISMATCH),
            (E.col("nested"), KIND_QUARANTINED, Q_NESTED_UPDATE),
            (op.isin(OP_INSERT, OP_READ, OP_UPDATE) & after_c.isNull(), KIND_QUARANTINED, Q_MISSING_IMAGE),
            ((op == OP_DELETE) & before_c.isNull(), KIND_QUARANTINED, Q_KEY_UNKNOWN),
        )
        is_change = kind == KIND_CHANGE
        applied_image = E.when(op == OP_DELETE, before_c).otherwise(after_c)
        # Whether any value is declared, read off the structs (the types map is built once).
        declares = E.size(E.array_compact(E.map_values(applied_image)["t"])) > 0
        return images.select(
            *canonical(
                table=E.col("table"),
                kind=kind,
                op=E.when(is_change, op),
                reason=reason,
                # A source.ts_ms of 0 is no time: the envelope's ts_ms (when the connector read it) is.
                event_ms=E.coalesce(E.when(src["ts_ms"] != 0, src["ts_ms"]), e["ts_ms"]),
                log_pos=E.when(
                    src["ts_ms"].isNotNull() & src["ord"].isNotNull(), E.array(src["ts_ms"], src["ord"])
                ),
                sub_pos=E.lit(0),
                tx_id=e["transaction"]["id"],
                before=E.when(is_change, image_of(before_c)),
                after=E.when(is_change & (op != OP_DELETE), image_of(after_c)),
                partial=E.coalesce(is_change & E.col("partial"), E.lit(False)),
                key_cols=E.array(E.lit(KEY_COLUMN)),
                types=E.when(is_change & declares, types_of(applied_image)),
                raw=E.col("text"),
            )
        )

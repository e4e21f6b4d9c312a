"""Debezium's MongoDB connector: the Debezium envelope whose documents are extended-JSON strings.

The envelope (``op``, ``ts_ms``, ``source``, ``transaction``, bare or in a Kafka Connect ``payload``)
is the one ``debezium.py`` reads; what differs is the row images. ``after`` and ``before`` (a
pre-image) are strings holding the whole document as MongoDB extended JSON, an update may carry
only what changed (``updateDescription`` in 2.x change-streams mode, ``patch`` with ``$set``/
``$unset`` or a ``$v: 2`` ``diff`` in 1.x oplog mode), and a delete usually carries no document at
all: its key is the Kafka message key, which landings that keep keys write on the line before the
value (``{"id": "<extended JSON of _id>"}``; that line is counted as ignored, reason ``Kafka key``),
or the 1.x ``filter``.

The key is ``_id``. Snapshot columns are the documents' top-level fields; values are converted
from extended JSON once, here:

- ``$oid`` -> its hex text; ``$symbol``, ``$code``, ``$uuid``, ``$regularExpression`` (as
  ``/pattern/options``), ``$minKey``/``$maxKey`` (``MinKey``/``MaxKey``) -> text;
- ``$numberInt``, ``$numberLong``, ``$numberDouble`` (``NaN``, ``Infinity`` too) -> numbers, typed
  like plain JSON numbers (bigint, or double when any value of the column has a fraction);
- ``$numberDecimal`` -> an exact decimal, declared ``decimal(p,s)`` by its digits (``NaN``,
  ``Infinity`` or exponent notation are set aside as ``type mismatch``);
- ``$date`` (epoch ms, ``$numberLong`` or ISO text) and ``$timestamp`` (its seconds) -> timestamp;
- ``$binary`` -> binary, or UUID text for subtypes 3 and 4; ``$undefined`` -> null;
- nested documents and arrays -> their JSON text, in the document's own field order, with the
  extended-JSON wrappers inside replaced by plain values (``{"$numberLong": "5"}`` -> ``5``,
  ``{"$oid": "..."}`` -> ``"..."``, ``{"$date": 1}`` -> ``1``): the relaxed JSON a reader expects.

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
_CONVERTED = "map<string,struct<v:variant,t:string,ok:boolean>>"

# Extended-JSON wrappers inside nested documents and arrays -> relaxed JSON values, applied in
# order to Spark's compact JSON text of the value ($numberLong before $date: {"$date": {"$numberLong": ...}}).
_NUMBER = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_NESTED_WRAPPERS = [
    (r'\{"\$numberLong":"(-?\d+)"\}', "$1"),
    (r'\{"\$numberInt":"(-?\d+)"\}', "$1"),
    (r'\{"\$numberDouble":"(' + _NUMBER + r')"\}', "$1"),
    (r'\{"\$numberDouble":"([^"\\]*)"\}', '"$1"'),
    (r'\{"\$numberDecimal":"(' + _NUMBER + r')"\}', "$1"),
    (r'\{"\$numberDecimal":"([^"\\]*)"\}', '"$1"'),
    (r'\{"\$oid":"([0-9A-Fa-f]*)"\}', '"$1"'),
    (r'\{"\$date":(-?\d+)\}', "$1"),
    (r'\{"\$date":("[^"\\]*")\}', "$1"),
    (r'\{"\$timestamp":\{"t":(\d+),"i":\d+\}\}', "$1"),
    (r'\{"\$symbol":("(?:[^"\\]|\\.)*")\}', "$1"),
    (r'\{"\$undefined":true\}', "null"),
]
_INTEGRAL_KINDS = ("BIGINT", "INT", "SMALLINT", "TINYINT")
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


def relaxed_json(text: Expr) -> Expr:
    """The JSON text of a nested value with its extended-JSON wrappers replaced by plain values."""
    relaxed = text
    for pattern, replacement in _NESTED_WRAPPERS:
        relaxed = E.regexp_replace(relaxed, pattern, replacement)
    # Every wrapper starts with {"$: text without one is already relaxed (and is not scanned 12 times).
    return E.when(text.contains('{"$'), relaxed).otherwise(text)


def _uuid_text(b64: Expr) -> Expr:
    def dashed(h: Expr) -> Expr:
        parts = [
            E.substring(h, start, length) for start, length in ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))
        ]
        return E.when(E.length(h) == 32, E.concat_ws("-", *parts))

    # The hex digits decoded once, not once per part.
    return E.let(E.lower(E.hex(E.try_to_binary(b64, "base64"))), dashed)


def _decimal_type(text: Expr) -> Expr:
    """``decimal(p,s)`` holding a plain decimal text exactly (null when it has more than 38 digits)."""
    integral = E.length(E.regexp_extract(text, r"^-?(\d+)", 1))
    scale = E.length(E.regexp_extract(text, r"\.(\d+)$", 1))
    precision = E.greatest(integral + scale, E.lit(1))
    return E.when(precision <= 38, E.format_string("decimal(%d,%d)", precision, scale))


def _out(value: Expr, spark_type: Expr | str | None, ok: Expr | None = None) -> Expr:
    """``struct<v, t, ok>``: the value as a variant, its declared type, whether it converted (non-null)."""
    t = E.lit(spark_type) if isinstance(spark_type, str) else spark_type
    return E.struct(
        value.cast("variant").alias("v"),
        (t if t is not None else E.lit(None)).cast("string").alias("t"),
        (value.isNotNull() if ok is None else ok).alias("ok"),
    )


def _relaxed_out(text: Expr) -> Expr:
    # The relaxed text is null only when the text is: tested on the text, not built twice.
    return _out(relaxed_json(text), "string", ok=text.isNotNull())


def convert_value(v: Expr, text: Expr) -> Expr:
    """One top-level value -> ``struct<v: variant, t: declared Spark type or null, ok: converted>``.

    ``v`` is the value parsed as a variant, ``text`` its JSON text in the document's field order
    (Spark's compact form; a string's own text for a string).
    """

    def at(name: str, spark_type: str = "variant") -> Expr:
        return E.try_variant_get(v, f"$['{name}']", spark_type)

    def has(name: str) -> Expr:
        return at(name).isNotNull()

    date = at("$date")
    date_kind = E.schema_of_variant(date)
    date_ms = E.coalesce(
        E.when(date_kind.isin(*_INTEGRAL_KINDS), E.try_variant_get(date, "$", "bigint")),
        E.try_variant_get(date, "$['$numberLong']", "string").try_cast("bigint"),
    )
    # timestamp_millis is null only for a null input: the epoch milliseconds are read once.
    date_value = E.coalesce(
        E.timestamp_millis(date_ms),
        E.when(date_kind == "STRING", E.try_to_timestamp(E.try_variant_get(date, "$", "string"))),
    )
    binary_b64 = E.coalesce(
        E.try_variant_get(v, "$['$binary'].base64", "string"),
        E.when(E.schema_of_variant(at("$binary")) == "STRING", at("$binary", "string")),
    )
    subtype = E.lower(
        E.coalesce(E.try_variant_get(v, "$['$binary'].subType", "string"), at("$type", "string"))
    )
    is_uuid = subtype.isin("3", "03", "4", "04")
    regex = E.coalesce(
        E.when(
            has("$regularExpression"),
            E.concat(
                E.lit("/"),
                E.try_variant_get(v, "$['$regularExpression'].pattern", "string"),
                E.lit("/"),
                E.coalesce(E.try_variant_get(v, "$['$regularExpression'].options", "string"), E.lit("")),
            ),
        ),
        E.when(
            has("$regex"),
            E.concat(
                E.lit("/"),
                at("$regex", "string"),
                E.lit("/"),
                E.coalesce(at("$options", "string"), E.lit("")),
            ),
        ),
    )
    decimal_text = E.trim(at("$numberDecimal", "string"))
    plain_decimal = decimal_text.rlike(r"^-?\d+(\.\d+)?$")
    # The object's field count from the parsed value (its text is not parsed again).
    field_count = E.size(E.try_variant_get(v, "$", "map<string,variant>"))

    wrapper = (
        E.when(has("$oid"), _out(at("$oid", "string"), "string"))
        .when(has("$numberLong"), _out(E.trim(at("$numberLong", "string")).try_cast("bigint"), None))
        .when(has("$numberInt"), _out(E.trim(at("$numberInt", "string")).try_cast("int"), None))
        .when(has("$numberDouble"), _out(E.trim(at("$numberDouble", "string")).try_cast("double"), None))
        .when(
            has("$numberDecimal"),
            _out(E.when(plain_decimal, E.try_parse_json(decimal_text)), _decimal_type(decimal_text)),
        )
        .when(has("$date"), _out(date_value, "timestamp"))
        .when(
            has("$timestamp"),
            _out(E.timestamp_seconds(E.try_variant_get(v, "$['$timestamp'].t", "bigint")), "timestamp"),
        )
        .when(has("$binary") & is_uuid, _out(_uuid_text(binary_b64), "string"))
        .when(has("$binary"), _out(E.try_to_binary(binary_b64, "base64"), "binary"))
        .when(has("$uuid"), _out(at("$uuid", "string"), "string"))
        .when(has("$regularExpression") | has("$regex"), _out(regex, "string"))
        .when(has("$symbol"), _out(at("$symbol", "string"), "string"))
        .when(has("$code") & (field_count == 1), _out(at("$code", "string"), "string"))
        .when(has("$minKey"), _out(E.lit("MinKey"), "string"))
        .when(has("$maxKey"), _out(E.lit("MaxKey"), "string"))
        .when(
            has("$undefined"),
            E.struct(E.null("variant").alias("v"), E.null("string").alias("t"), E.lit(True).alias("ok")),
        )
        .otherwise(_relaxed_out(text))
    )
    # Objects and arrays are told by a cast that copies nothing (an object to an empty struct) or
    # little, so schema_of_variant, which describes the whole value, runs only on scalars.
    is_object = E.try_variant_get(v, "$", "struct<>").isNotNull()
    is_array = E.try_variant_get(v, "$", "array<struct<>>").isNotNull()
    kind = E.schema_of_variant(v)
    return (
        E.when(
            v.isNull() | E.is_variant_null(v),
            E.struct(v.alias("v"), E.null("string").alias("t"), E.lit(True).alias("ok")),
        )
        .when(is_object, wrapper)
        .when(is_array, _relaxed_out(text))
        .when(kind == "STRING", _out(v, "string"))
        .when(kind == "BOOLEAN", _out(v, "boolean"))
        .otherwise(_out(v, None))
    )


def converted_document(values: Expr, texts: Expr) -> Expr:
    """A document's fields -> its converted fields, ``_CONVERTED``: per field its value, declared
    type and whether it converted; null when there is no document or it is not a JSON object.

    ``values`` and ``texts`` are the document parsed as ``_VALUES`` and as ``_TEXTS``, each in a
    column of its own: an expression bound inside the walk would be evaluated interpreted.
    """
    return E.transform_values(values, lambda k, v: convert_value(v, texts[k]))


def image_of(converted: Expr) -> Expr:
    return E.map_from_arrays(E.map_keys(converted), E.map_values(converted)["v"])


def types_of(converted: Expr) -> Expr:
    types = E.map_from_arrays(E.map_keys(converted), E.map_values(converted)["t"])
    return E.map_filter(types, lambda k, t: t.isNotNull())


def failed(converted: Expr) -> Expr:
    return E.coalesce(E.array_contains(E.map_values(converted)["ok"], False), E.lit(False))


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
        empty = E.map().cast(_CONVERTED)
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

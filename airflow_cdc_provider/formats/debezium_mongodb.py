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

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
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
from airflow_cdc_provider.formats.events import (
    IGNORED_HEARTBEAT,
    IGNORED_KAFKA_KEY,
    IGNORED_TOMBSTONE,
    IGNORED_TRANSACTION,
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
    Q_NESTED_UPDATE,
    Q_TYPE_MISMATCH,
    Q_UNKNOWN_OP,
    canonical,
    classify,
    plan_barrier,
)
from airflow_cdc_provider.formats.jsonlines import parse_json_records
from airflow_cdc_provider.formats.landed_files import LandedFile

KEY_COLUMN = "_id"
# A Kafka key line is short; longer lines are never taken for one (and are not re-parsed to check).
_KEY_LINE_MAX_CHARS = 4096

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
_SNAPSHOT_TRUE = (
    "true",
    "last",
    "first",
    "first_in_data_collection",
    "last_in_data_collection",
    "incremental",
)
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


def relaxed_json(text: Column) -> Column:
    """The JSON text of a nested value with its extended-JSON wrappers replaced by plain values."""
    for pattern, replacement in _NESTED_WRAPPERS:
        text = F.regexp_replace(text, pattern, replacement)
    return text


def _uuid_text(b64: Column) -> Column:
    h = F.lower(F.hex(F.try_to_binary(b64, F.lit("base64"))))
    parts = [F.substring(h, start, length) for start, length in ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))]
    return F.when(F.length(h) == 32, F.concat_ws("-", *parts))


def _decimal_type(text: Column) -> Column:
    """``decimal(p,s)`` holding a plain decimal text exactly (null when it has more than 38 digits)."""
    integral = F.length(F.regexp_extract(text, r"^-?(\d+)", 1))
    scale = F.length(F.regexp_extract(text, r"\.(\d+)$", 1))
    precision = F.greatest(integral + scale, F.lit(1))
    return F.when(precision <= 38, F.format_string("decimal(%d,%d)", precision, scale))


def convert_value(v: Column, text: Column) -> Column:
    """One top-level value -> ``struct<v: variant, t: declared Spark type or null, ok: converted>``.

    ``v`` is the value parsed as a variant, ``text`` its JSON text in the document's field order
    (Spark's compact form; a string's own text for a string).
    """
    kind = F.schema_of_variant(v)

    def at(name: str, spark_type: str = "variant") -> Column:
        return F.try_variant_get(v, f"$['{name}']", spark_type)

    def has(name: str) -> Column:
        return at(name).isNotNull()

    date = at("$date")
    date_kind = F.schema_of_variant(date)
    date_ms = F.coalesce(
        F.when(date_kind.isin(*_INTEGRAL_KINDS), F.try_variant_get(date, "$", "bigint")),
        F.try_variant_get(date, "$['$numberLong']", "string").try_cast("bigint"),
    )
    date_value = F.when(date_ms.isNotNull(), F.timestamp_millis(date_ms)).when(
        date_kind == "STRING", F.try_to_timestamp(F.try_variant_get(date, "$", "string"))
    )
    binary_b64 = F.coalesce(
        F.try_variant_get(v, "$['$binary'].base64", "string"),
        F.when(F.schema_of_variant(at("$binary")) == "STRING", at("$binary", "string")),
    )
    subtype = F.lower(
        F.coalesce(F.try_variant_get(v, "$['$binary'].subType", "string"), at("$type", "string"))
    )
    is_uuid = subtype.isin("3", "03", "4", "04")
    regex = F.coalesce(
        F.when(
            has("$regularExpression"),
            F.concat(
                F.lit("/"),
                F.try_variant_get(v, "$['$regularExpression'].pattern", "string"),
                F.lit("/"),
                F.coalesce(F.try_variant_get(v, "$['$regularExpression'].options", "string"), F.lit("")),
            ),
        ),
        F.when(
            has("$regex"),
            F.concat(
                F.lit("/"),
                at("$regex", "string"),
                F.lit("/"),
                F.coalesce(at("$options", "string"), F.lit("")),
            ),
        ),
    )
    decimal_text = F.trim(at("$numberDecimal", "string"))
    plain_decimal = decimal_text.rlike(r"^-?\d+(\.\d+)?$")

    def out(value: Column, spark_type: Column | str | None) -> Column:
        t = F.lit(spark_type) if isinstance(spark_type, str) else spark_type
        return F.struct(
            value.cast("variant").alias("v"),
            (t if t is not None else F.lit(None)).cast("string").alias("t"),
            value.isNotNull().alias("ok"),
        )

    object_kind = kind.startswith("OBJECT")
    return (
        F.when(
            v.isNull() | F.is_variant_null(v),
            F.struct(v.alias("v"), F.lit(None).cast("string").alias("t"), F.lit(True).alias("ok")),
        )
        .when(kind == "STRING", out(v, "string"))
        .when(kind == "BOOLEAN", out(v, "boolean"))
        .when(kind.startswith("ARRAY"), out(relaxed_json(text), "string"))
        .when(~object_kind, out(v, None))
        .when(has("$oid"), out(at("$oid", "string"), "string"))
        .when(has("$numberLong"), out(F.trim(at("$numberLong", "string")).try_cast("bigint"), None))
        .when(has("$numberInt"), out(F.trim(at("$numberInt", "string")).try_cast("int"), None))
        .when(has("$numberDouble"), out(F.trim(at("$numberDouble", "string")).try_cast("double"), None))
        .when(
            has("$numberDecimal"),
            out(F.when(plain_decimal, F.try_parse_json(decimal_text)), _decimal_type(decimal_text)),
        )
        .when(has("$date"), out(date_value, "timestamp"))
        .when(
            has("$timestamp"),
            out(F.timestamp_seconds(F.try_variant_get(v, "$['$timestamp'].t", "bigint")), "timestamp"),
        )
        .when(has("$binary") & is_uuid, out(_uuid_text(binary_b64), "string"))
        .when(has("$binary"), out(F.try_to_binary(binary_b64, F.lit("base64")), "binary"))
        .when(has("$uuid"), out(at("$uuid", "string"), "string"))
        .when(has("$regularExpression") | has("$regex"), out(regex, "string"))
        .when(has("$symbol"), out(at("$symbol", "string"), "string"))
        .when(has("$code") & (F.size(F.json_object_keys(text)) == 1), out(at("$code", "string"), "string"))
        .when(has("$minKey"), out(F.lit("MinKey"), "string"))
        .when(has("$maxKey"), out(F.lit("MaxKey"), "string"))
        .when(
            has("$undefined"),
            F.struct(
                F.lit(None).cast("variant").alias("v"),
                F.lit(None).cast("string").alias("t"),
                F.lit(True).alias("ok"),
            ),
        )
        .otherwise(out(relaxed_json(text), "string"))
    )


def converted_document(doc: Column) -> tuple[Column, Column]:
    """An extended-JSON document text -> (converted fields map, the text is not a JSON object).

    The map is ``_CONVERTED``: per field its value, declared type and whether it converted; null
    when there is no document.
    """
    texts = F.from_json(doc, _TEXTS)
    values = F.from_json(doc, _VALUES)
    converted = F.transform_values(values, lambda k, v: convert_value(v, texts[k]))
    return converted, doc.isNotNull() & values.isNull()


def image_of(converted: Column) -> Column:
    return F.transform_values(converted, lambda k, c: c["v"])


def types_of(converted: Column) -> Column:
    return F.map_filter(F.transform_values(converted, lambda k, c: c["t"]), lambda k, t: t.isNotNull())


def failed(converted: Column) -> Column:
    return F.coalesce(F.exists(F.map_values(converted), lambda c: ~c["ok"]), F.lit(False))


def _overlay(base: Column, top: Column) -> Column:
    replaced = F.transform_values(
        base, lambda k, v: F.when(F.map_contains_key(top, k), F.try_element_at(top, k)).otherwise(v)
    )
    return F.map_concat(replaced, F.map_filter(top, lambda k, v: ~F.map_contains_key(base, k)))


def _only_id(converted: Column) -> Column:
    return F.map_filter(converted, lambda k, c: k == KEY_COLUMN)


def _id_document(id_text: Column) -> Column:
    """A Kafka key's ``id`` (extended JSON of ``_id``) as the document ``{"_id": ...}``."""
    return F.when(id_text.isNotNull(), F.concat(F.lit('{"_id":'), id_text, F.lit("}")))


def is_key_line(text: Column) -> Column:
    """A Kafka key as Debezium writes it: ``{"id": ...}``, bare or in a Connect ``payload``."""
    # Cheap tests first: a value names its "op", a key never does; only the rest is parsed again.
    short = (
        (F.length(text) <= _KEY_LINE_MAX_CHARS) & (F.instr(text, '"op"') == 0) & (F.instr(text, '"id"') > 0)
    )
    keys = F.array_sort(F.json_object_keys(text))
    payload_keys = F.json_object_keys(F.get_json_object(text, "$.payload"))
    bare = keys == F.array(F.lit("id"))
    wrapped = ((keys == F.array(F.lit("payload"))) | (keys == F.array(F.lit("payload"), F.lit("schema")))) & (
        payload_keys == F.array(F.lit("id"))
    )
    return F.coalesce(short & (bare | wrapped), F.lit(False))


def key_line_id(text: Column) -> Column:
    """The ``id`` text of a Kafka key line (null for any other record)."""
    return F.when(
        is_key_line(text),
        F.coalesce(F.get_json_object(text, "$.id"), F.get_json_object(text, "$.payload.id")),
    )


def _envelope() -> Column:
    names = [f.name for f in _ENVELOPE_FIELDS]
    return F.when(F.col("j.payload").isNotNull(), F.col("j.payload")).otherwise(
        F.struct(*[F.col(f"j.{n}").alias(n) for n in names])
    )


class DebeziumMongodbDecoder(Decoder):
    name = "debezium-mongodb"
    description = (
        "Debezium MongoDB connector: extended-JSON after/before documents keyed by _id (Kafka key lines "
        "paired with their values), updateDescription/patch partial updates, top-level fields as columns"
    )
    needs = ""
    partial_images = True

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        parsed = parse_json_records(spark, files, RECORD_SCHEMA, previous_max_chars=_KEY_LINE_MAX_CHARS)
        staged = plan_barrier(self._documents(parsed))
        return self._events(plan_barrier(self._images(staged)))

    @staticmethod
    def _documents(parsed: DataFrame) -> DataFrame:
        """Per record: its envelope, whether it is a key line, and every document it carries, converted."""
        e = _envelope()
        description = e["updateDescription"]
        patch = F.from_json(e["patch"], _TEXTS)
        patch_ops = F.when(
            F.exists(F.map_keys(patch), lambda k: k.startswith("$")) | F.map_contains_key(patch, "diff"),
            patch,
        )
        diff = F.from_json(patch_ops["diff"], _TEXTS)
        # Fields set (documents) and removed (names) by a partial update, whatever its form.
        unset_names = F.flatten(
            F.array(
                F.coalesce(description["removedFields"], F.array().cast("array<string>")),
                F.coalesce(
                    F.map_keys(F.from_json(patch_ops["$unset"], _TEXTS)), F.array().cast("array<string>")
                ),
                F.coalesce(F.map_keys(F.from_json(diff["d"], _TEXTS)), F.array().cast("array<string>")),
            )
        )
        nested_diff = F.exists(F.map_keys(diff), lambda k: ~k.isin("u", "i", "d"))
        truncated = F.coalesce(F.trim(description["truncatedArrays"]).isin("[]", "null"), F.lit(True))
        converted = {
            "after_doc": e["after"],
            "before_doc": e["before"],
            # A 1.x patch without update operators replaces the whole document.
            "replacement_doc": F.when(e["patch"].isNotNull() & patch_ops.isNull(), e["patch"]),
            "updated_doc": description["updatedFields"],
            "set_doc": patch_ops["$set"],
            "diff_u_doc": diff["u"],
            "diff_i_doc": diff["i"],
            "filter_doc": e["filter"],
            "key_doc": _id_document(key_line_id(F.col("previous"))),
        }
        columns = []
        for name, doc in converted.items():
            c, not_object = converted_document(doc)
            columns += [c.alias(name), not_object.alias(f"{name}_not_object")]
        return parsed.select(
            "file",
            "file_pos",
            "line",
            "text",
            "tombstone",
            "bad",
            e.alias("e"),
            is_key_line(F.col("text")).alias("is_key"),
            (
                F.exists(unset_names, lambda n: n.contains("."))
                | F.coalesce(nested_diff, F.lit(False))
                | ~truncated
            ).alias("nested_unset"),
            unset_names.alias("unset_names"),
            (e["patch"].isNotNull() & patch.isNull()).alias("patch_not_object"),
            *columns,
        )

    @staticmethod
    def _images(staged: DataFrame) -> DataFrame:
        e = F.col("e")
        src = e["source"]
        raw = e["op"]
        op = F.lit(None).cast("string")
        for code, canonical_op in _OPS.items():
            op = F.when(raw == code, F.lit(canonical_op)).otherwise(op)
        op = F.when(
            (op == OP_INSERT) & F.lower(src["snapshot"]).isin(*_SNAPSHOT_TRUE), F.lit(OP_READ)
        ).otherwise(op)
        empty = F.create_map().cast(_CONVERTED)
        sets = [F.col(n) for n in ("updated_doc", "set_doc", "diff_u_doc", "diff_i_doc")]
        set_fields = F.lit(None).cast(_CONVERTED)
        for s in sets:
            set_fields = F.when(s.isNotNull(), _overlay(F.coalesce(set_fields, empty), s)).otherwise(
                set_fields
            )
        unset = F.col("unset_names")
        unset_fields = F.map_from_arrays(
            unset,
            F.transform(
                unset,
                lambda n: F.struct(
                    F.lit(None).cast("variant").alias("v"),
                    F.lit(None).cast("string").alias("t"),
                    F.lit(True).alias("ok"),
                ),
            ),
        )
        has_partial = set_fields.isNotNull() | (F.size(unset) > 0)
        partial_fields = _overlay(F.coalesce(set_fields, empty), unset_fields)
        # _id: the document's own, else the Kafka key, else the 1.x filter.
        id_image = F.coalesce(
            F.when(F.map_contains_key(F.col("key_doc"), KEY_COLUMN), _only_id(F.col("key_doc"))),
            F.when(F.map_contains_key(F.col("filter_doc"), KEY_COLUMN), _only_id(F.col("filter_doc"))),
            F.when(F.map_contains_key(F.col("before_doc"), KEY_COLUMN), _only_id(F.col("before_doc"))),
        )
        full_after = F.coalesce(F.col("after_doc"), F.col("replacement_doc"))
        after = F.when(op.isin(OP_INSERT, OP_READ, OP_UPDATE) & full_after.isNotNull(), full_after).when(
            (op == OP_UPDATE) & has_partial, _overlay(F.coalesce(id_image, empty), partial_fields)
        )
        before = F.when(op == OP_DELETE, F.coalesce(F.col("before_doc"), id_image)).when(
            op == OP_UPDATE, F.col("before_doc")
        )
        docs = [
            "after_doc",
            "before_doc",
            "replacement_doc",
            "updated_doc",
            "set_doc",
            "diff_u_doc",
            "diff_i_doc",
            "filter_doc",
            "key_doc",
        ]
        return staged.select(
            "file",
            "file_pos",
            "line",
            "text",
            "tombstone",
            "bad",
            "e",
            "is_key",
            op.alias("op"),
            F.when(src["collection"].isNotNull(), F.concat_ws(".", src["db"], src["collection"])).alias(
                "table"
            ),
            after.alias("after_c"),
            before.alias("before_c"),
            ((op == OP_UPDATE) & full_after.isNull() & has_partial).alias("partial"),
            (
                (op == OP_UPDATE)
                & full_after.isNull()
                & (
                    F.col("nested_unset")
                    | F.exists(F.map_keys(F.coalesce(set_fields, empty)), lambda k: k.contains("."))
                )
            ).alias("nested"),
            F.exists(
                F.array(*[F.col(f"{d}_not_object") for d in docs], F.col("patch_not_object")), lambda x: x
            ).alias("not_object"),
            F.exists(F.array(*[failed(F.col(d)) for d in docs]), lambda x: x).alias("conversion_failed"),
        )

    @staticmethod
    def _events(images: DataFrame) -> DataFrame:
        e = F.col("e")
        src = e["source"]
        op = F.col("op")
        has_op = e["op"].isNotNull()
        kind, reason = classify(
            (F.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
            (F.col("bad").isNull() & F.col("is_key"), KIND_IGNORED, IGNORED_KAFKA_KEY),
            (F.col("bad").isNotNull(), KIND_QUARANTINED, "<bad>"),
            (e["status"].isin("BEGIN", "END") & ~has_op, KIND_IGNORED, IGNORED_TRANSACTION),
            (
                ~has_op & e["ts_ms"].isNotNull() & src.isNull() & e["after"].isNull() & e["before"].isNull(),
                KIND_IGNORED,
                IGNORED_HEARTBEAT,
            ),
            (~has_op, KIND_QUARANTINED, Q_MISSING_OP),
            (op.isNull(), KIND_QUARANTINED, Q_UNKNOWN_OP),
            (F.col("table").isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
            (F.col("not_object"), KIND_QUARANTINED, Q_IMAGE_NOT_OBJECT),
            (F.col("conversion_failed"), KIND_QUARANTINED, Q_TYPE_MISMATCH),
            (F.col("nested"), KIND_QUARANTINED, Q_NESTED_UPDATE),
            (
                op.isin(OP_INSERT, OP_READ, OP_UPDATE) & F.col("after_c").isNull(),
                KIND_QUARANTINED,
                Q_MISSING_IMAGE,
            ),
            ((op == OP_DELETE) & F.col("before_c").isNull(), KIND_QUARANTINED, Q_KEY_UNKNOWN),
        )
        reason = F.when(reason == "<bad>", F.col("bad")).otherwise(reason)
        is_change = kind == KIND_CHANGE
        applied_image = F.when(op == OP_DELETE, F.col("before_c")).otherwise(F.col("after_c"))
        types = types_of(applied_image)
        return images.select(
            *canonical(
                table=F.col("table"),
                kind=kind,
                op=F.when(is_change, op),
                reason=reason,
                # A source.ts_ms of 0 is no time: the envelope's ts_ms (when the connector read it) is.
                event_ms=F.coalesce(F.when(src["ts_ms"] != 0, src["ts_ms"]), e["ts_ms"]),
                log_pos=F.when(
                    src["ts_ms"].isNotNull() & src["ord"].isNotNull(), F.array(src["ts_ms"], src["ord"])
                ),
                sub_pos=F.lit(0),
                tx_id=e["transaction"]["id"],
                before=F.when(is_change, image_of(F.col("before_c"))).cast(IMAGE_TYPE),
                after=F.when(is_change & (op != OP_DELETE), image_of(F.col("after_c"))).cast(IMAGE_TYPE),
                partial=F.coalesce(is_change & F.col("partial"), F.lit(False)),
                key_cols=F.array(F.lit(KEY_COLUMN)),
                types=F.when(is_change & (F.size(types) > 0), types),
                file=F.col("file"),
                file_pos=F.col("file_pos"),
                line=F.col("line"),
                raw=F.col("text"),
            )
        )

"""MongoDB extended JSON -> typed values: the conversion of a document's top-level fields.

Used by the MongoDB decoder (``mongodb``), whose ``after``/``before`` documents and partial updates
are extended-JSON strings. Each top-level value becomes ``struct<v, t, ok>`` (``CONVERTED`` holds a
document of them): the value as a variant, its declared Spark type (null: typed from its values),
and whether it converted.

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
"""

from __future__ import annotations

from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr

# A converted document: per field its value, declared type and whether it converted.
CONVERTED = "map<string,struct<v:variant,t:string,ok:boolean>>"

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


def _at(v: Expr, name: str, spark_type: str = "variant") -> Expr:
    """Field ``name`` of the object ``v`` as ``spark_type`` (null when it has none)."""
    return E.try_variant_get(v, f"$['{name}']", spark_type)


def _has(v: Expr, name: str) -> Expr:
    return _at(v, name).isNotNull()


def _date_value(v: Expr) -> Expr:
    """A ``$date`` wrapper's timestamp: epoch ms (a number or ``$numberLong``), or ISO text."""
    date = _at(v, "$date")
    date_kind = E.schema_of_variant(date)
    date_ms = E.coalesce(
        E.when(date_kind.isin(*_INTEGRAL_KINDS), E.try_variant_get(date, "$", "bigint")),
        E.try_variant_get(date, "$['$numberLong']", "string").try_cast("bigint"),
    )
    # timestamp_millis is null only for a null input: the epoch milliseconds are read once.
    return E.coalesce(
        E.timestamp_millis(date_ms),
        E.when(date_kind == "STRING", E.try_to_timestamp(E.try_variant_get(date, "$", "string"))),
    )


def _binary_base64(v: Expr) -> Expr:
    """A ``$binary`` wrapper's Base64 text: canonical (``{"base64", "subType"}``) or legacy (text)."""
    return E.coalesce(
        E.try_variant_get(v, "$['$binary'].base64", "string"),
        E.when(E.schema_of_variant(_at(v, "$binary")) == "STRING", _at(v, "$binary", "string")),
    )


def _is_uuid_binary(v: Expr) -> Expr:
    """Whether a ``$binary`` holds a UUID: subtype 3 or 4 (canonical ``subType``, legacy ``$type``)."""
    subtype = E.lower(
        E.coalesce(E.try_variant_get(v, "$['$binary'].subType", "string"), _at(v, "$type", "string"))
    )
    return subtype.isin("3", "03", "4", "04")


def _regex_text(v: Expr) -> Expr:
    """A regular expression as ``/pattern/options``: canonical ``$regularExpression`` or legacy ``$regex``."""
    return E.coalesce(
        E.when(
            _has(v, "$regularExpression"),
            E.concat(
                E.lit("/"),
                E.try_variant_get(v, "$['$regularExpression'].pattern", "string"),
                E.lit("/"),
                E.coalesce(E.try_variant_get(v, "$['$regularExpression'].options", "string"), E.lit("")),
            ),
        ),
        E.when(
            _has(v, "$regex"),
            E.concat(
                E.lit("/"),
                _at(v, "$regex", "string"),
                E.lit("/"),
                E.coalesce(_at(v, "$options", "string"), E.lit("")),
            ),
        ),
    )


def _decimal_out(v: Expr) -> Expr:
    """A ``$numberDecimal`` as an exact decimal of its own digits; text that is no plain decimal
    (``NaN``, ``Infinity``, exponent notation) does not convert."""
    decimal_text = E.trim(_at(v, "$numberDecimal", "string"))
    plain_decimal = decimal_text.rlike(r"^-?\d+(\.\d+)?$")
    return _out(E.when(plain_decimal, E.try_parse_json(decimal_text)), _decimal_type(decimal_text))


def _object_out(v: Expr, text: Expr) -> Expr:
    """An object value converted: the value of the extended-JSON wrapper it is, else (a nested
    document) its relaxed JSON text."""
    # The object's field count from the parsed value (its text is not parsed again).
    field_count = E.size(E.try_variant_get(v, "$", "map<string,variant>"))
    return (
        E.when(_has(v, "$oid"), _out(_at(v, "$oid", "string"), "string"))
        .when(_has(v, "$numberLong"), _out(E.trim(_at(v, "$numberLong", "string")).try_cast("bigint"), None))
        .when(_has(v, "$numberInt"), _out(E.trim(_at(v, "$numberInt", "string")).try_cast("int"), None))
        .when(
            _has(v, "$numberDouble"), _out(E.trim(_at(v, "$numberDouble", "string")).try_cast("double"), None)
        )
        .when(_has(v, "$numberDecimal"), _decimal_out(v))
        .when(_has(v, "$date"), _out(_date_value(v), "timestamp"))
        .when(
            _has(v, "$timestamp"),
            _out(E.timestamp_seconds(E.try_variant_get(v, "$['$timestamp'].t", "bigint")), "timestamp"),
        )
        .when(_has(v, "$binary") & _is_uuid_binary(v), _out(_uuid_text(_binary_base64(v)), "string"))
        .when(_has(v, "$binary"), _out(E.try_to_binary(_binary_base64(v), "base64"), "binary"))
        .when(_has(v, "$uuid"), _out(_at(v, "$uuid", "string"), "string"))
        .when(_has(v, "$regularExpression") | _has(v, "$regex"), _out(_regex_text(v), "string"))
        .when(_has(v, "$symbol"), _out(_at(v, "$symbol", "string"), "string"))
        .when(_has(v, "$code") & (field_count == 1), _out(_at(v, "$code", "string"), "string"))
        .when(_has(v, "$minKey"), _out(E.lit("MinKey"), "string"))
        .when(_has(v, "$maxKey"), _out(E.lit("MaxKey"), "string"))
        .when(
            _has(v, "$undefined"),
            E.struct(E.null("variant").alias("v"), E.null("string").alias("t"), E.lit(True).alias("ok")),
        )
        .otherwise(_relaxed_out(text))
    )


def convert_value(v: Expr, text: Expr) -> Expr:
    """One top-level value -> ``struct<v: variant, t: declared Spark type or null, ok: converted>``.

    ``v`` is the value parsed as a variant, ``text`` its JSON text in the document's field order
    (Spark's compact form; a string's own text for a string). Strings, booleans and the wrappers'
    text forms are declared; plain numbers are typed from their values.
    """
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
        .when(is_object, _object_out(v, text))
        .when(is_array, _relaxed_out(text))
        .when(kind == "STRING", _out(v, "string"))
        .when(kind == "BOOLEAN", _out(v, "boolean"))
        .otherwise(_out(v, None))
    )


def converted_document(values: Expr, texts: Expr) -> Expr:
    """A document's fields -> its converted fields, ``CONVERTED``: per field its value, declared
    type and whether it converted; null when there is no document or it is not a JSON object.

    ``values`` and ``texts`` are the document parsed as ``map<string,variant>`` and as
    ``map<string,string>``, each in a column of its own: an expression bound inside the walk would
    be evaluated interpreted.
    """
    return E.transform_values(values, lambda k, v: convert_value(v, texts[k]))


def image_of(converted: Expr) -> Expr:
    """A converted document's values (the row image)."""
    return E.map_from_arrays(E.map_keys(converted), E.map_values(converted)["v"])


def types_of(converted: Expr) -> Expr:
    """A converted document's declared types (fields without one left out)."""
    types = E.map_from_arrays(E.map_keys(converted), E.map_values(converted)["t"])
    return E.map_filter(types, lambda k, t: t.isNotNull())


def failed(converted: Expr) -> Expr:
    """Whether some value of a converted document did not convert."""
    return E.coalesce(E.array_contains(E.map_values(converted)["ok"], False), E.lit(False))

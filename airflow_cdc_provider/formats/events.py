"""The canonical change event: the one schema every decoder produces and the engine consumes.

Every source format is turned into rows of ``CANONICAL_EVENT_SCHEMA``. The engine never looks at
a vendor field; a decoder never orders, folds or types a snapshot. Row images are
``map<string, variant>`` so that one DataFrame can hold many tables with different columns, a
column that is absent from an image stays absent (not null), and values keep their JSON or
declared type until the snapshot is typed per table.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    VariantType,
)

from airflow_cdc_provider.contract import tables
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr

# op: what a row change does.
OP_INSERT = "insert"
OP_READ = "read"  # snapshot read (full load): applied like an insert
OP_UPDATE = "update"
OP_DELETE = "delete"
OP_TRUNCATE = "truncate"
ROW_OPS = (OP_INSERT, OP_READ, OP_UPDATE, OP_DELETE, OP_TRUNCATE)

# kind: whether the record is a row change at all.
KIND_CHANGE = "change"
KIND_IGNORED = "ignored"  # DDL, heartbeat, transaction marker, tombstone: counted, never applied
KIND_QUARANTINED = "quarantined"  # could not be decoded: written to _quarantine with its reason

# Reasons for ignored records.
IGNORED_TOMBSTONE = "tombstone"
IGNORED_DDL = "ddl"
IGNORED_HEARTBEAT = "heartbeat"
IGNORED_TRANSACTION = "transaction marker"
IGNORED_TABLE_FILTER = "table not selected"
IGNORED_UPDATE_BEFORE = (
    "update before image"  # first half of a before/after update pair, folded into the second
)
IGNORED_BOOTSTRAP = "bootstrap marker"  # Maxwell's bootstrap-start / bootstrap-complete around a full load
IGNORED_KAFKA_KEY = "Kafka key"  # a landed Kafka key line; its value is the next record (Debezium MongoDB)

# Reasons for quarantined records (the documented list: docs/contract.md, "Quarantine records").
Q_NOT_JSON = "not JSON"
Q_NOT_UTF8 = "not UTF-8"  # bytes that are not UTF-8: parsing would silently replace them
Q_TOO_LARGE = "record too large"  # over 16 MiB: no image that large fits a Spark variant
Q_TRUNCATED = "truncated"
Q_NOT_OBJECT = "not a JSON object"
Q_UNKNOWN_OP = "unknown op"
Q_MISSING_OP = "missing op"
Q_MISSING_KEY = "missing key"
Q_KEY_UNKNOWN = "key unknown: delete with neither before nor after image"
Q_MISSING_IMAGE = "missing image"
Q_IMAGE_NOT_OBJECT = "row image not an object"
Q_TYPE_MISMATCH = "type mismatch"
Q_BAD_BASE64 = "bad Base64"
Q_BAD_AVRO = "bad Avro"
Q_UNKNOWN_TABLE = "unknown table/schema"
Q_MISSING_TABLE = "missing table"
# An update that only names changed nested fields (a dotted path, an array truncation) and no full
# document: the snapshot holds top-level fields, so it cannot be applied exactly (Debezium MongoDB).
Q_NESTED_UPDATE = "update of a nested field without the full document"
Q_BAD_PARQUET = "bad Parquet"  # a landed .parquet file whose footer does not read
Q_NO_COLUMNS = "no column list"  # a headerless CSV row of a table no --columns or definition names
Q_CSV_WIDTH = "CSV row width does not match its column list"

IMAGE_TYPE = MapType(StringType(), VariantType(), valueContainsNull=True)

CANONICAL_EVENT_SCHEMA = StructType(
    [
        StructField("table", StringType()),  # qualified: db.table, namespace.table, db.schema.table
        StructField("kind", StringType(), nullable=False),
        StructField("op", StringType()),
        StructField("reason", StringType()),  # why ignored / quarantined
        StructField("event_ms", LongType()),  # source commit/change time, epoch ms
        StructField("log_pos", ArrayType(LongType())),  # source log position, compared element-wise
        # The record names a log position that cannot be read (e.g. an LSN outside 64 bits): it is
        # ordered by event time and place in the landing instead, and counted.
        StructField("log_pos_unreadable", BooleanType()),
        StructField("sub_pos", IntegerType()),  # row index inside a multi-row message
        StructField("tx_id", StringType()),
        StructField("tx_end", BooleanType()),
        # An ignored DDL event's ``before`` lists the columns it drops (as nulls), and its
        # ``types`` the columns it adds: the two DDL effects a snapshot shows.
        StructField("before", IMAGE_TYPE),
        StructField("after", IMAGE_TYPE),
        StructField("partial", BooleanType()),  # after image carries only changed columns
        # Columns whose value was the connector's unavailable-value placeholder ("unchanged",
        # ``formats/debezium/unavailable.py``): left out of the after image; null when there were none.
        StructField("unavailable", ArrayType(StringType())),
        StructField("key_cols", ArrayType(StringType())),  # key columns the record names, if any
        StructField("types", MapType(StringType(), StringType())),  # declared Spark types
        StructField("file", StringType(), nullable=False),
        StructField("file_pos", LongType(), nullable=False),  # orders records within a file
        StructField("line", LongType()),  # 1-based line number, where known
        StructField("raw", StringType()),  # the record as landed (quarantine, duplicate detection)
    ]
)
CANONICAL_COLUMNS = tuple(f.name for f in CANONICAL_EVENT_SCHEMA.fields)


def position_text(file: str, line: int | None, file_pos: int, sub_pos: int | None = None) -> str:
    """Where a record is, as errors and reasons name it: ``FILE line N`` or ``FILE record at file position P``."""
    where = f"line {line}" if line is not None else f"record at file position {file_pos}"
    if sub_pos:
        where += f", row {sub_pos}"
    return f"{file} {where}"


# Where a record sits in the landing: every decoder carries these columns of the reader through.
LANDING_POSITION = ("file", "file_pos", "line")


def canonical(**columns: Expr) -> list[Column]:
    """Select list in canonical order; ``LANDING_POSITION`` columns not given are read from the input
    frame's columns of the same name, other columns not given are typed nulls.

    Decoders call this once with the columns they know, so a new canonical field never breaks
    a decoder and every decoder's output has exactly the canonical schema. Values built with
    ``sqlexpr`` become one JVM call each.
    """
    unknown = set(columns) - set(CANONICAL_COLUMNS)
    if unknown:
        raise ValueError(f"not canonical event columns: {sorted(unknown)}")
    columns = {**{name: E.col(name) for name in LANDING_POSITION}, **columns}
    out = []
    for field in CANONICAL_EVENT_SCHEMA.fields:
        value = columns.get(field.name)
        if value is None:
            value = E.lit(None)
        out.append(value.cast(field.dataType).alias(field.name).column())
    return out


def classify(
    *cases: tuple[Expr, str, str | Expr | None], default_kind: Expr | str = KIND_CHANGE
) -> tuple[Expr, Expr]:
    """Build (kind, reason) from ``(condition, kind, reason)`` cases, first match wins.

    Keeps each decoder's list of "what makes a record bad" in one readable table. A reason is a
    text, an expression (the decoder's own message, such as a parse error) or None. Both results
    read one CASE of (kind, reason) pairs, so a projection holding both tests the conditions once.
    """

    def outcome(kind: Expr, reason: str | Expr | None) -> Expr:
        text = E.null("string") if reason is None else reason if isinstance(reason, Expr) else E.lit(reason)
        return E.struct(kind.alias("kind"), text.alias("reason"))

    condition, kind, reason = cases[0]
    chosen = E.when(condition, outcome(E.lit(kind), reason))
    for condition, kind, reason in cases[1:]:
        chosen = chosen.when(condition, outcome(E.lit(kind), reason))
    default = E.lit(default_kind) if isinstance(default_kind, str) else default_kind
    chosen = chosen.otherwise(outcome(default, None))
    return chosen["kind"], chosen["reason"]


def empty_image() -> Expr:
    """An image that carries no column (not the same as a null image)."""
    return E.map().cast(IMAGE_TYPE)


def overlay(base: Expr, top: Expr) -> Expr:
    """``base`` with ``top``'s values in place of its own, in ``base``'s column order; ``top``'s other
    columns follow (``map_concat`` alone refuses a key both maps hold).

    An empty side (an insert has no old values, most rows carry no row id) skips the lambdas, which
    Spark runs interpreted. Each side is read several times: pass columns or lambda variables.
    """
    replaced = E.transform_values(
        base, lambda k, v: E.when(E.map_contains_key(top, k), E.try_element_at(top, k)).otherwise(v)
    )
    both = E.map_concat(replaced, E.map_filter(top, lambda k, v: ~E.map_contains_key(base, k)))
    return E.when(E.size(top) == 0, base).when(E.size(base) == 0, top).otherwise(both)


def _quoted_part(part: Expr) -> Expr:
    """``contract.tables.quote_part`` in Spark: a part quoted when it is empty or holds ``.`` or ``"``."""
    quote = tables.QUOTE
    ambiguous = (part == "") | part.contains(tables.SEPARATOR) | part.contains(quote)
    quoted = E.concat(E.lit(quote), E.replace(part, E.lit(quote), E.lit(quote * 2)), E.lit(quote))
    return E.when(ambiguous, quoted).otherwise(part)


def qualified_table(*parts: Expr) -> Expr:
    """A table's qualified name from its parts (``contract.tables.qualify``; null parts left out).

    Every decoder names its table through this (or ``dotted_table`` for a source that gives one
    dotted string), so that tables whose parts differ never share a name.
    """
    return E.concat_ws(tables.SEPARATOR, *[_quoted_part(p) for p in parts])


def dotted_table(text: Expr) -> Expr:
    """The qualified name of a source's own dotted table string (``SCHEMA.TABLE``, ``db.table``).

    Its parts are the dot-separated pieces (the source itself cannot say otherwise); a piece
    holding a ``"`` or an empty piece is quoted, so that the name reads back as the same string.
    """
    pieces = E.split(text, r"\.")
    quoted = E.array_join(E.transform(pieces, _quoted_part), tables.SEPARATOR)
    return E.when(
        (text == "")
        | text.contains(tables.QUOTE)
        | text.contains("..")
        | text.startswith(".")
        | text.endswith("."),
        quoted,
    ).otherwise(text)


def table_matches(table: Expr, names: tuple[str, ...]) -> Expr:
    """Whether ``table`` is named by any of ``names`` (``contract.tables.matching_reading``).

    Each name reads as its possible qualified forms; a table matches a form that is its whole
    qualified name or its last parts (a quoted part never holds an unquoted ``.``, so a suffix
    after a ``.`` starts a part).
    """
    selected = E.lit(False)
    for name in names:
        for form in tables.name_forms(name):
            selected = selected | (table == form) | table.endswith(tables.SEPARATOR + form)
    return selected

"""Qlik Replicate JSON: the ``atMSG`` envelope with metadata (MD) and data (DT) messages.

A DT message carries column values but neither their types, nor the key, nor (usually) its table:
those are in the MD message Replicate sends when a table is first replicated or its structure
changes. The decoder therefore builds a small lookup from the MD messages of the same landing
(``metadata``) and broadcasts it to the DT messages. It is tied to a DT message by, in order:

1. ``messageSchemaId`` = the MD ``schemaId`` (Avro-style landings);
2. the DT's ``schema``/``table`` fields (landings that add them), matched to the MD lineage name;
3. ``DecodeOptions.table`` (``--table``), for files that hold one table;
4. otherwise the one table whose MD columns hold every column of the message.

A DT message no MD explains is quarantined ("unknown table/schema"), never guessed.

Reading the MD messages is a second, restricted pass over the landed text: only lines that contain
``"MD"`` are parsed, and the result is one small row per table version. It runs while the decode is
planned and its rows come to the driver, so that an image holding exactly a version's columns is
typed by one compiled expression per column with the literal type (up to
``metadata._SPECIALISED_COLUMNS`` columns over all versions); other images (a column mask that
leaves columns out, a column the MD does not declare) take the general per-value typing, with the
same result (``images``). The main pass parses every record once; nothing is cached.

``columnMask`` (hex, little-endian bytes: bit ``ordinal - 1``) says which columns the message
carries. A column whose bit is clear was not captured (Oracle without full supplemental logging): it
is left out of the image and the image is marked partial, so the column keeps its previous value.
``changeSequence`` (``YYYYMMDDHHmmSShh`` + a 19-digit counter) becomes the log position. Full-load
``REFRESH`` rows get position ``[0, 0, 0]`` (Replicate leaves their CDC headers empty), so they order
before every change of their table, and no event time, so no AS OF excludes them.

The decode, top-down: ``_staged`` (each record's lookup key, event time and images), ``lookup``
(the MD side), ``_resolved`` (each record's table version and table), ``_events`` (the op and
mask, the typed images, then the canonical event).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType, VariantType

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.common.jsonlines import parse_json_records
from airflow_cdc_provider.formats.common.values import not_an_object, object_map
from airflow_cdc_provider.formats.events import (
    IGNORED_DDL,
    IGNORED_TOMBSTONE,
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
    Q_TYPE_MISMATCH,
    Q_UNKNOWN_OP,
    Q_UNKNOWN_TABLE,
    canonical,
    classify,
)
from airflow_cdc_provider.formats.qlik.images import typed_images
from airflow_cdc_provider.formats.qlik.metadata import (
    BY_COLUMNS,
    BY_ID,
    BY_NAME,
    LINEAGE,
    DeclaredVersion,
    lookup,
    strings,
)
from airflow_cdc_provider.formats.qlik.values import (
    blank_to_null,
    change_sequence_position,
    column_present,
    utc_millis,
)
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile
from airflow_cdc_provider.spark.sqlexpr import Expr

_HEADERS = strings(
    "operation",
    "changeSequence",
    "timestamp",
    "streamPosition",
    "transactionId",
    "changeMask",
    "columnMask",
    "transactionEventCounter",
    "transactionLastEvent",
)
_MESSAGE = StructType(
    [
        StructField("schemaId", StringType()),
        StructField("lineage", LINEAGE),
        StructField("data", VariantType()),
        StructField("beforeData", VariantType()),
        StructField("headers", _HEADERS),
        StructField("schema", StringType()),
        StructField("table", StringType()),
    ]
)
# Header values are read as text (a number or boolean keeps its JSON text) and converted with
# try_cast, so an odd header type never costs the whole record.
RECORD_SCHEMA = StructType(
    [
        StructField("magic", StringType()),
        StructField("type", StringType()),
        StructField("messageSchemaId", StringType()),
        StructField("schema", StringType()),
        StructField("table", StringType()),
        StructField("message", _MESSAGE),
    ]
)

_OPS = {"REFRESH": OP_READ, "INSERT": OP_INSERT, "UPDATE": OP_UPDATE, "DELETE": OP_DELETE}


def _message_names(options: DecodeOptions) -> tuple[Expr, Expr, Expr]:
    """What names a DT message's table, each null when absent: its ``messageSchemaId``, the
    ``schema.table`` it carries (inside ``message`` or beside it), and ``--table``."""
    msg = E.col("j.message")
    dt_schema = blank_to_null(E.coalesce(msg["schema"], E.col("j.schema")))
    dt_table = blank_to_null(E.coalesce(msg["table"], E.col("j.table")))
    schema_id = blank_to_null(E.col("j.messageSchemaId"))
    named = E.when(dt_table.isNotNull(), E.concat_ws(".", dt_schema, dt_table))
    option_table = E.lit(options.table) if options.table else E.null("string")
    return schema_id, named, option_table


def _lookup_tag_and_key(options: DecodeOptions) -> tuple[Expr, Expr]:
    """The lookup key (``tag``, ``key``) a DT message finds its MD by: its schemaId, else its table
    name, else ``--table``, else the by-columns key (``""``), which holds every table."""
    schema_id, named, option_table = _message_names(options)
    tag = (
        E.when(schema_id.isNotNull(), E.lit(BY_ID))
        .when(named.isNotNull(), E.lit(BY_NAME))
        .when(option_table.isNotNull(), E.lit(BY_NAME))
        .otherwise(E.lit(BY_COLUMNS))
    )
    key = E.coalesce(schema_id, named, option_table, E.lit(""))
    return tag, key


def _staged(parsed: DataFrame, options: DecodeOptions) -> DataFrame:
    """The parsed records with what the join and the events read: a DT message's lookup key
    (``_tag``, ``_key``; null for other records), ``_event_ms``, the images as maps (``_data``,
    ``_before``) and, for the by-columns lookup, the names of the columns the images hold."""
    msg = E.col("j.message")
    event_ms = utc_millis(blank_to_null(msg["headers"]["timestamp"]))
    data_map, before_map = object_map(msg["data"]), object_map(msg["beforeData"])
    image_keys = E.array_distinct(
        E.concat(E.coalesce(E.map_keys(data_map), E.array()), E.coalesce(E.map_keys(before_map), E.array()))
    )
    tag, key = _lookup_tag_and_key(options)
    is_dt = E.col("bad").isNull() & ~E.col("tombstone") & E.coalesce(E.col("j.type") != "MD", E.lit(True))
    return parsed.select(
        "*",
        *E.columns(
            E.when(is_dt, tag).alias("_tag"),
            E.when(is_dt, key).alias("_key"),
            event_ms.alias("_event_ms"),
            data_map.alias("_data"),
            before_map.alias("_before"),
            # Only the by-columns lookup reads them: the others skip a per-record array_distinct.
            E.when(tag == BY_COLUMNS, image_keys).alias("_image_keys"),
        ),
    )


def _message_versions() -> Expr:
    """The table versions the joined lookup row offers the message.

    By columns: those of the one table whose columns hold every column of the images (none when
    no table or several fit). By id or name: the row's versions, unless they belong to more than
    one table (a bare table name several schemas share), which would be a guess.
    """
    fitting = E.filter(
        E.col("tables"),
        lambda t: E.forall(E.col("_image_keys"), lambda k: E.array_contains(t["names"], k)),
    )
    by_columns = E.when(E.size(fitting) == 1, E.try_element_at(fitting, 1))
    ambiguous = E.size(E.array_distinct(E.col("versions")["qualified"])) > 1
    return (
        E.when(E.col("_tag") == BY_COLUMNS, by_columns["versions"])
        .when(ambiguous, E.lit(None))
        .otherwise(E.col("versions"))
    )


def _choose_version(versions: Expr, event_ms: Expr) -> Expr:
    """The newest table version announced at or before the change, else the oldest one."""
    preceding = E.filter(versions, lambda v: v["lineage_ms"] <= event_ms)
    chosen = E.coalesce(E.try_element_at(preceding, -1), E.try_element_at(versions, 1))
    # A table with one version (the usual case) needs no walk over its versions.
    return E.when(E.size(versions) == 1, E.element_at(versions, 1)).otherwise(chosen)


def _event_table(chosen: Expr, options: DecodeOptions) -> Expr:
    """The record's table: an MD message's own lineage name; for a DT message, its version's,
    else the name it carries, else ``--table``."""
    msg = E.col("j.message")
    _, named, option_table = _message_names(options)
    lineage_table = msg["lineage"]["table"]
    return E.when(
        E.col("j.type") == "MD",
        E.when(lineage_table.isNotNull(), E.concat_ws(".", msg["lineage"]["schema"], lineage_table)),
    ).otherwise(E.coalesce(chosen["qualified"], named, option_table))


def _resolved(staged: DataFrame, md_lookup: DataFrame, options: DecodeOptions) -> DataFrame:
    """Each record joined to its lookup row (broadcast) and resolved: ``_md``, the table version
    in force at its time (null when no MD explains it), and ``_table``. The lookup's columns and
    the staging-only ones are dropped again."""
    md = F.broadcast(md_lookup)
    # The names differ on either side (_tag/tag, _key/key), so the condition needs no frames.
    on = (E.col("_tag") == E.col("tag")) & (E.col("_key") == E.col("key"))
    joined = staged.join(md, on.column(), "left")
    chosen = _choose_version(_message_versions(), E.col("_event_ms"))
    return joined.select(
        *[c for c in staged.columns if not c.startswith("_") or c in ("_event_ms", "_data", "_before")],
        *E.columns(chosen.alias("_md"), _event_table(chosen, options).alias("_table")),
    )


def _operation() -> Expr:
    """The DT header's operation in upper case (null when blank)."""
    return E.upper(E.trim(blank_to_null(E.col("j.message")["headers"]["operation"])))


def _canonical_op(operation: Expr) -> Expr:
    """A Replicate operation -> the canonical op (null for an unknown one)."""
    ops = list(_OPS.items())
    op = E.when(operation == ops[0][0], E.lit(ops[0][1]))
    for name, canonical_op in ops[1:]:
        op = op.when(operation == name, E.lit(canonical_op))
    return op


def _with_op_and_mask(df: DataFrame) -> DataFrame:
    """``_op``, ``_mask`` (the columnMask; null when blank) and ``_delete_image``: the image a
    delete removes (``beforeData``, else ``data``), the before image of other ops."""
    op = _canonical_op(_operation())
    mask = blank_to_null(E.trim(E.col("j.message")["headers"]["columnMask"]))
    return df.select(
        "*",
        *E.columns(
            op.alias("_op"),
            mask.alias("_mask"),
            E.when(op == OP_DELETE, E.coalesce(E.col("_before"), E.col("_data")))
            .otherwise(E.col("_before"))
            .alias("_delete_image"),
        ),
    )


def _partial(declared: list[DeclaredVersion]) -> Expr:
    """Whether a change's image leaves out some column of its table (the mask lacks its bit): the
    column keeps its previous value. Read by literal ordinals for a specialised version, else by
    the version's ordinals (no lookup per column)."""
    md, mask, op = E.col("_md"), E.col("_mask"), E.col("_op")
    ordinals = E.map_values(md["columns"])["ordinal"]
    missing = E.exists(ordinals, lambda o: o.isNotNull() & ~column_present(mask, o))
    for version in reversed(declared):
        missing = E.when(md["vid"] == version.vid, ~version.all_present(mask)).otherwise(missing)
    return (op != OP_DELETE) & mask.isNotNull() & missing


def _kind_and_reason() -> tuple[Expr, Expr]:
    """What a record is (a change, ignored or quarantined) and why, the first rule that holds."""
    msg = E.col("j.message")
    md, mask, op = E.col("_md"), E.col("_mask"), E.col("_op")
    return classify(
        (E.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
        (E.col("bad").isNotNull(), KIND_QUARANTINED, E.col("bad")),
        (E.col("j.type") == "MD", KIND_IGNORED, IGNORED_DDL),
        (E.col("j.type").isNotNull() & (E.col("j.type") != "DT"), KIND_QUARANTINED, Q_UNKNOWN_OP),
        (_operation().isNull(), KIND_QUARANTINED, Q_MISSING_OP),
        (op.isNull(), KIND_QUARANTINED, Q_UNKNOWN_OP),
        (
            not_an_object(msg["data"], E.col("_data")) | not_an_object(msg["beforeData"], E.col("_before")),
            KIND_QUARANTINED,
            Q_IMAGE_NOT_OBJECT,
        ),
        (md.isNull() | md["columns"].isNull(), KIND_QUARANTINED, Q_UNKNOWN_TABLE),
        (mask.isNotNull() & ~mask.rlike("^[0-9A-Fa-f]+$"), KIND_QUARANTINED, Q_TYPE_MISMATCH),
        (E.col("_bad_value"), KIND_QUARANTINED, Q_TYPE_MISMATCH),
        (
            op.isin(OP_READ, OP_INSERT, OP_UPDATE) & E.col("_data").isNull(),
            KIND_QUARANTINED,
            Q_MISSING_IMAGE,
        ),
        ((op == OP_DELETE) & E.col("_before_img").isNull(), KIND_QUARANTINED, Q_KEY_UNKNOWN),
    )


def _log_position() -> Expr:
    """The changeSequence as a position; full-load rows carry none: they order before every change."""
    return E.when(E.col("_op") == OP_READ, E.array(*[E.lit(0).cast("bigint")] * 3)).otherwise(
        change_sequence_position(E.col("j.message")["headers"]["changeSequence"])
    )


def _events(df: DataFrame, declared: list[DeclaredVersion]) -> DataFrame:
    """Canonical events of the resolved records: the op and mask, the typed images, then the event."""
    staged = typed_images(_with_op_and_mask(df), declared)
    headers = E.col("j.message")["headers"]
    md, op = E.col("_md"), E.col("_op")
    kind, reason = _kind_and_reason()
    return staged.select(
        *canonical(
            table=E.col("_table"),
            kind=kind,
            op=op,
            reason=reason,
            event_ms=E.col("_event_ms"),
            log_pos=_log_position(),
            sub_pos=E.lit(0),
            tx_id=blank_to_null(headers["transactionId"]),
            tx_end=E.lower(E.trim(headers["transactionLastEvent"])).try_cast("boolean"),
            before=E.col("_before_img"),
            after=E.when(op != OP_DELETE, E.col("_after")),
            partial=E.coalesce(_partial(declared), E.lit(False)),
            key_cols=md["key_cols"],
            types=md["types"],
            raw=E.col("text"),
        )
    )


class QlikJsonDecoder(Decoder):
    name = "qlik-json"
    description = (
        "Qlik Replicate JSON envelope (atMSG): MD messages give table, types and key; DT messages "
        "REFRESH/INSERT/UPDATE/DELETE ordered by changeSequence, columnMask partial images"
    )
    needs = ""
    partial_images = True
    table_from_filter = True
    transaction_ids = True

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        """Stage the records, read the MD lookup (context files too), resolve each record's table
        version, then build its event."""
        staged = _staged(parse_json_records(spark, files, RECORD_SCHEMA), options)
        md_lookup, declared = lookup(spark, [*files, *options.context_files])
        return _events(_resolved(staged, md_lookup, options), declared)

"""DataHub TUPLE records (DataWorks Data Integration into a TUPLE topic) -> canonical change events.

A TUPLE record is one flat row: the metadata columns ``_sequence_id_``, ``_operation_type_``
(I/U/D), ``_excute_time_``, ``_source_table_``, ``_before_image_`` and ``_after_image_`` (Y/N),
followed by the business columns of the source table. An UPDATE arrives as two records that share
``_sequence_id_``: the before image (``_before_image_`` Y) and then the after image
(``_after_image_`` Y). The after record becomes the update; the before record is counted as
ignored ("update before image") and lends its row to the update as ``before`` so that an update of
the key deletes the old key. Records do not name their key: the engine takes it from ``--key``.

Landings are recognised by file extension (a compression suffix such as ``.gz`` is looked through):
``.csv`` is CSV with a header line, ``.parquet`` is Parquet, anything else (``.json``, ``.jsonl``,
``.txt``, no extension) is JSON lines. Value types: JSON values keep their JSON type, Parquet
columns their Parquet type (declared in ``types``), CSV values are strings.
"""

from __future__ import annotations

from collections import defaultdict

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
    VariantType,
)

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.common.jsonlines import parse_json_records
from airflow_cdc_provider.formats.common.tabular import (
    KIND_CSV,
    KIND_JSON,
    KIND_PARQUET,
    column_expr,
    declared_type,
    landing_kind,
    parquet_frames,
)
from airflow_cdc_provider.formats.datahub.pairing import attach_before_images
from airflow_cdc_provider.formats.events import (
    IGNORED_TOMBSTONE,
    IGNORED_UPDATE_BEFORE,
    IMAGE_TYPE,
    KIND_CHANGE,
    KIND_IGNORED,
    KIND_QUARANTINED,
    OP_DELETE,
    OP_INSERT,
    OP_UPDATE,
    Q_MISSING_IMAGE,
    Q_MISSING_OP,
    Q_MISSING_TABLE,
    Q_NOT_UTF8,
    Q_TRUNCATED,
    Q_TYPE_MISMATCH,
    Q_UNKNOWN_OP,
    canonical,
    classify,
    dotted_table,
)
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile, landed_file_column, read_records, union_all
from airflow_cdc_provider.spark.sqlexpr import Expr

# A CSV line whose fields do not line up with its file's header.
Q_CSV_SHAPE = "CSV record does not match header"

SEQUENCE_ID = "_sequence_id_"
OPERATION_TYPE = "_operation_type_"
EXECUTE_TIME = "_excute_time_"  # sic: DataWorks spells it this way
SOURCE_TABLE = "_source_table_"
BEFORE_IMAGE = "_before_image_"
AFTER_IMAGE = "_after_image_"
METADATA_FIELDS = (SEQUENCE_ID, OPERATION_TYPE, EXECUTE_TIME, SOURCE_TABLE, BEFORE_IMAGE, AFTER_IMAGE)

_TUPLE_OPS = {"I": OP_INSERT, "U": OP_UPDATE, "D": OP_DELETE}
# An epoch value at or above this is microseconds (DataHub's TIMESTAMP type), below it milliseconds.
_MICROS_FROM = 10**14
# One CSV field: a quoted field ("" escapes a quote) that ends the field, or anything up to the
# next comma (so `"a"b` is the text `"a"b`, never `a` with `b` silently dropped).
_CSV_FIELD = r'(?:^|,)("(?:[^"]|"")*"(?=,|$)|[^,]*)'

# Columns every landing reader hands to `_events`.
_ROW_COLUMNS = (
    "file",
    "file_pos",
    "line",
    "raw",
    "bad",
    "tombstone",
    "seq",
    "op",
    "event_ms",
    "time_bad",
    "source_table",
    "before_flag",
    "after_flag",
    "image",
    "types",
)


def is_metadata_column(name: str) -> bool:
    """DataHub metadata columns are named ``_name_``; ``_id`` and the like stay business columns."""
    return len(name) > 2 and name.startswith("_") and name.endswith("_")


def _is_metadata_key(key: Expr) -> Expr:
    # Cheapest test first (most keys fail it at once); a byte length is known without a scan.
    return key.startswith("_") & key.endswith("_") & (E.octet_length(key) > 2)


class DatahubTupleDecoder(Decoder):
    name = "datahub-tuple"
    description = (
        "DataHub TUPLE records (_sequence_id_, _operation_type_ I/U/D): JSON lines, CSV with header, Parquet"
    )
    needs = "--key"

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        by_kind: dict[str, list[LandedFile]] = defaultdict(list)
        for landed in files:
            by_kind[landing_kind(landed.path)].append(landed)
        parts: list[DataFrame] = []
        if by_kind[KIND_JSON]:
            parts.append(_json_rows(spark, by_kind[KIND_JSON]))
        if by_kind[KIND_CSV]:
            parts.append(_csv_rows(spark, by_kind[KIND_CSV]))
        parts.extend(_parquet_rows(spark, by_kind[KIND_PARQUET]))
        return _events(union_all([part.select(*_ROW_COLUMNS) for part in parts]), options)


# ---------------------------------------------------------------------------------------------
# Landing readers: each returns _ROW_COLUMNS.


def _json_rows(spark: SparkSession, files: list[LandedFile]) -> DataFrame:
    """JSON lines: metadata fields parsed as text, the business columns as JSON-typed variants."""
    schema = StructType([StructField(name, StringType()) for name in METADATA_FIELDS])
    parsed = parse_json_records(spark, files, schema)
    whole = E.from_json("text", MapType(StringType(), VariantType()))
    image = E.map_filter(whole, lambda k, v: ~_is_metadata_key(k))
    event_ms, time_bad = event_ms_from_text(E.col("j." + EXECUTE_TIME))
    return parsed.select(
        "file",
        "file_pos",
        "line",
        *E.columns(E.col("text").alias("raw")),
        "bad",
        "tombstone",
        *E.columns(
            E.col("j." + SEQUENCE_ID).alias("seq"),
            E.col("j." + OPERATION_TYPE).alias("op"),
            event_ms.alias("event_ms"),
            time_bad.alias("time_bad"),
            E.col("j." + SOURCE_TABLE).alias("source_table"),
            E.col("j." + BEFORE_IMAGE).alias("before_flag"),
            E.col("j." + AFTER_IMAGE).alias("after_flag"),
            E.when(E.col("bad").isNull() & ~E.col("tombstone"), image).alias("image"),
            E.null(MapType(StringType(), StringType())).alias("types"),
        ),
    )


def csv_fields(line: Expr, empty_as_null: bool = True) -> Expr:
    """Split one CSV line into its fields (RFC 4180 quoting; a quoted field may hold commas).

    An unquoted empty field is null, a quoted empty field ("") is the empty string, the way
    Spark's own CSV reader reads them. Fields spanning several lines are not supported: the
    landing is read line by line.
    """
    raw_fields = E.regexp_extract_all(line, _CSV_FIELD, 1)

    def unquote(field: Expr) -> Expr:
        quoted = field.startswith('"') & field.endswith('"') & (E.length(field) >= 2)
        inner = E.regexp_replace(E.regexp_extract(field, r'^"(.*)"$', 1), '""', '"')
        empty = E.null("string") if empty_as_null else E.lit("")
        return E.when(quoted, inner).when(field == "", empty).otherwise(field)

    return E.transform(raw_fields, unquote)


def _csv_rows(spark: SparkSession, files: list[LandedFile]) -> DataFrame:
    """CSV with a header line per file: each line is zipped with its file's header into a map.

    Built in stages (fields, then the map, then its entries) so that Spark computes the parse
    once per line instead of inlining it into every use.
    """
    mapped = _csv_text_maps(_csv_split(_csv_lines_under_header(spark, files)))
    text_map = E.col("text_map")
    image = E.transform_values(
        E.map_filter(text_map, lambda k, v: ~_is_metadata_key(k)), lambda k, v: v.cast("variant")
    )
    event_ms, time_bad = event_ms_from_text(text_map[EXECUTE_TIME])
    return mapped.select(
        "file",
        "file_pos",
        "line",
        *E.columns(E.col("text").alias("raw")),
        "bad",
        *E.columns(
            E.lit(False).alias("tombstone"),
            text_map[SEQUENCE_ID].alias("seq"),
            text_map[OPERATION_TYPE].alias("op"),
            event_ms.alias("event_ms"),
            time_bad.alias("time_bad"),
            text_map[SOURCE_TABLE].alias("source_table"),
            text_map[BEFORE_IMAGE].alias("before_flag"),
            text_map[AFTER_IMAGE].alias("after_flag"),
            image.alias("image"),
            E.null(MapType(StringType(), StringType())).alias("types"),
        ),
    )


def _csv_lines_under_header(spark: SparkSession, files: list[LandedFile]) -> DataFrame:
    """The records of CSV files except each file's header line, with that header's text beside
    them (``header_text``): a file's header is its first readable line."""
    # The stand-in for the lost rest of a damaged compressed file has no text, but is a record.
    records = read_records(spark, files).where(((E.trim("text") != "") | E.col("damaged")).column())
    headers = (
        records.where((~E.col("damaged")).column())
        .groupBy("file")
        .agg(
            *E.columns(
                E.min_by("text", "file_pos").alias("header_text"), E.min("file_pos").alias("header_pos")
            )
        )
    )
    return records.join(F.broadcast(headers), "file", "left").where(
        (~E.coalesce(E.col("file_pos") == E.col("header_pos"), E.lit(False))).column()
    )


def _csv_split(rows: DataFrame) -> DataFrame:
    """Each line and its header split into fields (``values``, ``names``)."""
    return rows.select(
        "file",
        "file_pos",
        "line",
        "text",
        "unterminated",
        "damaged",
        "not_utf8",
        *E.columns(
            csv_fields(E.col("header_text"), empty_as_null=False).alias("names"),
            csv_fields(E.col("text")).alias("values"),
        ),
    )


def _csv_text_maps(split: DataFrame) -> DataFrame:
    """Each line's values by its header's names (``text_map``) where the two line up, else why the
    line is quarantined (``bad``): unreadable, cut short, or not of its header's shape."""
    names, values = E.col("names"), E.col("values")
    header_ok = (E.size(E.array_distinct(names)) == E.size(names)) & ~E.array_contains(names, "")
    fits = header_ok & (E.size(names) == E.size(values))
    bad = (
        E.when(E.col("damaged"), E.lit(Q_TRUNCATED))
        .when(E.col("not_utf8"), E.lit(Q_NOT_UTF8))
        .when(fits, E.null("string"))
        .when(E.col("unterminated") & header_ok & (E.size(values) < E.size(names)), E.lit(Q_TRUNCATED))
        .otherwise(E.lit(Q_CSV_SHAPE))
    )
    return split.select(
        "file",
        "file_pos",
        "line",
        "text",
        *E.columns(bad.alias("bad"), E.when(fits, E.map_from_arrays(names, values)).alias("text_map")),
    )


def _parquet_rows(spark: SparkSession, files: list[LandedFile]) -> list[DataFrame]:
    """Parquet: a TUPLE topic has one fixed schema, so a folder usually holds one table."""
    return [_parquet_group(df) for _, df in parquet_frames(spark, [f.path for f in files])]


def _parquet_group(df: DataFrame) -> DataFrame:
    fields = {f.name: f.dataType for f in df.schema.fields}
    business = [name for name in fields if not is_metadata_column(name)]
    image = E.map(*[c for name in business for c in (E.lit(name), column_expr(name).cast("variant"))])
    declared = [(name, declared_type(fields[name])) for name in business]
    types = E.map(*[c for name, t in declared if t for c in (E.lit(name), E.lit(t))])

    def meta(name: str) -> Expr:
        return column_expr(name).cast("string") if name in fields else E.null("string")

    if isinstance(fields.get(EXECUTE_TIME), TimestampType):
        event_ms, time_bad = E.unix_millis(column_expr(EXECUTE_TIME)), E.lit(False)
    else:
        event_ms, time_bad = event_ms_from_text(meta(EXECUTE_TIME))
    return df.select(
        *E.columns(
            landed_file_column().alias("file"),
            E.col("_metadata.row_index").alias("file_pos"),
            E.null("bigint").alias("line"),
            E.to_json(E.struct(*[column_expr(name) for name in fields])).alias("raw"),
            E.null("string").alias("bad"),
            E.lit(False).alias("tombstone"),
            meta(SEQUENCE_ID).alias("seq"),
            meta(OPERATION_TYPE).alias("op"),
            event_ms.alias("event_ms"),
            time_bad.alias("time_bad"),
            meta(SOURCE_TABLE).alias("source_table"),
            meta(BEFORE_IMAGE).alias("before_flag"),
            meta(AFTER_IMAGE).alias("after_flag"),
            image.cast(IMAGE_TYPE).alias("image"),
            types.cast(MapType(StringType(), StringType())).alias("types"),
        )
    )


def event_ms_from_text(text: Expr) -> tuple[Expr, Expr]:
    """``_excute_time_`` as epoch ms, and whether a non-null value could not be read.

    The documented form is a 13-digit epoch in milliseconds; a 16-digit value is DataHub's
    TIMESTAMP (microseconds); anything else is tried as a timestamp text (UTC when it has no offset).
    """
    trimmed = E.trim(text)
    number = trimmed.try_cast("bigint")
    from_number = E.when(
        E.abs(number) >= E.lit(_MICROS_FROM), E.floor(number / 1000).cast("bigint")
    ).otherwise(number)
    from_text = E.unix_millis(E.try_to_timestamp(trimmed))
    ms = E.when(number.isNotNull(), from_number).otherwise(from_text)
    return ms, text.isNotNull() & (trimmed != "") & ms.isNull()


# ---------------------------------------------------------------------------------------------
# Records -> canonical events.


def _events(rows: DataFrame, options: DecodeOptions) -> DataFrame:
    """Classify each record, pair update halves, and select the canonical columns."""
    paired = _paired_updates(_classified(_record_fields(rows, options)))
    op = E.col("_op")
    is_change = E.col("_kind") == KIND_CHANGE
    codes = list(_TUPLE_OPS.items())
    op_name = E.when(op == codes[0][0], E.lit(codes[0][1]))
    for code, name in codes[1:]:
        op_name = op_name.when(op == code, E.lit(name))
    return paired.select(
        *canonical(
            table=E.col("_table"),
            kind=E.col("_kind"),
            op=E.when(is_change, op_name),
            reason=E.col("_reason"),
            event_ms=E.col("event_ms"),
            log_pos=E.when(E.col("_seq").isNotNull(), E.array(E.col("_seq"))),
            sub_pos=E.lit(0),
            before=E.when(is_change & (op == "D"), E.col("image")).when(
                is_change & (op == "U"), E.col("paired_before")
            ),
            after=E.when(is_change & op.isin("I", "U"), E.col("image")),
            partial=E.when(is_change, E.lit(False)),
            types=E.when(is_change, E.col("types")),
            raw=E.col("raw"),
        )
    )


def _record_fields(rows: DataFrame, options: DecodeOptions) -> DataFrame:
    """``rows`` with their metadata read once: the op code (``_op``), the sequence id as a number
    (``_seq``) and whether it is not one (``_seq_bad``), the image flags (``_before_y``,
    ``_after_y``) and the table (``_table``; ``--table`` when the record names none)."""
    seq_text = E.trim("seq")
    table = E.coalesce(
        dotted_table(E.nullif(E.trim("source_table"), E.lit(""))), E.lit(options.table).cast("string")
    )
    return rows.select(
        "*",
        *E.columns(
            E.upper(E.trim("op")).alias("_op"),
            seq_text.try_cast("bigint").alias("_seq"),
            (seq_text.isNotNull() & (seq_text != "") & seq_text.try_cast("bigint").isNull()).alias(
                "_seq_bad"
            ),
            (E.upper(E.trim("before_flag")) == "Y").alias("_before_y"),
            (E.upper(E.trim("after_flag")) == "Y").alias("_after_y"),
            table.alias("_table"),
        ),
    )


def _classified(fields: DataFrame) -> DataFrame:
    """Each record's kind and reason (``_kind``, ``_reason``): a record the reader could not read is
    quarantined with the reader's reason, any other by the first rule that holds."""
    op, before_y, after_y = E.col("_op"), E.col("_before_y"), E.col("_after_y")
    kind, reason = classify(
        (E.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
        (op.isNull() | (op == ""), KIND_QUARANTINED, Q_MISSING_OP),
        (~op.isin(*_TUPLE_OPS), KIND_QUARANTINED, Q_UNKNOWN_OP),
        (E.col("_seq_bad"), KIND_QUARANTINED, Q_TYPE_MISMATCH),
        (E.col("time_bad"), KIND_QUARANTINED, Q_TYPE_MISMATCH),
        (E.col("_table").isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
        ((op == "U") & E.coalesce(~after_y & ~before_y, E.lit(True)), KIND_QUARANTINED, Q_MISSING_IMAGE),
        ((op == "U") & E.coalesce(~after_y, E.lit(True)), KIND_IGNORED, IGNORED_UPDATE_BEFORE),
    )
    read_bad = E.col("bad").isNotNull()
    return fields.select(
        "*",
        *E.columns(
            E.when(read_bad, E.lit(KIND_QUARANTINED)).otherwise(kind).alias("_kind"),
            E.when(read_bad, E.col("bad")).otherwise(reason).alias("_reason"),
        ),
    )


def _paired_updates(classified: DataFrame) -> DataFrame:
    """Each update's after half with its before half's row (``paired_before``): the two records
    share the table and ``_sequence_id_``."""
    op = E.col("_op")
    before_half = (E.col("_reason") == IGNORED_UPDATE_BEFORE) & E.col("_seq").isNotNull()
    after_half = (E.col("_kind") == KIND_CHANGE) & (op == "U") & E.col("_seq").isNotNull()
    return attach_before_images(
        classified,
        before_half=before_half,
        after_half=after_half,
        group=[E.col("_table"), E.col("_seq")],
        image=E.col("image"),
        order=E.struct("file", "file_pos"),
    )

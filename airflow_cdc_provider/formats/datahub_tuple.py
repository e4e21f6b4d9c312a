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

from pyspark.sql import Column, DataFrame, SparkSession, Window
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
)
from airflow_cdc_provider.formats.jsonlines import parse_json_records
from airflow_cdc_provider.formats.landed_files import LandedFile, read_records
from airflow_cdc_provider.formats.tabular import (
    KIND_CSV,
    KIND_JSON,
    KIND_PARQUET,
    column,
    declared_type,
    landing_kind,
    parquet_frames,
)

# Not yet in events.py (see the report): the first half of an update pair, counted as ignored
# because its row travels with the second half as the update's before image.
# Not yet in events.py: a CSV line whose fields do not line up with its file's header.
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


def _is_metadata_key(key: Column) -> Column:
    return (F.length(key) > 2) & key.startswith("_") & key.endswith("_")


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
        rows = parts[0].select(*_ROW_COLUMNS)
        for part in parts[1:]:
            rows = rows.union(part.select(*_ROW_COLUMNS))
        return _events(rows, options)


# ---------------------------------------------------------------------------------------------
# Landing readers: each returns _ROW_COLUMNS.


def _json_rows(spark: SparkSession, files: list[LandedFile]) -> DataFrame:
    """JSON lines: metadata fields parsed as text, the business columns as JSON-typed variants."""
    schema = StructType([StructField(name, StringType()) for name in METADATA_FIELDS])
    parsed = parse_json_records(spark, files, schema)
    whole = F.from_json(F.col("text"), MapType(StringType(), VariantType()))
    image = F.map_filter(whole, lambda k, v: ~_is_metadata_key(k))
    event_ms, time_bad = event_ms_from_text(F.col("j." + EXECUTE_TIME))
    return parsed.select(
        "file",
        "file_pos",
        "line",
        F.col("text").alias("raw"),
        "bad",
        "tombstone",
        F.col("j." + SEQUENCE_ID).alias("seq"),
        F.col("j." + OPERATION_TYPE).alias("op"),
        event_ms.alias("event_ms"),
        time_bad.alias("time_bad"),
        F.col("j." + SOURCE_TABLE).alias("source_table"),
        F.col("j." + BEFORE_IMAGE).alias("before_flag"),
        F.col("j." + AFTER_IMAGE).alias("after_flag"),
        F.when(F.col("bad").isNull() & ~F.col("tombstone"), image).alias("image"),
        F.lit(None).cast(MapType(StringType(), StringType())).alias("types"),
    )


def csv_fields(line: Column, empty_as_null: bool = True) -> Column:
    """Split one CSV line into its fields (RFC 4180 quoting; a quoted field may hold commas).

    An unquoted empty field is null, a quoted empty field ("") is the empty string, the way
    Spark's own CSV reader reads them. Fields spanning several lines are not supported: the
    landing is read line by line.
    """
    raw_fields = F.regexp_extract_all(line, F.lit(_CSV_FIELD), 1)

    def unquote(field: Column) -> Column:
        quoted = field.startswith('"') & field.endswith('"') & (F.length(field) >= 2)
        inner = F.regexp_replace(F.regexp_extract(field, r'^"(.*)"$', 1), '""', '"')
        empty = F.lit(None).cast("string") if empty_as_null else F.lit("")
        return F.when(quoted, inner).when(field == "", empty).otherwise(field)

    return F.transform(raw_fields, unquote)


def _csv_rows(spark: SparkSession, files: list[LandedFile]) -> DataFrame:
    """CSV with a header line per file: each line is zipped with its file's header into a map.

    Built in stages (fields, then the map, then its entries) so that Spark computes the parse
    once per line instead of inlining it into every use.
    """
    # The stand-in for the lost rest of a damaged compressed file has no text, but is a record.
    records = read_records(spark, files).where((F.trim(F.col("text")) != "") | F.col("damaged"))
    headers = (
        records.where(~F.col("damaged"))
        .groupBy("file")
        .agg(F.min_by("text", "file_pos").alias("header_text"), F.min("file_pos").alias("header_pos"))
    )
    rows = records.join(F.broadcast(headers), "file", "left").where(
        ~F.coalesce(F.col("file_pos") == F.col("header_pos"), F.lit(False))
    )
    split = rows.select(
        "file",
        "file_pos",
        "line",
        "text",
        "unterminated",
        "damaged",
        "not_utf8",
        csv_fields(F.col("header_text"), empty_as_null=False).alias("names"),
        csv_fields(F.col("text")).alias("values"),
    )
    names, values = F.col("names"), F.col("values")
    header_ok = (F.size(F.array_distinct(names)) == F.size(names)) & ~F.array_contains(names, "")
    fits = header_ok & (F.size(names) == F.size(values))
    bad = (
        F.when(F.col("damaged"), F.lit(Q_TRUNCATED))
        .when(F.col("not_utf8"), F.lit(Q_NOT_UTF8))
        .when(fits, F.lit(None).cast("string"))
        .when(F.col("unterminated") & header_ok & (F.size(values) < F.size(names)), F.lit(Q_TRUNCATED))
        .otherwise(F.lit(Q_CSV_SHAPE))
    )
    mapped = split.select(
        "file",
        "file_pos",
        "line",
        "text",
        bad.alias("bad"),
        F.when(fits, F.map_from_arrays(names, values)).alias("text_map"),
    )
    text_map = F.col("text_map")
    image = F.transform_values(
        F.map_filter(text_map, lambda k, v: ~_is_metadata_key(k)), lambda k, v: v.cast("variant")
    )
    event_ms, time_bad = event_ms_from_text(text_map[EXECUTE_TIME])
    return mapped.select(
        "file",
        "file_pos",
        "line",
        F.col("text").alias("raw"),
        "bad",
        F.lit(False).alias("tombstone"),
        text_map[SEQUENCE_ID].alias("seq"),
        text_map[OPERATION_TYPE].alias("op"),
        event_ms.alias("event_ms"),
        time_bad.alias("time_bad"),
        text_map[SOURCE_TABLE].alias("source_table"),
        text_map[BEFORE_IMAGE].alias("before_flag"),
        text_map[AFTER_IMAGE].alias("after_flag"),
        image.alias("image"),
        F.lit(None).cast(MapType(StringType(), StringType())).alias("types"),
    )


def _parquet_rows(spark: SparkSession, files: list[LandedFile]) -> list[DataFrame]:
    """Parquet: a TUPLE topic has one fixed schema, so a folder usually holds one table."""
    return [_parquet_group(df) for df in parquet_frames(spark, [f.path for f in files])]


def _parquet_group(df: DataFrame) -> DataFrame:
    fields = {f.name: f.dataType for f in df.schema.fields}
    business = [name for name in fields if not is_metadata_column(name)]
    image = F.create_map(*[c for name in business for c in (F.lit(name), column(name).cast("variant"))])
    declared = [(name, declared_type(fields[name])) for name in business]
    types = F.create_map(*[c for name, t in declared if t for c in (F.lit(name), F.lit(t))])

    def meta(name: str) -> Column:
        return column(name).cast("string") if name in fields else F.lit(None).cast("string")

    if isinstance(fields.get(EXECUTE_TIME), TimestampType):
        event_ms, time_bad = F.unix_millis(column(EXECUTE_TIME)), F.lit(False)
    else:
        event_ms, time_bad = event_ms_from_text(meta(EXECUTE_TIME))
    return df.select(
        F.col("_metadata.file_path").alias("file"),
        F.col("_metadata.row_index").alias("file_pos"),
        F.lit(None).cast("long").alias("line"),
        F.to_json(F.struct(*[column(name) for name in fields])).alias("raw"),
        F.lit(None).cast("string").alias("bad"),
        F.lit(False).alias("tombstone"),
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


def event_ms_from_text(text: Column) -> tuple[Column, Column]:
    """``_excute_time_`` as epoch ms, and whether a non-null value could not be read.

    The documented form is a 13-digit epoch in milliseconds; a 16-digit value is DataHub's
    TIMESTAMP (microseconds); anything else is tried as a timestamp text (UTC when it has no offset).
    """
    trimmed = F.trim(text)
    number = trimmed.try_cast("bigint")
    from_number = F.when(
        F.abs(number) >= F.lit(_MICROS_FROM), F.floor(number / 1000).cast("bigint")
    ).otherwise(number)
    from_text = F.unix_millis(F.try_to_timestamp(trimmed))
    ms = F.when(number.isNotNull(), from_number).otherwise(from_text)
    return ms, text.isNotNull() & (trimmed != "") & ms.isNull()


# ---------------------------------------------------------------------------------------------
# Shared by both DataHub formats: pairing the two halves of an update.


def attach_before_images(
    rows: DataFrame,
    *,
    before_half: Column,
    after_half: Column,
    group: list[Column],
    image: Column,
    order: Column,
) -> DataFrame:
    """Add ``paired_before``: for an after half, the image of the before half of the same group.

    One window, no join: rows are partitioned by ``group`` (table and sequence id) for the halves
    and by their own file position otherwise, so every record stays exactly one row and no group
    is skewed. Splitting the halves off with a filter and a union would shuffle less, but Spark
    pushes such filters down into the decoding expressions and reads and parses the landing twice.
    """
    is_half = F.coalesce(before_half | after_half, F.lit(False))
    own_position = [F.when(~is_half, F.col("file")), F.when(~is_half, F.col("file_pos"))]
    in_pair = Window.partitionBy(*group, *own_position)
    paired = F.min_by(F.when(before_half, image), F.when(before_half, order)).over(in_pair)
    return rows.withColumn("paired_before", F.when(after_half, paired))


# ---------------------------------------------------------------------------------------------
# Records -> canonical events.


def _events(rows: DataFrame, options: DecodeOptions) -> DataFrame:
    """Classify each record, pair update halves, and select the canonical columns."""
    seq_text = F.trim(F.col("seq"))
    table = F.coalesce(
        F.nullif(F.trim(F.col("source_table")), F.lit("")), F.lit(options.table).cast("string")
    )
    fields = rows.select(
        "*",
        F.upper(F.trim(F.col("op"))).alias("_op"),
        seq_text.try_cast("bigint").alias("_seq"),
        (seq_text.isNotNull() & (seq_text != "") & seq_text.try_cast("bigint").isNull()).alias("_seq_bad"),
        (F.upper(F.trim(F.col("before_flag"))) == "Y").alias("_before_y"),
        (F.upper(F.trim(F.col("after_flag"))) == "Y").alias("_after_y"),
        table.alias("_table"),
    )
    op, before_y, after_y = F.col("_op"), F.col("_before_y"), F.col("_after_y")
    kind, reason = classify(
        (F.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
        (op.isNull() | (op == ""), KIND_QUARANTINED, Q_MISSING_OP),
        (~op.isin(*_TUPLE_OPS), KIND_QUARANTINED, Q_UNKNOWN_OP),
        (F.col("_seq_bad"), KIND_QUARANTINED, Q_TYPE_MISMATCH),
        (F.col("time_bad"), KIND_QUARANTINED, Q_TYPE_MISMATCH),
        (F.col("_table").isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
        ((op == "U") & F.coalesce(~after_y & ~before_y, F.lit(True)), KIND_QUARANTINED, Q_MISSING_IMAGE),
        ((op == "U") & F.coalesce(~after_y, F.lit(True)), KIND_IGNORED, IGNORED_UPDATE_BEFORE),
    )
    read_bad = F.col("bad").isNotNull()
    classified = fields.select(
        "*",
        F.when(read_bad, F.lit(KIND_QUARANTINED)).otherwise(kind).alias("_kind"),
        F.when(read_bad, F.col("bad")).otherwise(reason).alias("_reason"),
    )
    before_half = (F.col("_reason") == IGNORED_UPDATE_BEFORE) & F.col("_seq").isNotNull()
    after_half = (F.col("_kind") == KIND_CHANGE) & (F.col("_op") == "U") & F.col("_seq").isNotNull()
    paired = attach_before_images(
        classified,
        before_half=before_half,
        after_half=after_half,
        group=[F.col("_table"), F.col("_seq")],
        image=F.col("image"),
        order=F.struct("file", "file_pos"),
    )
    is_change = F.col("_kind") == KIND_CHANGE
    op_name = F.lit(None).cast("string")
    for code, name in _TUPLE_OPS.items():
        op_name = F.when(F.col("_op") == code, F.lit(name)).otherwise(op_name)
    return paired.select(
        *canonical(
            table=F.col("_table"),
            kind=F.col("_kind"),
            op=F.when(is_change, op_name),
            reason=F.col("_reason"),
            event_ms=F.col("event_ms"),
            log_pos=F.when(F.col("_seq").isNotNull(), F.array(F.col("_seq"))),
            sub_pos=F.lit(0),
            before=F.when(is_change & (F.col("_op") == "D"), F.col("image")).when(
                is_change & (F.col("_op") == "U"), F.col("paired_before")
            ),
            after=F.when(is_change & F.col("_op").isin("I", "U"), F.col("image")),
            partial=F.when(is_change, F.lit(False)),
            types=F.when(is_change, F.col("types")),
            file=F.col("file"),
            file_pos=F.col("file_pos"),
            line=F.col("line"),
            raw=F.col("raw"),
        )
    )

"""AWS DMS (``--format aws-dms``): both ways DMS lands changes, told apart by file extension.

- ``.csv`` (also ``.csv.gz`` and the other compressed forms): the S3 target's CSV. No header; the
  first field is ``Op`` (``I``/``U``/``D``) in change files, and in full-load files ``LOAD*.csv``
  only with ``IncludeOpForFullLoad``. Whether a full-load row has it is read from its width: the
  table's column count plus one means ``Op`` comes first, the column count means no ``Op``.
  Column names come from ``--columns TABLE=C1,C2,...`` or from ``dms_table_definition.json``.
  Rows are parsed by Spark's own CSV parser (``from_csv``, RFC 4180 quoting, an empty field is
  null), each row on its own, so a quarantined row keeps its file and line. A quoted value may
  hold line breaks, so one row may span lines: a line with an odd number of ``"`` opens (or closes)
  such a value, and the lines up to the one that closes it are joined with ``\\n`` into the row,
  which keeps its first line's file, line and position. A value still open at the end of its file
  is quarantined (``Q_OPEN_QUOTE``) at the line it opened on.
- ``.parquet``: the S3 target's Parquet; the same ``Op`` column where DMS writes it, the other
  columns named and typed by the file itself.
- anything else: JSON lines as the Kafka and Kinesis targets write them, ``{"data": {...},
  "metadata": {"timestamp", "record-type", "operation", "schema-name", "table-name",
  "transaction-id", ...}}``. ``data`` columns named ``BI_<column>`` (and a ``before-image`` object
  beside ``data``) are an update's before image, never columns of the snapshot. ``record-type``
  ``control`` records (create-table, drop-table, column changes) are DDL, ignored.

S3 landings name their table by folder: ``.../<schema>/<table>/<file>``, looking through date
partition folders DMS adds below it (``2024/09/02``, ``20240902``, ``dt=...``).

``dms_table_definition.json``, anywhere in the landing, is not data: it holds table definitions in
the form DMS reads for an S3 source (``{"Tables": [{"TableOwner", "TableName", "TableColumns":
[{"ColumnName", "ColumnType", "ColumnPrecision", "ColumnScale", "ColumnIsPk"}]}]}``). They give a
CSV table its column names (unless ``--columns`` does), the column types (``ColumnType``), and the
key (``ColumnIsPk``, unless ``--key`` names one for the table).

Order: a full load (``LOAD*`` files, operation ``load``) comes before the changes of its table;
changes follow their time (``--timestamp-column``, DMS's ``TimestampColumnName``, in the S3
files; ``metadata.timestamp`` in JSON), else the CDC file name's time (``YYYYMMDD-HHMMSSfff``), then
their file and place in it.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from urllib.parse import urlsplit

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from airflow_cdc_provider.contract.tables import lookup, qualify
from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.common.jsonlines import (
    CORRUPT,
    images_not_objects,
    parse_json_records,
    unparsable_reason,
)
from airflow_cdc_provider.formats.common.tabular import (
    KIND_CSV,
    KIND_JSON,
    KIND_PARQUET,
    base_name,
    column_expr,
    declared_type,
    landing_kind,
    parquet_footers,
    parquet_frames,
)
from airflow_cdc_provider.formats.common.values import REPLICATE_TYPES, failed_conversions, text_image
from airflow_cdc_provider.formats.events import (
    CANONICAL_EVENT_SCHEMA,
    IGNORED_DDL,
    IGNORED_TOMBSTONE,
    IMAGE_TYPE,
    KIND_CHANGE,
    KIND_IGNORED,
    KIND_QUARANTINED,
    OP_DELETE,
    OP_INSERT,
    OP_READ,
    OP_UPDATE,
    Q_BAD_PARQUET,
    Q_CSV_WIDTH,
    Q_IMAGE_NOT_OBJECT,
    Q_KEY_UNKNOWN,
    Q_MISSING_IMAGE,
    Q_MISSING_OP,
    Q_MISSING_TABLE,
    Q_NO_COLUMNS,
    Q_TRUNCATED,
    Q_TYPE_MISMATCH,
    Q_UNKNOWN_OP,
    canonical,
    classify,
    qualified_table,
)
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile, LandingError, read_records
from airflow_cdc_provider.spark.sqlexpr import Expr

DEFINITION_FILE = "dms_table_definition.json"
OP_COLUMN = "Op"
BEFORE_PREFIX = "BI_"
BEFORE_IMAGE_FIELD = "before-image"
# A full load sorts before the changes of its table, whatever their times (DMS applies the changes
# it cached during the load after it, and stamps load rows with the transfer time).
PHASE_LOAD, PHASE_CHANGES = 0, 1
# A CSV row whose quoted value is still open when its file ends (quarantined at its first line).
Q_OPEN_QUOTE = "CSV quoted value not closed before the end of its file"
# Each CSV file's lines in order: the running window that finds where multi-line rows start.
_LINES_SO_FAR = "PARTITION BY `file` ORDER BY file_pos ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"

_OPS = {"I": OP_INSERT, "U": OP_UPDATE, "D": OP_DELETE}
_JSON_OPS = {"load": OP_READ, "insert": OP_INSERT, "update": OP_UPDATE, "delete": OP_DELETE}
# DMS names CDC files by the time it wrote them: 20141029-1134010000.csv (HHMMSS, then fractions).
_CDC_FILE_TIME = re.compile(r"^(\d{8})-(\d{6})(\d*)")
# Folders DMS's date partitioning (DatePartitionEnabled) or a hive-style layout adds below a table.
_PARTITION_FOLDER = re.compile(r"^[\d_-]+$|^[^=]+=[^=]*$")
# DMS data types (the ColumnType of an S3 source's table definition) -> Spark types. BYTE and BLOB
# values keep the text DMS writes (nothing declares how it encodes them); TIME stays text.
_DMS_TYPES = REPLICATE_TYPES | {
    "TIME": "string",
    "STRING": "string",
    "WSTRING": "string",
    "CLOB": "string",
    "NCLOB": "string",
}
_CSV_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, "escape": '"'}

_METADATA_FIELDS = (
    "timestamp",
    "record-type",
    "operation",
    "partition-key-type",
    "schema-name",
    "table-name",
    "transaction-id",
)
RECORD_SCHEMA = StructType(
    [
        StructField("data", IMAGE_TYPE),
        StructField("metadata", StructType([StructField(n, StringType()) for n in _METADATA_FIELDS])),
        StructField(BEFORE_IMAGE_FIELD, IMAGE_TYPE),
    ]
)

# What every S3 landing reader (CSV, Parquet) hands to `_tabular_events`.
_FILE_SCHEMA = StructType(
    [
        StructField("file", StringType()),
        StructField("table", StringType()),
        StructField("names", ArrayType(StringType())),
        StructField("types", MapType(StringType(), StringType())),
        StructField("key_cols", ArrayType(StringType())),
        StructField("load", BooleanType()),
        StructField("file_ms", LongType()),
    ]
)
_ROW_COLUMNS = (
    "file",
    "file_pos",
    "line",
    "raw",
    "bad",
    "table",
    "types",
    "key_cols",
    "load",
    "file_ms",
    "has_op",
    "op_text",
    "ts_us",
    "ts_bad",
    "image",
    "convert_failed",
)


# ---------------------------------------------------------------- tables: names, types, keys


@dataclass(frozen=True)
class TableDefinition:
    """One table of a ``dms_table_definition.json``."""

    columns: tuple[str, ...]
    types: dict[str, str] = field(default_factory=dict)
    keys: tuple[str, ...] = ()


def dms_spark_type(column: dict) -> str | None:
    """The Spark type of one ``TableColumns`` entry (None: keep the text)."""
    kind = str(column.get("ColumnType") or "").strip().upper()
    if kind == "NUMERIC":
        try:
            precision = int(column.get("ColumnPrecision") or 38)
            scale = int(column.get("ColumnScale") or 0)
        except (TypeError, ValueError):
            return None
        precision = precision if 0 < precision <= 38 else 38
        return f"decimal({precision},{min(max(scale, 0), precision)})"
    return _DMS_TYPES.get(kind)


def parse_definitions(text: str, path: str) -> dict[str, TableDefinition]:
    """``{owner.table: definition}`` of one DMS table-definition document; a clear error when it is not one."""
    try:
        document = json.loads(text)
        tables = document["Tables"]
        out = {}
        for table in tables:
            owner, name = str(table.get("TableOwner") or "").strip(), str(table["TableName"]).strip()
            columns = table["TableColumns"]
            names = tuple(str(c["ColumnName"]) for c in columns)
            types = {str(c["ColumnName"]): t for c in columns if (t := dms_spark_type(c)) is not None}
            keys = tuple(
                str(c["ColumnName"])
                for c in columns
                if str(c.get("ColumnIsPk", "")).strip().lower() == "true"
            )
            out[qualify((owner or None, name))] = TableDefinition(names, types, keys)
        return out
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise LandingError(
            f"cannot read the DMS table definition {path}: expected "
            f'{{"Tables": [{{"TableOwner", "TableName", "TableColumns": [{{"ColumnName", "ColumnType", ...}}]}}]}} '
            f"({type(exc).__name__}: {exc})"
        ) from None


def _read_text(spark: SparkSession, path: str) -> str:
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    stream = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).open(hadoop_path)
    try:
        return jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()


@dataclass(frozen=True)
class Catalog:
    """What the landing and the options say about each table: its CSV column names, types, key."""

    definitions: dict[str, TableDefinition]
    options: DecodeOptions

    def names(self, table: str | None) -> tuple[str, ...] | None:
        given = lookup(self.options.table_columns, table)
        if given is not None:
            return tuple(given)
        definition = lookup(self.definitions, table)
        return definition.columns if definition else None

    def types(self, table: str | None) -> dict[str, str] | None:
        definition = lookup(self.definitions, table)
        return dict(definition.types) if definition and definition.types else None

    def keys(self, table: str | None) -> list[str] | None:
        """The definition's key, unless ``--key`` names one for the table (then the engine uses that)."""
        if table is None or self.options.key_columns or lookup(self.options.table_keys, table):
            return None
        definition = lookup(self.definitions, table)
        return list(definition.keys) if definition and definition.keys else None


def is_definition_file(path: str) -> bool:
    return posixpath.basename(path).lower() == DEFINITION_FILE


def table_of(path: str) -> str | None:
    """``schema.table`` from ``.../<schema>/<table>/[date folders/]<file>``; None above two folders."""
    folders = [part for part in urlsplit(path).path.split("/")[:-1] if part]
    while folders and _PARTITION_FOLDER.match(folders[-1]):
        folders.pop()
    return qualify(folders[-2:]) if len(folders) >= 2 else None


def is_full_load(path: str) -> bool:
    return base_name(path).upper().startswith("LOAD")


def file_time_ms(path: str) -> int | None:
    """Epoch ms (UTC) of a CDC file's name (``20141029-1134010000.csv``), None for other names."""
    match = _CDC_FILE_TIME.match(base_name(path))
    if not match:
        return None
    try:
        moment = datetime.strptime(match.group(1) + match.group(2), "%Y%m%d%H%M%S")
    except ValueError:
        return None
    fraction = (match.group(3) + "000")[:3]
    return int(moment.replace(tzinfo=timezone.utc).timestamp()) * 1000 + int(fraction)


# ---------------------------------------------------------------- the decoder


class AwsDmsDecoder(Decoder):
    name = "aws-dms"
    description = (
        "AWS DMS: S3 target CSV (LOAD*/CDC files, Op column, schema/table folders) and Parquet, "
        "Kafka/Kinesis target JSON ({data, metadata}, BI_ before images); chosen by file extension"
    )
    needs = (
        "--key (unless dms_table_definition.json marks ColumnIsPk); CSV: --columns TABLE=C1,... "
        "or dms_table_definition.json; --timestamp-column for DMS's TimestampColumnName"
    )
    transaction_ids = True

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        definitions: dict[str, TableDefinition] = {}
        for landed in sorted({*files, *options.context_files}, key=lambda f: f.path):
            if is_definition_file(landed.path):
                definitions.update(parse_definitions(_read_text(spark, landed.path), landed.path))
        catalog = Catalog(definitions, options)
        by_kind: dict[str, list[LandedFile]] = defaultdict(list)
        for landed in files:
            if not is_definition_file(landed.path):
                by_kind[landing_kind(landed.path)].append(landed)
        parts: list[DataFrame] = []
        if by_kind[KIND_JSON]:
            parts.append(_json_events(spark, by_kind[KIND_JSON], catalog))
        tabular = []
        if by_kind[KIND_CSV]:
            tabular.append(_csv_rows(spark, by_kind[KIND_CSV], catalog))
        if by_kind[KIND_PARQUET]:
            tabular.extend(_parquet_rows(spark, by_kind[KIND_PARQUET], catalog))
        if tabular:
            rows = tabular[0].select(*_ROW_COLUMNS)
            for part in tabular[1:]:
                rows = rows.unionByName(part.select(*_ROW_COLUMNS))
            parts.append(_tabular_events(rows))
        if not parts:  # only table definitions
            return spark.createDataFrame([], CANONICAL_EVENT_SCHEMA)
        result = parts[0]
        for part in parts[1:]:
            result = result.unionByName(part)
        return result


# ---------------------------------------------------------------- Kafka / Kinesis JSON lines


def _json_events(spark: SparkSession, files: list[LandedFile], catalog: Catalog) -> DataFrame:
    parsed = parse_json_records(spark, files, RECORD_SCHEMA)
    meta = E.col("j.metadata")
    data = E.col("j.data")
    record_type = E.lower(E.trim(meta["record-type"]))
    operation = E.lower(E.trim(meta["operation"]))
    op = E.null("string")
    for code, name in _JSON_OPS.items():
        op = E.when(operation == code, E.lit(name)).otherwise(op)
    table_name = E.nullif(E.trim(meta["table-name"]), E.lit(""))
    table = E.when(
        table_name.isNotNull(), qualified_table(E.nullif(E.trim(meta["schema-name"]), E.lit("")), table_name)
    )
    stamp = E.try_to_timestamp(meta["timestamp"])
    text = E.col("text")
    may_hold_before = text.contains(f'"{BEFORE_PREFIX}') | text.contains("\\u")
    staged = parsed.select(
        "*",
        *E.columns(
            op.alias("_op"),
            table.alias("_table"),
            stamp.alias("_stamp"),
            # BI_ columns of `data` (prefix dropped), and the row without them. The walks over
            # `data` run only where the text names a BI_ column (or escapes a character, which
            # could spell one): most records, inserts and deletes, have none.
            E.when(
                may_hold_before,
                E.transform_keys(
                    E.map_filter(data, lambda k, v: k.startswith(BEFORE_PREFIX)),
                    lambda k, v: E.substring(k, len(BEFORE_PREFIX) + 1, 1 << 20),
                ),
            ).alias("_bi"),
            E.when(may_hold_before, E.map_filter(data, lambda k, v: ~k.startswith(BEFORE_PREFIX)))
            .otherwise(data)
            .alias("_row"),
        ),
    )
    op, row, stamp = E.col("_op"), E.col("_row"), E.col("_stamp")
    # The before image: the BI_ columns, or a before-image object.
    before = E.coalesce(E.col(f"j.{BEFORE_IMAGE_FIELD}"), E.when(E.size("_bi") > 0, E.col("_bi")))
    bad = E.col("bad")
    kind, reason = classify(
        (E.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
        (
            images_not_objects(bad, E.col(f"j.{CORRUPT}"), "$.data", f"$['{BEFORE_IMAGE_FIELD}']"),
            KIND_QUARANTINED,
            Q_IMAGE_NOT_OBJECT,
        ),
        (bad.isNotNull(), KIND_QUARANTINED, bad),
        (record_type == "control", KIND_IGNORED, IGNORED_DDL),
        (operation.isNull(), KIND_QUARANTINED, Q_MISSING_OP),
        (op.isNull() | (record_type.isNotNull() & (record_type != "data")), KIND_QUARANTINED, Q_UNKNOWN_OP),
        (E.col("_table").isNull(), KIND_QUARANTINED, Q_MISSING_TABLE),
        (meta["timestamp"].isNotNull() & stamp.isNull(), KIND_QUARANTINED, Q_TYPE_MISMATCH),
        ((op != OP_DELETE) & data.isNull(), KIND_QUARANTINED, Q_MISSING_IMAGE),
        ((op == OP_DELETE) & data.isNull(), KIND_QUARANTINED, Q_KEY_UNKNOWN),
    )
    is_change = kind == KIND_CHANGE
    return staged.select(
        *canonical(
            table=E.col("_table"),
            kind=kind,
            op=E.when(is_change, op),
            reason=reason,
            event_ms=E.unix_millis(stamp),
            log_pos=_position(op == OP_READ, E.unix_micros(stamp)),
            sub_pos=E.lit(0),
            tx_id=meta["transaction-id"],
            before=E.when(is_change & (op == OP_DELETE), row).when(is_change & (op == OP_UPDATE), before),
            after=E.when(is_change & (op != OP_DELETE), row),
            partial=E.lit(False),
            key_cols=_definition_keys(catalog, E.col("_table")),
            raw=E.col("text"),
        )
    )


def _position(load: Expr, time_us: Expr, *place: Expr) -> Expr:
    """``[0]`` for a full load, ``[1, time in µs, place...]`` for a change: loads first, then time.

    Null where ``load`` is (a record with no op): the engine's positions are nullable arrays.
    """
    return E.when(load, E.array(E.lit(PHASE_LOAD).cast("bigint"))).when(
        ~load, E.array(E.lit(PHASE_CHANGES).cast("bigint"), time_us, *place)
    )


def _definition_keys(catalog: Catalog, table: Expr) -> Expr:
    """Key columns the table definitions give (null where ``--key`` decides or none is defined)."""
    keyed = {name: keys for name in catalog.definitions if (keys := catalog.keys(name))}
    if not keyed:
        return E.null("array<string>")
    lookup = E.map(*[c for name, keys in keyed.items() for c in (E.lit(name), E.array(*map(E.lit, keys)))])
    return lookup[table]


# ---------------------------------------------------------------- S3 target: CSV and Parquet


def _file_table(
    spark: SparkSession, files: list[LandedFile], catalog: Catalog, with_names: bool
) -> DataFrame:
    """One row per landed file: its table, column names (CSV), types, key, load or change, name time."""
    rows = []
    for landed in files:
        table = table_of(landed.path)
        names = catalog.names(table) if with_names else None
        rows.append(
            (
                landed.path,
                table,
                list(names) if names is not None else None,
                catalog.types(table),
                catalog.keys(table),
                is_full_load(landed.path),
                file_time_ms(landed.path),
            )
        )
    return F.broadcast(spark.createDataFrame(rows, _FILE_SCHEMA))


def _csv_schema(width: int) -> str:
    return ", ".join([f"c{i} string" for i in range(width)] + [f"{CORRUPT} string"])


def _csv_fields(text: Expr, width: int) -> Expr:
    """The ``width`` fields of a CSV line as an array, or null when it has another number of fields."""
    options = E.map(*[E.lit(part) for item in _CSV_OPTIONS.items() for part in item])
    parsed = E.call("from_csv", text, E.lit(_csv_schema(width)), options)
    return E.let(
        parsed,
        lambda p: E.when(p.isNotNull() & p[CORRUPT].isNull(), E.array(*[p[f"c{i}"] for i in range(width)])),
    )


def _by_width(widths: list[int], count: Expr, build) -> Expr:
    out = E.null("array<string>")
    for width in widths:
        out = E.when(count == width, build(width)).otherwise(out)
    return out


def _odd_quotes(text: Expr) -> Expr:
    """Whether a line holds an odd number of ``"``: a quoted value's own quotes (``""`` included)
    come in pairs, so such a line opens a value that goes on past its end, or closes one."""
    quotes = E.length(text) - E.length(E.replace(text, E.lit('"'), E.lit("")))
    return E.coalesce(text.contains('"') & (quotes % 2 == 1), E.lit(False))


def _csv_records(spark: SparkSession, files: list[LandedFile]) -> DataFrame:
    """The records of CSV files: their lines, except that a row with a quoted value holding a line
    break is one record over its lines. Columns: those of ``read_records`` and ``open_quote``.

    Only files with an odd-quote line are regrouped (a window over each one's lines). Finding them
    is one scan of the text, no parsing: files without multi-line values, the usual landing, pass
    through as read, with no shuffle.
    """
    lines = read_records(spark, files)
    odd = _odd_quotes(E.col("text"))
    spanning = sorted(r["file"] for r in lines.where(odd.column()).select("file").distinct().collect())
    plain = lines.select("*", E.lit(False).alias("open_quote").column())
    if not spanning:
        return plain
    named = F.broadcast(spark.createDataFrame([(f,) for f in spanning], "file string"))
    joined = _joined_lines(lines.join(named, "file", "left_semi"))
    return plain.join(named, "file", "left_anti").unionByName(joined)


def _joined_lines(lines: DataFrame) -> DataFrame:
    """Lines (``read_records`` columns) joined into the CSV rows they make up.

    A line starts a row when the lines before it in its file hold an even number of odd-quote
    lines: no quoted value is open there. A row keeps its first line's ``file_pos`` and ``line``,
    so that its order, ``--with-metadata``'s line and quarantine name the line it starts on. Its
    text is its lines joined with ``\\n``, the line break the reader split them at (a ``\\r``
    before it is dropped with it). A row whose lines leave a quote open is ``open_quote``: its file
    ended inside the value. The stand-in for the unreadable rest of a damaged file always starts a
    row of its own.
    """
    odd = _odd_quotes(E.col("text")).cast("int")
    counted = lines.select("*", *E.columns(odd.alias("_odd"), E.sum(odd).over(_LINES_SO_FAR).alias("_odds")))
    starts = ((E.col("_odds") - E.col("_odd")) % 2 == 0) | E.col("damaged")
    first = E.max(E.when(starts, E.col("file_pos"))).over(_LINES_SO_FAR)
    grouped = counted.select("*", first.alias("_first").column())
    in_order = E.array_sort(E.collect_list(E.struct(E.col("file_pos"), E.col("text"))))
    text = E.array_join(E.transform(in_order, lambda part: part["text"]), "\n")
    damaged = E.bool_or("damaged")
    return (
        grouped.groupBy("file", "_first")
        .agg(
            *E.columns(
                E.min("line").alias("line"),
                E.when(~damaged, text).alias("text"),
                E.bool_or("unterminated").alias("unterminated"),
                damaged.alias("damaged"),
                E.bool_or("not_utf8").alias("not_utf8"),
                (E.sum("_odd") % 2 == 1).alias("open_quote"),
            )
        )
        .withColumnRenamed("_first", "file_pos")
    )


def _csv_rows(spark: SparkSession, files: list[LandedFile], catalog: Catalog) -> DataFrame:
    """Headerless CSV rows (``_csv_records``): each is parsed at its table's width plus one (``Op``
    first) or, in a full-load file when that does not fit, at the table's width (no ``Op``); neither
    fitting quarantines the row."""
    per_file = _file_table(spark, files, catalog, with_names=True)
    widths = sorted({len(names) for names in (catalog.names(table_of(f.path)) for f in files) if names})
    text = E.col("text")
    records = _csv_records(spark, files).where(((E.trim(text) != "") | E.col("damaged")).column())
    count = E.size("names")
    staged = records.join(per_file, "file", "left").select(
        "*", _by_width(widths, count, lambda w: _csv_fields(text, w + 1)).alias("_with_op").column()
    )
    with_op = E.col("_with_op")
    staged = staged.select(
        "*",
        # Only a full load may come without Op (IncludeOpForFullLoad off); change files carry it.
        E.when(with_op.isNull() & E.col("load"), _by_width(widths, count, lambda w: _csv_fields(text, w)))
        .alias("_without_op")
        .column(),
    )
    without_op = E.col("_without_op")
    fits = with_op.isNotNull() | without_op.isNotNull()
    bad = E.coalesce(
        unparsable_reason(text, E.col("damaged"), E.col("not_utf8")),
        E.when(E.col("open_quote"), E.lit(Q_OPEN_QUOTE))
        .when(E.col("table").isNull(), E.lit(Q_MISSING_TABLE))
        .when(E.col("names").isNull(), E.lit(Q_NO_COLUMNS))
        .when(~fits & E.col("unterminated"), E.lit(Q_TRUNCATED))
        .when(~fits, E.lit(Q_CSV_WIDTH)),
    )
    values = E.coalesce(E.slice(with_op, 2, count), without_op)
    rows = staged.select(
        "file",
        "file_pos",
        "line",
        *E.columns(text.alias("raw"), bad.alias("bad")),
        "table",
        "types",
        "key_cols",
        "load",
        "file_ms",
        *E.columns(
            with_op.isNotNull().alias("has_op"),
            E.when(with_op.isNotNull(), with_op[0]).alias("op_text"),
            E.when(bad.isNull(), E.map_from_arrays("names", values)).alias("_text_map"),
        ),
    )
    text_map = E.col("_text_map")
    ts_name = catalog.options.timestamp_column
    if ts_name:
        ts_text = text_map[ts_name]
        text_map = E.map_filter(text_map, lambda k, v: k != ts_name)
    else:
        ts_text = E.null("string")
    typed = text_image(text_map, E.col("types"))
    stamp = E.try_to_timestamp(ts_text)
    return rows.select(
        *[c for c in rows.columns if c != "_text_map"],
        *E.columns(
            E.unix_micros(stamp).alias("ts_us"),
            E.coalesce((E.trim(ts_text) != "") & stamp.isNull(), E.lit(False)).alias("ts_bad"),
            typed.alias("image"),
            E.coalesce(failed_conversions(text_map, typed), E.lit(False)).alias("convert_failed"),
        ),
    )


def _parquet_rows(spark: SparkSession, files: list[LandedFile], catalog: Catalog) -> list[DataFrame]:
    """DMS Parquet files, read a table folder at a time; a file whose footer does not read is one
    quarantined record."""
    footers = parquet_footers(spark, [f.path for f in files])
    readable = [f for f in files if footers[f.path] is not None]
    parts = []
    broken = [f for f in files if footers[f.path] is None]
    if broken:
        parts.append(
            _file_table(spark, broken, catalog, with_names=False).select(
                "file",
                *E.columns(
                    E.lit(0).cast("bigint").alias("file_pos"),
                    E.null("bigint").alias("line"),
                    E.null("string").alias("raw"),
                    E.lit(Q_BAD_PARQUET).alias("bad"),
                ),
                "table",
                "types",
                "key_cols",
                "load",
                "file_ms",
                *E.columns(
                    E.lit(False).alias("has_op"),
                    E.null("string").alias("op_text"),
                    E.null("bigint").alias("ts_us"),
                    E.lit(False).alias("ts_bad"),
                    E.null(IMAGE_TYPE).alias("image"),
                    E.lit(False).alias("convert_failed"),
                ),
            )
        )
    if readable:
        per_file = _file_table(spark, readable, catalog, with_names=False).drop("types")
        for frame in parquet_frames(spark, [f.path for f in readable]):
            parts.append(_parquet_group(frame, per_file, catalog.options.timestamp_column))
    return parts


def _parquet_group(df: DataFrame, per_file: DataFrame, ts_name: str | None) -> DataFrame:
    fields = {f.name: f.dataType for f in df.schema.fields}
    ts_name = ts_name if ts_name in fields else None
    business = [name for name in fields if name not in (OP_COLUMN, ts_name)]
    image = E.map(*[c for name in business for c in (E.lit(name), column_expr(name).cast("variant"))])
    declared = [(name, declared_type(fields[name])) for name in business]
    types = E.map(*[c for name, t in declared if t for c in (E.lit(name), E.lit(t))])
    if ts_name is None:
        ts_us, ts_bad = E.null("bigint"), E.lit(False)
    elif isinstance(fields[ts_name], TimestampType):
        ts_us, ts_bad = E.unix_micros(column_expr(ts_name)), E.lit(False)
    else:
        text = column_expr(ts_name).cast("string")
        stamp = E.try_to_timestamp(text)
        ts_us, ts_bad = E.unix_micros(stamp), (E.trim(text) != "") & stamp.isNull()
    has_op = OP_COLUMN in fields
    rows = df.select(
        *E.columns(
            E.col("_metadata.file_path").alias("file"),
            E.col("_metadata.row_index").alias("file_pos"),
            E.null("bigint").alias("line"),
            E.to_json(E.struct(*[column_expr(name) for name in fields])).alias("raw"),
            E.null("string").alias("bad"),
            types.cast(MapType(StringType(), StringType())).alias("types"),
            E.lit(has_op).alias("has_op"),
            (column_expr(OP_COLUMN).cast("string") if has_op else E.null("string")).alias("op_text"),
            ts_us.alias("ts_us"),
            E.coalesce(ts_bad, E.lit(False)).alias("ts_bad"),
            image.cast(IMAGE_TYPE).alias("image"),
            E.lit(False).alias("convert_failed"),
        )
    )
    joined = rows.join(per_file, "file", "left")
    # A file of a table folder whose other files carry Op, itself without it (merged schema): no Op.
    return joined.withColumns(
        {
            "bad": E.when(E.col("table").isNull(), E.lit(Q_MISSING_TABLE)).column(),
            "has_op": (E.col("has_op") & E.col("op_text").isNotNull()).column(),
        }
    )


def _tabular_events(rows: DataFrame) -> DataFrame:
    """S3 rows (CSV or Parquet) to canonical events: ``Op`` (or its absence) and the row's time."""
    code = E.upper(E.trim(E.col("op_text")))
    load, has_op = E.col("load"), E.col("has_op")
    inserted = E.when(load, E.lit(OP_READ)).otherwise(E.lit(OP_INSERT))
    op = E.when(~has_op, inserted).when(code == "I", inserted)
    for letter in ("U", "D"):
        op = op.when(code == letter, E.lit(_OPS[letter]))
    bad = E.col("bad")
    kind, reason = classify(
        (bad.isNotNull(), KIND_QUARANTINED, bad),
        (has_op & E.coalesce(code == "", E.lit(True)), KIND_QUARANTINED, Q_MISSING_OP),
        (op.isNull(), KIND_QUARANTINED, Q_UNKNOWN_OP),
        (E.col("ts_bad") | E.col("convert_failed"), KIND_QUARANTINED, Q_TYPE_MISMATCH),
    )
    is_change = kind == KIND_CHANGE
    file_ms = E.col("file_ms")
    time_us = E.coalesce(E.col("ts_us"), file_ms * 1000)
    return rows.select(
        *canonical(
            table=E.col("table"),
            kind=kind,
            op=E.when(is_change, op),
            reason=reason,
            event_ms=E.coalesce(E.floor(E.col("ts_us") / 1000), file_ms),
            log_pos=_position(load, time_us, E.coalesce(file_ms, E.lit(0)), E.col("file_pos")),
            sub_pos=E.lit(0),
            before=E.when(is_change & (op == OP_DELETE), E.col("image")),
            after=E.when(is_change & (op != OP_DELETE), E.col("image")),
            partial=E.lit(False),
            key_cols=E.col("key_cols"),
            types=E.when(is_change, E.col("types")),
            raw=E.col("raw"),
        )
    )

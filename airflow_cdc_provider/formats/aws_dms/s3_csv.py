"""AWS DMS's S3 target in CSV: ``ROW_COLUMNS`` rows of headerless ``.csv`` files (compressed too).

The first field is ``Op`` (``I``/``U``/``D``) in change files, and in full-load files ``LOAD*.csv``
only with ``IncludeOpForFullLoad``. Whether a full-load row has it is read from its width: the
table's column count plus one means ``Op`` comes first, the column count means no ``Op``. Column
names come from ``--columns TABLE=C1,C2,...`` or from ``dms_table_definition.json``.

Rows are parsed by Spark's own CSV parser (``from_csv``, RFC 4180 quoting, an empty field is
null), each row on its own, so a quarantined row keeps its file and line. A quoted value may hold
line breaks, so one row may span lines: a line with an odd number of ``"`` opens (or closes) such a
value, and the lines up to the one that closes it are joined with ``\\n`` into the row, which keeps
its first line's file, line and position. A value still open at the end of its file is
quarantined (``Q_OPEN_QUOTE``) at the line it opened on.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_cdc_provider.formats.aws_dms.definitions import Catalog, table_of
from airflow_cdc_provider.formats.aws_dms.s3_rows import file_table
from airflow_cdc_provider.formats.common.jsonlines import CORRUPT, unparsable_reason
from airflow_cdc_provider.formats.common.values import failed_conversions, text_image
from airflow_cdc_provider.formats.events import (
    Q_CSV_WIDTH,
    Q_MISSING_TABLE,
    Q_NO_COLUMNS,
    Q_TRUNCATED,
)
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile, read_records
from airflow_cdc_provider.spark.sqlexpr import Expr

# A CSV row whose quoted value is still open when its file ends (quarantined at its first line).
Q_OPEN_QUOTE = "CSV quoted value not closed before the end of its file"
# Each CSV file's lines in order: the running window that finds where multi-line rows start.
_LINES_SO_FAR = "PARTITION BY `file` ORDER BY file_pos ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
_CSV_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, "escape": '"'}


def csv_rows(spark: SparkSession, files: list[LandedFile], catalog: Catalog) -> DataFrame:
    """Headerless CSV rows (``_csv_records``): each is parsed at its table's width plus one (``Op``
    first) or, in a full-load file when that does not fit, at the table's width (no ``Op``); neither
    fitting quarantines the row. Then its values are typed and its timestamp column read."""
    fitted = _fitted_fields(spark, files, catalog)
    return _typed_rows(_text_rows(fitted), catalog.options.timestamp_column)


def _fitted_fields(spark: SparkSession, files: list[LandedFile], catalog: Catalog) -> DataFrame:
    """The non-blank records with their file's facts (``file_table``), each parsed at the widths its
    table may have: ``_with_op`` (its columns and ``Op``) and, for a full-load row that does not fit
    that, ``_without_op``; each null where the row has another number of fields."""
    per_file = file_table(spark, files, catalog, with_names=True)
    widths = sorted({len(names) for names in (catalog.names(table_of(f.path)) for f in files) if names})
    text = E.col("text")
    records = _csv_records(spark, files).where(((E.trim(text) != "") | E.col("damaged")).column())
    count = E.size("names")
    staged = records.join(per_file, "file", "left").select(
        "*", _by_width(widths, count, lambda w: _csv_fields(text, w + 1)).alias("_with_op").column()
    )
    with_op = E.col("_with_op")
    return staged.select(
        "*",
        # Only a full load may come without Op (IncludeOpForFullLoad off); change files carry it.
        E.when(with_op.isNull() & E.col("load"), _by_width(widths, count, lambda w: _csv_fields(text, w)))
        .alias("_without_op")
        .column(),
    )


def _quarantine_reason(with_op: Expr, without_op: Expr) -> Expr:
    """Why a fitted record cannot be a row (null when it can): unreadable text, a quoted value open
    at the end of its file, no table or column names, or a width that fits neither way."""
    text = E.col("text")
    fits = with_op.isNotNull() | without_op.isNotNull()
    return E.coalesce(
        unparsable_reason(text, E.col("damaged"), E.col("not_utf8")),
        E.when(E.col("open_quote"), E.lit(Q_OPEN_QUOTE))
        .when(E.col("table").isNull(), E.lit(Q_MISSING_TABLE))
        .when(E.col("names").isNull(), E.lit(Q_NO_COLUMNS))
        .when(~fits & E.col("unterminated"), E.lit(Q_TRUNCATED))
        .when(~fits, E.lit(Q_CSV_WIDTH)),
    )


def _text_rows(fitted: DataFrame) -> DataFrame:
    """``ROW_COLUMNS`` up to ``op_text`` of the ``_fitted_fields`` records, and each row's values as
    text by column name (``_text_map``, null for a quarantined record)."""
    text, with_op, without_op = E.col("text"), E.col("_with_op"), E.col("_without_op")
    bad = _quarantine_reason(with_op, without_op)
    values = E.coalesce(E.slice(with_op, 2, E.size("names")), without_op)
    return fitted.select(
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


def _typed_rows(rows: DataFrame, ts_name: str | None) -> DataFrame:
    """``_text_rows`` with the rest of ``ROW_COLUMNS``: the ``--timestamp-column`` (``ts_name``) read
    out of the row as its time, the other values typed by the table's declared types."""
    text_map = E.col("_text_map")
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


def _odd_quotes(text: Expr) -> Expr:
    """Whether a line holds an odd number of ``"``: a quoted value's own quotes (``""`` included)
    come in pairs, so such a line opens a value that goes on past its end, or closes one."""
    quotes = E.length(text) - E.length(E.replace(text, E.lit('"'), E.lit("")))
    return E.coalesce(text.contains('"') & (quotes % 2 == 1), E.lit(False))


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


def _by_width(widths: list[int], count: Expr, build) -> Expr:
    """``build(width)`` for the width among ``widths`` that a row's table has (``count`` columns):
    ``from_csv`` takes its schema as a literal, so each width the landing's tables have is a branch."""
    out = E.null("array<string>")
    for width in widths:
        out = E.when(count == width, build(width)).otherwise(out)
    return out


def _csv_fields(text: Expr, width: int) -> Expr:
    """The ``width`` fields of a CSV line as an array, or null when it has another number of fields."""
    options = E.map(*[E.lit(part) for item in _CSV_OPTIONS.items() for part in item])
    parsed = E.call("from_csv", text, E.lit(_csv_schema(width)), options)
    return E.let(
        parsed,
        lambda p: E.when(p.isNotNull() & p[CORRUPT].isNull(), E.array(*[p[f"c{i}"] for i in range(width)])),
    )


def _csv_schema(width: int) -> str:
    """The ``from_csv`` schema of a row of ``width`` fields, with the column that catches a bad row."""
    return ", ".join([f"c{i} string" for i in range(width)] + [f"{CORRUPT} string"])

"""Debezium records as Kafka Connect's S3/HDFS sinks write them with the Avro converter (``--format debezium-avro``).

Each record is the Debezium envelope (``before``, ``after``, ``source``, ``op``, ``ts_ms``, optional
``transaction``). Two landings, told apart by file extension:

- ``.parquet``: the sinks' ParquetFormat, read by Spark's Parquet reader. The Avro schema the sink
  wrote it from (``parquet.avro.schema`` in the footer, when there) names each column's Connect
  logical type; Spark's own types (decimal, date, timestamp) say the rest.
- anything else (``.avro``): Avro container files (AvroFormat). No spark-avro jar is needed: the
  files are decoded by fastavro in Spark's Python workers, batch by batch (``mapInArrow``, as
  ``dts-avro`` does), each with its own writer schema.

Either way each record is handed to the ``debezium-json`` decoder as the JSON Kafka Connect's
JsonConverter writes for it, with the column types of its file's schema block (``connect_avro``;
read on the driver from the container's header or the Parquet footer, and typed once per file
rather than once per record): Connect logical types
(Decimal, Date, Time, Timestamp, MicroTimestamp, NanoTimestamp, ZonedTimestamp, ...), ordering
(``source`` positions), keys and quarantine reasons are that decoder's, so the same record gives
the same event whichever way it landed. Snapshot columns are typed by the schema (declared types).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    DataType,
    DateType,
    DecimalType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.common.jsonlines import CORRUPT, diagnose
from airflow_cdc_provider.formats.common.kafka_connect import DECIMAL_NAME
from airflow_cdc_provider.formats.common.tabular import (
    KIND_PARQUET,
    column_expr,
    landing_kind,
    parquet_footers,
    parquet_frames,
    read_on_driver,
)
from airflow_cdc_provider.formats.debezium.connect_avro import (
    DECODED_DDL,
    HEADER_BYTES,
    AvroSchema,
    connect_field,
    container_block,
    decode_batches,
)
from airflow_cdc_provider.formats.debezium.envelope import (
    CONNECT,
    CONNECT_BASE64,
    CONNECT_NAMES,
    RECORD_SCHEMA,
    block_types,
    envelope_events,
    with_connect_types,
)
from airflow_cdc_provider.formats.events import Q_BAD_AVRO, Q_BAD_PARQUET
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.filesystem import JobFileSystem
from airflow_cdc_provider.spark.reader import LandedFile, landed_file_column, union_all
from airflow_cdc_provider.spark.sqlexpr import Expr

AVRO_SCHEMA_KEY = "parquet.avro.schema"  # where parquet-avro writers keep the Avro schema
_ENVELOPE_COLUMNS = ("op", "ts_ms", "before", "after", "source", "transaction")
_SPARK_CONNECT = {
    "tinyint": "int8",
    "smallint": "int16",
    "int": "int32",
    "bigint": "int64",
    "float": "float32",
    "double": "float64",
    "boolean": "boolean",
    "string": "string",
    "binary": "bytes",
}
_WITH_CORRUPT = StructType(list(RECORD_SCHEMA.fields) + [StructField(CORRUPT, StringType())])
# Whether a record's file's schema block was known; its column types are ``with_connect_types``'s.
_BLOCK_KNOWN = "_block_known"
_CONNECT_COLUMNS = (CONNECT, CONNECT_NAMES, CONNECT_BASE64)
# Each schema block's files decode as a branch of their own, whose column types are literals Spark
# folds into the decode (about half its cost), when the landing has one block, or up to
# MAX_BLOCK_BRANCHES blocks and at least BRANCHES_MIN_BYTES: a branch adds a decode to the plan
# (about 0.8 s of planning warm, more cold), which a small landing does not win back. Otherwise each
# record's types are picked by a join on its file.
MAX_BLOCK_BRANCHES = 4
BRANCHES_MIN_BYTES = 1024 * 1024


class DebeziumAvroDecoder(Decoder):
    name = "debezium-avro"
    worker_modules = ("fastavro", "pyarrow")
    description = (
        "Debezium envelope records in Avro container files (Kafka Connect S3/HDFS sinks, Avro converter) "
        "or landed as Parquet; Connect logical types mapped as debezium-json maps them; fastavro in Python workers"
    )
    needs = "--key"
    transaction_ids = True

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        parquet = [f.path for f in files if landing_kind(f.path, (KIND_PARQUET,)) == KIND_PARQUET]
        avro = [f.path for f in files if landing_kind(f.path, (KIND_PARQUET,)) != KIND_PARQUET]
        avro_blocks = _container_blocks(spark, avro) if avro else {}
        parquet_parts = _parquet_records(spark, parquet) if parquet else []
        blocks = {**avro_blocks, **{path: part.block for part in parquet_parts for path in part.paths}}
        distinct = sorted({block for block in blocks.values() if block is not None})
        literals, data_types = _typed_blocks(spark, distinct)
        large = sum(f.size for f in files) >= BRANCHES_MIN_BYTES
        if len(distinct) > (MAX_BLOCK_BRANCHES if large else 1):
            parts = [_avro_records(spark, avro)] if avro else []
            records = union_all([*parts, *[part.records for part in parquet_parts]])
            typed = _joined_block_types(spark, records, blocks, literals, data_types)
            return envelope_events(_as_parsed(typed), options, typed=True)
        branches = []
        for block, types in [*zip(distinct, literals), (None, [E.null(t) for t in data_types])]:
            parts = [part.records for part in parquet_parts if part.block == block]
            paths = [path for path, b in avro_blocks.items() if b == block]
            if paths:
                parts.append(_avro_records(spark, paths))
            if parts:
                typed = union_all(parts).select(
                    "*",
                    *E.columns(
                        E.lit(block is not None).alias(_BLOCK_KNOWN),
                        *[v.alias(n) for n, v in zip(_CONNECT_COLUMNS, types)],
                    ),
                )
                branches.append(envelope_events(_as_parsed(typed), options, typed=True))
        return union_all(branches)


def _container_blocks(spark: SparkSession, paths: list[str]) -> dict[str, str | None]:
    """Each Avro container file's schema block, read on the driver from its header (None when the
    header does not read: its records are then quarantined by the worker or ``_as_parsed``)."""

    def read(fs: JobFileSystem, path: str) -> str | None:
        head = fs.read_bytes(path, 0, HEADER_BYTES)
        block = container_block(head)
        if block is None and len(head) == HEADER_BYTES:
            block = container_block(fs.read_bytes(path))
        return block

    return read_on_driver(spark, paths, read)


def _typed_blocks(spark: SparkSession, blocks: list[str]) -> tuple[list[list[Expr]], list[DataType]]:
    """Each schema block's ``with_connect_types`` columns as literals, and their types: typed once
    per block, not once per record, on the driver (an inline table: no Spark job)."""
    rows = blocks or [None]  # without blocks, only the types are wanted
    values = ", ".join(f"({i}, CAST(:b{i} AS STRING))" for i in range(len(rows)))
    frame = spark.sql(
        f"SELECT * FROM VALUES {values} AS blocks(i, block)", args={f"b{i}": b for i, b in enumerate(rows)}
    )
    typed = with_connect_types(frame, block_types(E.col("block")))
    data_types = [typed.schema[name].dataType for name in _CONNECT_COLUMNS]
    # Maps as their entries: a map collected as a dict loses its order, the snapshot's column order.
    ordered = [
        E.map_entries(n) if isinstance(t, MapType) else E.col(n) for n, t in zip(_CONNECT_COLUMNS, data_types)
    ]
    collected = typed.select("i", *E.columns(*[e.alias(n) for e, n in zip(ordered, _CONNECT_COLUMNS)]))
    rows = sorted(collected.collect(), key=lambda row: row["i"]) if blocks else []
    return [
        [E.typed_lit(row[n], t) for n, t in zip(_CONNECT_COLUMNS, data_types)] for row in rows
    ], data_types


def _joined_block_types(
    spark: SparkSession,
    records: DataFrame,
    blocks: dict[str, str | None],
    literals: list[list[Expr]],
    data_types: list[DataType],
) -> DataFrame:
    """``records`` with their file's schema block's ``with_connect_types`` columns (``literals``, in
    the order of the sorted distinct blocks), picked by a broadcast join on the file, and
    ``_BLOCK_KNOWN``: whether the block was read (a file whose header the driver could not read
    but the worker could leaves its records without types, and they are quarantined)."""
    known = {path: block for path, block in blocks.items() if block is not None}
    index = {block: i for i, block in enumerate(sorted(set(known.values())))}
    files = spark.createDataFrame([(path, index[b]) for path, b in known.items()], "file string, _block int")
    joined = records.join(files.hint("broadcast"), "file", "left")
    block = E.col("_block")
    columns = []
    for n, (name, data_type) in enumerate(zip(_CONNECT_COLUMNS, data_types)):
        picked: Expr = E.null(data_type)
        for i in reversed(range(len(index))):
            picked = E.when(block == i, literals[i][n]).otherwise(picked)
        columns.append(picked.alias(name))
    return joined.select(*records.columns, *E.columns(block.isNotNull().alias(_BLOCK_KNOWN), *columns))


def _as_parsed(records: DataFrame) -> DataFrame:
    """Records, each one envelope as JSON, with their file's column types
    (``_with_block_types``) -> the columns ``parse_json_records`` gives, and the
    ``with_connect_types`` columns."""
    parsed = records.select(
        "file",
        "file_pos",
        "line",
        "text",
        E.when(E.col("text").isNotNull(), E.from_json(E.col("text"), _WITH_CORRUPT, {"mode": "PERMISSIVE"}))
        .alias("j")
        .column(),
        "bad",
        _BLOCK_KNOWN,
        *_CONNECT_COLUMNS,
    )
    return parsed.select(
        "file",
        "file_pos",
        "line",
        "text",
        "j",
        *_CONNECT_COLUMNS,
        *E.columns(
            E.lit(False).alias("tombstone"),
            E.coalesce(
                E.col("bad"),
                diagnose(E.col(f"j.{CORRUPT}"), E.lit(False)),
                E.when(E.col("text").isNotNull() & ~E.col(_BLOCK_KNOWN), E.lit(Q_BAD_AVRO)),
            ).alias("bad"),
        ),
    )


def _avro_records(spark: SparkSession, paths: list[str]) -> DataFrame:
    """One row per record of each Avro container file (decoded in Python workers)."""
    # recursiveFileLookup: no partition columns inferred from folder names (partition=0/, dt=...).
    files = spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(paths)
    return files.select(landed_file_column().alias("file").column(), "content").mapInArrow(
        decode_batches, DECODED_DDL
    )


@dataclass(frozen=True)
class _ParquetPart:
    """Records of Parquet files that share one schema block (None: footers that did not read)."""

    records: DataFrame
    paths: tuple[str, ...]
    block: str | None


def _parquet_records(spark: SparkSession, paths: list[str]) -> list[_ParquetPart]:
    """Parquet files grouped by the Avro schema they were written from, with each group's schema
    block; a file whose footer does not read is one quarantined record."""
    footers = parquet_footers(spark, paths)
    parts = []
    broken = [p for p in paths if footers[p] is None]
    if broken:
        rows = [(p, 0, None, None, Q_BAD_PARQUET) for p in broken]
        parts.append(_ParquetPart(spark.createDataFrame(rows, DECODED_DDL), tuple(broken), None))
    by_schema: dict[str | None, list[str]] = defaultdict(list)
    for path in paths:
        if footers[path] is not None:
            by_schema[footers[path].get(AVRO_SCHEMA_KEY)].append(path)
    for avro_text, group in by_schema.items():
        avro = AvroSchema(json.loads(avro_text)) if avro_text else None
        for frame_paths, frame in parquet_frames(spark, group):
            records, block = _parquet_group(frame, avro)
            parts.append(_ParquetPart(records, tuple(frame_paths), block))
    return parts


def _parquet_value(value: Expr, spark_field: StructField, avro: AvroSchema | None, node) -> tuple[Expr, dict]:
    """One column of a Parquet image as JsonConverter writes it, and its Connect schema entry."""
    name, data_type = spark_field.name, spark_field.dataType
    entry = {"field": name, "optional": True}
    if isinstance(data_type, DateType):
        return E.unix_date(value), {**entry, "type": "int32", "name": "org.apache.kafka.connect.data.Date"}
    if isinstance(data_type, (TimestampType, TimestampNTZType)):
        micros = E.unix_micros(value.cast("timestamp"))
        return micros, {**entry, "type": "int64", "name": "io.debezium.time.MicroTimestamp"}
    if isinstance(data_type, DecimalType):
        parameters = {"scale": str(data_type.scale), "connect.decimal.precision": str(data_type.precision)}
        return value, {**entry, "type": "bytes", "name": DECIMAL_NAME, "parameters": parameters}
    if avro is not None and node is not None:
        return value, connect_field(avro, node, name)
    kind = data_type.typeName()
    return value, {
        **entry,
        "type": _SPARK_CONNECT.get(
            data_type.simpleString(), kind if kind in ("struct", "array", "map") else "string"
        ),
    }


def _parquet_group(df: DataFrame, avro: AvroSchema | None) -> tuple[DataFrame, str]:
    """One frame's records, each its envelope as JSON, and the frame's schema block."""
    fields = {f.name: f for f in df.schema.fields}
    columns: list[Expr] = []
    schema_fields = []
    for name in _ENVELOPE_COLUMNS:
        spark_field = fields.get(name)
        if spark_field is None:
            columns.append(E.null("string").alias(name))
            continue
        if name not in ("before", "after") or not isinstance(spark_field.dataType, StructType):
            columns.append(column_expr(name).alias(name))
            continue
        record = avro.unwrap(avro.field(avro.root, name))[0] if avro is not None else None
        values, entries = [], []
        for inner in spark_field.dataType.fields:
            node = avro.field(record, inner.name) if avro is not None else None
            value, entry = _parquet_value(column_expr(name)[inner.name], inner, avro, node)
            values.append(value.alias(inner.name))
            entries.append(entry)
        columns.append(E.when(column_expr(name).isNotNull(), E.struct(*values)).alias(name))
        schema_fields.append({"field": name, "type": "struct", "optional": True, "fields": entries})
    block = json.dumps({"type": "struct", "optional": False, "fields": schema_fields}, separators=(",", ":"))
    records = df.select(
        *E.columns(
            landed_file_column().alias("file"),
            E.col("_metadata.row_index").alias("file_pos"),
            E.null("bigint").alias("line"),
            E.to_json(E.struct(*columns), E.map(E.lit("ignoreNullFields"), E.lit("false"))).alias("text"),
            E.null("string").alias("bad"),
        )
    )
    return records, block

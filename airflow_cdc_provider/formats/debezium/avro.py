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
JsonConverter writes for it, with its schema block (``connect_avro``): Connect logical types
(Decimal, Date, Time, Timestamp, MicroTimestamp, NanoTimestamp, ZonedTimestamp, ...), ordering
(``source`` positions), keys and quarantine reasons are that decoder's, so the same record gives
the same event whichever way it landed. Snapshot columns are typed by the schema (declared types).
"""

from __future__ import annotations

import json
from collections import defaultdict

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    DateType,
    DecimalType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.common.jsonlines import CORRUPT, diagnose
from airflow_cdc_provider.formats.common.tabular import (
    KIND_PARQUET,
    column_expr,
    landing_kind,
    parquet_footers,
    parquet_frames,
)
from airflow_cdc_provider.formats.debezium.connect_avro import (
    DECIMAL_NAME,
    DECODED_DDL,
    AvroSchema,
    connect_field,
    decode_batches,
)
from airflow_cdc_provider.formats.debezium.envelope import RECORD_SCHEMA, envelope_events
from airflow_cdc_provider.formats.events import Q_BAD_PARQUET
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile, landed_file_column
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
        parts: list[DataFrame] = []
        if avro:
            parts.append(_avro_records(spark, avro))
        if parquet:
            parts.extend(_parquet_records(spark, parquet))
        records = parts[0]
        for part in parts[1:]:
            records = records.unionByName(part)
        return envelope_events(_as_parsed(records), options)


def _as_parsed(records: DataFrame) -> DataFrame:
    """Records as JSON payload + schema block -> the columns ``parse_json_records`` gives."""
    document = E.concat(E.lit('{"schema":'), E.col("schema"), E.lit(',"payload":'), E.col("text"), E.lit("}"))
    parsed = records.select(
        "file",
        "file_pos",
        "line",
        "text",
        E.when(E.col("text").isNotNull(), E.from_json(document, _WITH_CORRUPT, {"mode": "PERMISSIVE"}))
        .alias("j")
        .column(),
        "bad",
    )
    return parsed.select(
        "file",
        "file_pos",
        "line",
        "text",
        "j",
        *E.columns(
            E.lit(False).alias("tombstone"),
            E.coalesce(E.col("bad"), diagnose(E.col(f"j.{CORRUPT}"), E.lit(False))).alias("bad"),
        ),
    )


def _avro_records(spark: SparkSession, paths: list[str]) -> DataFrame:
    """One row per record of each Avro container file (decoded in Python workers)."""
    # recursiveFileLookup: no partition columns inferred from folder names (partition=0/, dt=...).
    files = spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(paths)
    return files.select(landed_file_column().alias("file").column(), "content").mapInArrow(
        decode_batches, DECODED_DDL
    )


def _parquet_records(spark: SparkSession, paths: list[str]) -> list[DataFrame]:
    """Parquet files grouped by the Avro schema they were written from; a file whose footer does
    not read is one quarantined record."""
    footers = parquet_footers(spark, paths)
    parts = []
    broken = [(p, 0, None, None, None, Q_BAD_PARQUET) for p in paths if footers[p] is None]
    if broken:
        parts.append(spark.createDataFrame(broken, DECODED_DDL))
    by_schema: dict[str | None, list[str]] = defaultdict(list)
    for path in paths:
        if footers[path] is not None:
            by_schema[footers[path].get(AVRO_SCHEMA_KEY)].append(path)
    for avro_text, group in by_schema.items():
        avro = AvroSchema(json.loads(avro_text)) if avro_text else None
        parts.extend(_parquet_group(frame, avro) for frame in parquet_frames(spark, group))
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


def _parquet_group(df: DataFrame, avro: AvroSchema | None) -> DataFrame:
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
    return df.select(
        *E.columns(
            landed_file_column().alias("file"),
            E.col("_metadata.row_index").alias("file_pos"),
            E.null("bigint").alias("line"),
            E.to_json(E.struct(*columns), E.map(E.lit("ignoreNullFields"), E.lit("false"))).alias("text"),
            E.lit(block).alias("schema"),
            E.null("string").alias("bad"),
        )
    )

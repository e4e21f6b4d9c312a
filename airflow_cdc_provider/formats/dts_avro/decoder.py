"""Alibaba DTS Avro (``--format dts-avro``): DTS ``Record`` messages to canonical change events.

DTS writes each change as one schemaless Avro ``Record`` (schema in ``dts_avro_schema``). Such
messages land three ways, told apart per file by its first bytes:

- JSON lines from a Kafka sink, one message per line with the Base64 bytes in ``value``;
- one raw message per file (no header);
- Avro object container files of Records (magic ``Obj\\x01``).

There is no spark-avro jar, so the bytes are decoded by fastavro in Python workers through
``mapInArrow``: one Arrow batch in, one out, nothing on the driver. The worker returns plain
columns (images as JSON objects of value texts, plus each column's Spark type); the JVM side then
turns the texts into typed variants with the shared ``values.text_image``, so no Python runs per
row on the JVM side. What can be checked without decoding (bad JSON lines, missing ``value``,
bad Base64) is decided by Spark before any byte reaches Python.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import MapType, StringType, StructField, StructType, VariantType

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.common.jsonlines import parse_json_records
from airflow_cdc_provider.formats.common.values import failed_conversions, text_image
from airflow_cdc_provider.formats.dts_avro.records import (
    CONTAINER_MAGIC,
    DECODED_DDL,
    LAYOUT_CONTAINER,
    LAYOUT_JSON_LINES,
    LAYOUT_MESSAGE,
    decode_batches,
)
from airflow_cdc_provider.formats.events import (
    IGNORED_TOMBSTONE,
    KIND_CHANGE,
    KIND_IGNORED,
    KIND_QUARANTINED,
    Q_BAD_BASE64,
    Q_MISSING_IMAGE,
    Q_TYPE_MISMATCH,
    canonical,
    classify,
)
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.filesystem import job_filesystem
from airflow_cdc_provider.spark.reader import LandedFile, landed_file_column, union_all

_HEAD_BYTES = 64
_TEXT_SUFFIXES = (".json", ".jsonl", ".ndjson", ".txt")
_SNIFF_THREADS = 16

_STRING_MAP = MapType(StringType(), StringType())
_JSON_LINE_SCHEMA = StructType([StructField("value", VariantType())])


class DtsAvroDecoder(Decoder):
    name = "dts-avro"
    worker_modules = ("fastavro", "pyarrow")
    description = (
        "Alibaba DTS Avro Records (Kafka JSON dump with Base64 value, raw messages, or Avro container files)"
    )
    needs = ""
    partial_images = True
    transaction_ids = True

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        """Canonical events for DTS Avro landings; the key comes from each record's pk_uk_info."""
        layouts = detect_layouts(spark, files)
        json_files = [f for f in files if layouts[f.path] == LAYOUT_JSON_LINES]
        binary_paths = [f.path for f in files if layouts[f.path] != LAYOUT_JSON_LINES]
        payloads: list[DataFrame] = []
        if json_files:
            payloads.append(_json_line_messages(spark, json_files))
        if binary_paths:
            payloads.append(_binary_file_messages(spark, binary_paths))
        return _canonical_decoded(union_all(payloads).mapInArrow(decode_batches, DECODED_DDL))


# ---------------------------------------------------------------- driver: which layout per file


def head_layout(head: bytes) -> str:
    """Layout of a file from its first bytes: container magic, JSON text, or one raw message.

    A raw DTS message starts with its version as a zigzag int (1 is byte 0x02), so it never looks
    like JSON text; an empty or blank head is text with nothing in it.
    """
    if head.startswith(CONTAINER_MAGIC):
        return LAYOUT_CONTAINER
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if not text or text.startswith((b"{", b"null")):
        return LAYOUT_JSON_LINES
    return LAYOUT_MESSAGE


def detect_layouts(spark: SparkSession, files: list[LandedFile]) -> dict[str, str]:
    """Layout per file path, from its name where that settles it, else from its first 64 bytes.

    ``.json``/``.jsonl``/``.ndjson``/``.txt`` and compressed files are JSON lines (Avro containers
    compress their blocks inside the file); other files are sniffed through the session's file-system
    seam (any scheme Spark reads), a few at a time. Sniffing reads a few bytes per file on
    the driver: landings are file listings, not data, at that point.
    """
    fs = job_filesystem(spark)

    def layout(f: LandedFile) -> str:
        if f.compressed or f.size == 0 or f.path.lower().endswith(_TEXT_SUFFIXES):
            return LAYOUT_JSON_LINES
        return head_layout(fs.read_bytes(f.path, 0, min(f.size, _HEAD_BYTES)))

    with ThreadPoolExecutor(max_workers=min(_SNIFF_THREADS, max(1, len(files)))) as pool:
        return dict(zip((f.path for f in files), pool.map(layout, files)))


# ---------------------------------------------------------------- JVM: message bytes per record


def _json_line_messages(spark: SparkSession, files: list[LandedFile]) -> DataFrame:
    """JSON-lines records with their Base64 ``value`` decoded, or the reason they have none.

    ``kind`` is null for a line whose bytes go to the Avro decoder; otherwise it says why the
    line is ignored (tombstone) or quarantined (not JSON, no ``value``, bad Base64), and the
    worker passes the line through undecoded.
    """
    records = parse_json_records(spark, files, _JSON_LINE_SCHEMA)
    value = E.col("j.value")
    text = E.try_variant_get(value, "$", "string")
    payload = E.when(E.schema_of_variant(value) == "STRING", E.try_to_binary(text, "base64"))
    kind, reason = classify(
        (E.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
        (value.isNull(), KIND_QUARANTINED, Q_MISSING_IMAGE),
        (E.is_variant_null(value), KIND_IGNORED, IGNORED_TOMBSTONE),
        (payload.isNull(), KIND_QUARANTINED, Q_BAD_BASE64),
        default_kind=E.null("string"),
    )
    unparsed = E.col("bad").isNotNull()  # parse_json_records' reason: not JSON, truncated, ...
    return records.select(
        "file",
        "file_pos",
        "line",
        *E.columns(
            E.lit(LAYOUT_MESSAGE).alias("layout"),
            payload.alias("payload"),
            # A decoded message is identified by its bytes, not by the Kafka envelope around them.
            E.when(~unparsed & kind.isNull(), E.trim(text)).otherwise(E.col("text")).alias("raw"),
            E.when(unparsed, E.lit(KIND_QUARANTINED)).otherwise(kind).alias("kind"),
            E.when(unparsed, E.col("bad")).otherwise(reason).alias("reason"),
        ),
    )


def _binary_file_messages(spark: SparkSession, paths: list[str]) -> DataFrame:
    """One row per binary file: its whole content, as a container or as one raw message."""
    content = E.col("content")
    magic = E.unhex(E.lit(CONTAINER_MAGIC.hex()))
    layout = E.when(E.substring(content, 1, 4) == magic, E.lit(LAYOUT_CONTAINER))
    return (
        spark.read.format("binaryFile")
        .load(paths)
        .select(
            *E.columns(
                landed_file_column().alias("file"),
                E.lit(0).cast("bigint").alias("file_pos"),
                E.null("bigint").alias("line"),
                layout.otherwise(E.lit(LAYOUT_MESSAGE)).alias("layout"),
                content.alias("payload"),
                E.null("string").alias("raw"),
                E.null("string").alias("kind"),
                E.null("string").alias("reason"),
            )
        )
    )


def _canonical_decoded(decoded: DataFrame) -> DataFrame:
    """Typed images from the worker's value texts; a text that does not convert quarantines."""
    staged = decoded.select(
        "*",
        *E.columns(
            E.from_json("types_json", _STRING_MAP).alias("types"),
            E.from_json("before_json", _STRING_MAP).alias("before_text"),
            E.from_json("after_json", _STRING_MAP).alias("after_text"),
        ),
    ).select(
        "*",
        *E.columns(
            text_image(E.col("before_text"), E.col("types")).alias("before"),
            text_image(E.col("after_text"), E.col("types")).alias("after"),
        ),
    )
    did_not_convert = E.coalesce(
        failed_conversions(E.col("before_text"), E.col("before")), E.lit(False)
    ) | E.coalesce(failed_conversions(E.col("after_text"), E.col("after")), E.lit(False))
    kind, reason = classify(
        ((E.col("kind") == KIND_CHANGE) & did_not_convert, KIND_QUARANTINED, Q_TYPE_MISMATCH),
        default_kind=E.col("kind"),
    )
    change = kind == KIND_CHANGE
    return staged.select(
        *canonical(
            table=E.col("table"),
            kind=kind,
            op=E.when(change, E.col("op")),
            reason=E.coalesce(reason, E.col("reason")),
            event_ms=E.col("event_ms"),
            log_pos=E.col("log_pos"),
            sub_pos=E.lit(0),
            tx_id=E.col("tx_id"),
            before=E.when(change, E.col("before")),
            after=E.when(change, E.col("after")),
            partial=E.when(change, E.col("partial")),
            key_cols=E.col("key_cols"),
            types=E.when(change, E.col("types")),
            raw=E.col("raw"),
        )
    )

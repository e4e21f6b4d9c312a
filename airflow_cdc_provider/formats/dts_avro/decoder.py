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
from pyspark.sql import functions as F
from pyspark.sql.types import MapType, StringType, StructField, StructType, VariantType

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
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
from airflow_cdc_provider.formats.jsonlines import parse_json_records
from airflow_cdc_provider.formats.landed_files import LandedFile
from airflow_cdc_provider.formats.values import failed_conversions, text_image

_HEAD_BYTES = 64
_TEXT_SUFFIXES = (".json", ".jsonl", ".ndjson", ".txt")
_SNIFF_THREADS = 16

_STRING_MAP = MapType(StringType(), StringType())
_JSON_LINE_SCHEMA = StructType([StructField("value", VariantType())])


class DtsAvroDecoder(Decoder):
    name = "dts-avro"
    description = (
        "Alibaba DTS Avro Records (Kafka JSON dump with Base64 value, raw messages, or Avro container files)"
    )
    needs = ""
    partial_images = True

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
        return _canonical_decoded(_union(payloads).mapInArrow(decode_batches, DECODED_DDL))


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
    compress their blocks inside the file); other files are sniffed through the session's Hadoop
    FileSystem (any scheme Spark reads), a few at a time. Sniffing reads a few bytes per file on
    the driver: landings are file listings, not data, at that point.
    """
    jvm = spark.sparkContext._jvm
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()

    def layout(f: LandedFile) -> str:
        if f.compressed or f.size == 0 or f.path.lower().endswith(_TEXT_SUFFIXES):
            return LAYOUT_JSON_LINES
        path = jvm.org.apache.hadoop.fs.Path(f.path)
        stream = path.getFileSystem(hadoop_conf).open(path)
        try:
            head = bytes(stream.readNBytes(min(f.size, _HEAD_BYTES)))
        finally:
            stream.close()
        return head_layout(head)

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
    value = F.col("j.value")
    text = F.try_variant_get(value, "$", "string")
    payload = F.when(F.schema_of_variant(value) == "STRING", F.try_to_binary(text, F.lit("base64")))
    kind, reason = classify(
        (F.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
        (value.isNull(), KIND_QUARANTINED, Q_MISSING_IMAGE),
        (F.is_variant_null(value), KIND_IGNORED, IGNORED_TOMBSTONE),
        (payload.isNull(), KIND_QUARANTINED, Q_BAD_BASE64),
        default_kind=F.lit(None).cast("string"),
    )
    unparsed = F.col("bad").isNotNull()  # parse_json_records' reason: not JSON, truncated, ...
    return records.select(
        "file",
        "file_pos",
        "line",
        F.lit(LAYOUT_MESSAGE).alias("layout"),
        payload.alias("payload"),
        # A decoded message is identified by its bytes, not by the Kafka envelope around them.
        F.when(~unparsed & kind.isNull(), F.trim(text)).otherwise(F.col("text")).alias("raw"),
        F.when(unparsed, F.lit(KIND_QUARANTINED)).otherwise(kind).alias("kind"),
        F.when(unparsed, F.col("bad")).otherwise(reason).alias("reason"),
    )


def _binary_file_messages(spark: SparkSession, paths: list[str]) -> DataFrame:
    """One row per binary file: its whole content, as a container or as one raw message."""
    content = F.col("content")
    layout = F.when(F.substring(content, 1, 4) == F.lit(bytearray(CONTAINER_MAGIC)), F.lit(LAYOUT_CONTAINER))
    return (
        spark.read.format("binaryFile")
        .load(paths)
        .select(
            F.col("_metadata.file_path").alias("file"),
            F.lit(0).cast("long").alias("file_pos"),
            F.lit(None).cast("long").alias("line"),
            layout.otherwise(F.lit(LAYOUT_MESSAGE)).alias("layout"),
            content.alias("payload"),
            F.lit(None).cast("string").alias("raw"),
            F.lit(None).cast("string").alias("kind"),
            F.lit(None).cast("string").alias("reason"),
        )
    )


def _canonical_decoded(decoded: DataFrame) -> DataFrame:
    """Typed images from the worker's value texts; a text that does not convert quarantines."""
    types = F.from_json(F.col("types_json"), _STRING_MAP)
    before_text = F.from_json(F.col("before_json"), _STRING_MAP)
    after_text = F.from_json(F.col("after_json"), _STRING_MAP)
    staged = decoded.select(
        "*",
        types.alias("types"),
        before_text.alias("before_text"),
        after_text.alias("after_text"),
    ).select(
        "*",
        text_image(F.col("before_text"), F.col("types")).alias("before"),
        text_image(F.col("after_text"), F.col("types")).alias("after"),
    )
    did_not_convert = F.coalesce(
        failed_conversions(F.col("before_text"), F.col("before")), F.lit(False)
    ) | F.coalesce(failed_conversions(F.col("after_text"), F.col("after")), F.lit(False))
    kind, reason = classify(
        ((F.col("kind") == KIND_CHANGE) & did_not_convert, KIND_QUARANTINED, Q_TYPE_MISMATCH),
        default_kind=F.col("kind"),
    )
    change = kind == KIND_CHANGE
    return staged.select(
        *canonical(
            table=F.col("table"),
            kind=kind,
            op=F.when(change, F.col("op")),
            reason=F.coalesce(reason, F.col("reason")),
            event_ms=F.col("event_ms"),
            log_pos=F.col("log_pos"),
            sub_pos=F.lit(0),
            tx_id=F.col("tx_id"),
            before=F.when(change, F.col("before")),
            after=F.when(change, F.col("after")),
            partial=F.when(change, F.col("partial")),
            key_cols=F.col("key_cols"),
            types=F.when(change, F.col("types")),
            file=F.col("file"),
            file_pos=F.col("file_pos"),
            line=F.col("line"),
            raw=F.col("raw"),
        )
    )


def _union(parts: list[DataFrame]) -> DataFrame:
    result = parts[0]
    for part in parts[1:]:
        result = result.unionByName(part)
    return result

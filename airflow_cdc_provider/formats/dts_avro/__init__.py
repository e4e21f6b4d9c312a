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

import base64
import codecs
import datetime as dt
import io
import json
import math
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from functools import lru_cache
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import MapType, StringType, StructField, StructType, VariantType

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.dts_avro.schema import record_schema
from airflow_cdc_provider.formats.jsonlines import parse_json_records
from airflow_cdc_provider.formats.values import failed_conversions, text_image
from airflow_cdc_provider.formats.landed_files import LandedFile
from airflow_cdc_provider.formats.events import (
    IGNORED_DDL,
    IGNORED_HEARTBEAT,
    IGNORED_TOMBSTONE,
    IGNORED_TRANSACTION,
    KIND_CHANGE,
    KIND_IGNORED,
    KIND_QUARANTINED,
    OP_DELETE,
    OP_INSERT,
    OP_UPDATE,
    Q_BAD_AVRO,
    Q_BAD_BASE64,
    Q_IMAGE_NOT_OBJECT,
    Q_KEY_UNKNOWN,
    Q_MISSING_IMAGE,
    Q_MISSING_TABLE,
    Q_TYPE_MISMATCH,
    Q_UNKNOWN_OP,
    canonical,
    classify,
)

CONTAINER_MAGIC = b"Obj\x01"
LAYOUT_JSON_LINES = "json-lines"
LAYOUT_CONTAINER = "container"
LAYOUT_MESSAGE = "message"
_HEAD_BYTES = 64
_TEXT_SUFFIXES = (".json", ".jsonl", ".ndjson", ".txt")
_SNIFF_THREADS = 16

ROW_OPERATIONS = {"INSERT": OP_INSERT, "UPDATE": OP_UPDATE, "DELETE": OP_DELETE}
# Every other Operation symbol is a stream record, not a row change: counted, never applied.
IGNORED_OPERATIONS = {
    "DDL": IGNORED_DDL,
    "BEGIN": IGNORED_TRANSACTION,
    "COMMIT": IGNORED_TRANSACTION,
    "ROLLBACK": IGNORED_TRANSACTION,
    "ABORT": IGNORED_TRANSACTION,
    "HEARTBEAT": IGNORED_HEARTBEAT,
    # Stream-control records (checkpoints, fill/finish markers, no-ops, init): liveness, not data.
    "CHECKPOINT": IGNORED_HEARTBEAT,
    "COMMAND": IGNORED_HEARTBEAT,
    "FILL": IGNORED_HEARTBEAT,
    "FINISH": IGNORED_HEARTBEAT,
    "CONTROL": IGNORED_HEARTBEAT,
    "RDB": IGNORED_HEARTBEAT,
    "NOOP": IGNORED_HEARTBEAT,
    "INIT": IGNORED_HEARTBEAT,
}

_STRING_MAP = MapType(StringType(), StringType())
_JSON_LINE_SCHEMA = StructType([StructField("value", VariantType())])

# What the Python worker returns per Record (or per message it could not decode).
DECODED_DDL = (
    "file string, file_pos bigint, line bigint, raw string, kind string, op string, reason string, "
    "table string, key_cols array<string>, event_ms bigint, log_pos array<bigint>, tx_id string, "
    "before_json string, after_json string, types_json string, partial boolean"
)
_ARROW_SCHEMA = pa.schema(
    [
        ("file", pa.string()),
        ("file_pos", pa.int64()),
        ("line", pa.int64()),
        ("raw", pa.string()),
        ("kind", pa.string()),
        ("op", pa.string()),
        ("reason", pa.string()),
        ("table", pa.string()),
        ("key_cols", pa.list_(pa.string())),
        ("event_ms", pa.int64()),
        ("log_pos", pa.list_(pa.int64())),
        ("tx_id", pa.string()),
        ("before_json", pa.string()),
        ("after_json", pa.string()),
        ("types_json", pa.string()),
        ("partial", pa.bool_()),
    ]
)
_OUTPUT_ROWS_PER_BATCH = 4096


class DtsAvroDecoder(Decoder):
    name = "dts-avro"
    description = "Alibaba DTS Avro Records (Kafka JSON dump with Base64 value, raw messages, or Avro container files)"
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
    return spark.read.format("binaryFile").load(paths).select(
        F.col("_metadata.file_path").alias("file"),
        F.lit(0).cast("long").alias("file_pos"),
        F.lit(None).cast("long").alias("line"),
        layout.otherwise(F.lit(LAYOUT_MESSAGE)).alias("layout"),
        content.alias("payload"),
        F.lit(None).cast("string").alias("raw"),
        F.lit(None).cast("string").alias("kind"),
        F.lit(None).cast("string").alias("reason"),
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
    did_not_convert = F.coalesce(failed_conversions(F.col("before_text"), F.col("before")), F.lit(False)) | F.coalesce(
        failed_conversions(F.col("after_text"), F.col("after")), F.lit(False)
    )
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


# ---------------------------------------------------------------- Python worker: Avro to columns


class _Quarantine(Exception):
    """A message or record that cannot become a row change; ``reason`` is an events.Q_* text."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@lru_cache(maxsize=1)
def _message_schema() -> Any:
    import fastavro

    return fastavro.parse_schema(record_schema(born_timestamp=False))


def decode_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: payload rows in, one row per Record (or per undecodable record) out."""
    out = _Columns()
    for batch in batches:
        columns = batch.to_pydict()
        for i in range(batch.num_rows):
            source = (columns["file"][i], columns["file_pos"][i], columns["line"][i])
            payload, raw = columns["payload"][i], columns["raw"][i]
            if columns["kind"][i] is not None:  # decided by Spark: passed through undecoded
                out.add(*source, raw, {"kind": columns["kind"][i], "reason": columns["reason"][i]})
            elif columns["layout"][i] == LAYOUT_CONTAINER:
                for pos, record_raw, row in _container_rows(payload):
                    out.add(source[0], pos, None, record_raw, row)
            else:
                out.add(*source, raw if raw is not None else _b64(payload), _message_row(payload))
            if len(out) >= _OUTPUT_ROWS_PER_BATCH:
                yield out.flush()
    if len(out):
        yield out.flush()


class _Columns:
    """Output rows gathered column by column, flushed as one Arrow batch."""

    def __init__(self) -> None:
        self._data: dict[str, list[Any]] = {name: [] for name in _ARROW_SCHEMA.names}

    def __len__(self) -> int:
        return len(self._data["file"])

    def add(self, file: str, file_pos: int, line: int | None, raw: str | None, row: dict[str, Any]) -> None:
        provenance = {"file": file, "file_pos": file_pos, "line": line, "raw": raw}
        for name, values in self._data.items():
            values.append(provenance[name] if name in provenance else row.get(name))

    def flush(self) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_pydict(self._data, schema=_ARROW_SCHEMA)
        self._data = {name: [] for name in _ARROW_SCHEMA.names}
        return batch


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _quarantined(reason: str) -> dict[str, Any]:
    return {"kind": KIND_QUARANTINED, "reason": reason}


def _message_row(payload: bytes) -> dict[str, Any]:
    try:
        record = read_message(payload)
    except _Quarantine as bad:
        return _quarantined(bad.reason)
    return record_row(record)


def read_message(payload: bytes) -> dict[str, Any]:
    """Decode one schemaless DTS message; raise ``_Quarantine(Q_BAD_AVRO)`` when it is not one.

    The common prefix of old and new Records is read first; what follows must be nothing (older
    DTS) or exactly one long (``bornTimestamp``), so a message cut short or padded with garbage
    is caught rather than half-read.
    """
    import fastavro

    stream = io.BytesIO(payload)
    try:
        record = fastavro.schemaless_reader(stream, _message_schema(), None, return_named_type=True)
    except Exception:  # fastavro raises EOFError, ValueError, IndexError, UnicodeDecodeError...
        raise _Quarantine(Q_BAD_AVRO) from None
    rest = payload[stream.tell():]
    if rest:
        born, used = _read_varint(rest)
        if born is None or used != len(rest):
            raise _Quarantine(Q_BAD_AVRO)
        record["bornTimestamp"] = born
    return record


def _read_varint(data: bytes) -> tuple[int | None, int]:
    """One Avro long (zigzag varint) from the start of ``data``: (value, bytes used)."""
    result, shift = 0, 0
    for used, byte in enumerate(data, start=1):
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), used
        shift += 7
        if shift > 63:
            break
    return None, 0


def _container_rows(payload: bytes) -> Iterator[tuple[int, str | None, dict[str, Any]]]:
    """(record index, raw, row) per Record of an Avro container file.

    Records are decoded with the file's own writer schema; each one's raw is its schemaless
    encoding, the same bytes a Kafka message of it would hold. A file that breaks off yields one
    quarantined row at the index where decoding stopped.
    """
    import fastavro

    index = 0
    try:
        reader = fastavro.reader(io.BytesIO(payload), return_named_type=True)
        schema = fastavro.parse_schema(reader.writer_schema)
        for record in reader:
            yield index, _record_raw(schema, record), record_row(record)
            index += 1
    except Exception:
        yield index, None, _quarantined(Q_BAD_AVRO)


def _record_raw(schema: Any, record: dict[str, Any]) -> str | None:
    import fastavro

    buffer = io.BytesIO()
    try:
        fastavro.schemaless_writer(buffer, schema, record)
    except Exception:
        return None
    return _b64(buffer.getvalue())


def record_row(record: dict[str, Any]) -> dict[str, Any]:
    """Output columns for one decoded Record (kind, op, images as JSON texts, types, position)."""
    try:
        row = {
            "table": record.get("objectName"),
            "event_ms": record["sourceTimestamp"] * 1000,
            "log_pos": log_position(record["id"], record.get("sourcePosition") or ""),
            "tx_id": record.get("sourceTxid") or None,
            "key_cols": key_columns((record.get("tags") or {}).get("pk_uk_info")),
        }
    except (KeyError, TypeError):
        return _quarantined(Q_BAD_AVRO)  # a container of some other record type
    operation = record.get("operation")
    if operation in IGNORED_OPERATIONS:
        return {**row, "kind": KIND_IGNORED, "reason": IGNORED_OPERATIONS[operation]}
    try:
        return {**row, **_change_columns(record, ROW_OPERATIONS.get(operation))}
    except _Quarantine as bad:
        return {**row, **_quarantined(bad.reason)}


def _change_columns(record: dict[str, Any], op: str | None) -> dict[str, Any]:
    if op is None:
        raise _Quarantine(Q_UNKNOWN_OP)
    if not record.get("objectName"):
        raise _Quarantine(Q_MISSING_TABLE)
    names, type_numbers = _field_list(record.get("fields"))
    source = record.get("source") or {}
    context = _ValueContext(source.get("sourceType"))
    before = _image(record.get("beforeImages"), names, type_numbers, context)
    after = _image(record.get("afterImages"), names, type_numbers, context)
    if op == OP_DELETE and before is None:
        raise _Quarantine(Q_KEY_UNKNOWN)
    if op != OP_DELETE and after is None:
        raise _Quarantine(Q_MISSING_IMAGE)
    types = {**(before.types if before else {}), **(after.types if after else {})}
    return {
        "kind": KIND_CHANGE,
        "op": op,
        "before_json": before.to_json() if before and op != OP_INSERT else None,
        "after_json": after.to_json() if after and op != OP_DELETE else None,
        "types_json": json.dumps(types),
        # A NONE value is "not in this image": such an update keeps the column's previous value.
        "partial": bool(op == OP_UPDATE and after and after.not_carried),
    }


def _field_list(fields: Any) -> tuple[list[str], list[int]]:
    if not isinstance(fields, list) or not all(isinstance(f, dict) and isinstance(f.get("name"), str) for f in fields):
        raise _Quarantine(Q_IMAGE_NOT_OBJECT)
    return [f["name"] for f in fields], [f.get("dataTypeNumber") for f in fields]


class _Image:
    """One row image: value texts and Spark types by column, and the columns it does not carry."""

    def __init__(self) -> None:
        self.values: dict[str, str | None] = {}
        self.types: dict[str, str] = {}
        self.not_carried: list[str] = []

    def to_json(self) -> str:
        return json.dumps(self.values, ensure_ascii=False)


def _image(values: Any, names: list[str], type_numbers: list[int], context: _ValueContext) -> _Image | None:
    """Pair a positional image with the record's ``fields``; None when the record has no image."""
    if values is None:
        return None
    if not isinstance(values, list) or len(values) != len(names):
        raise _Quarantine(Q_IMAGE_NOT_OBJECT)
    image = _Image()
    for name, type_number, value in zip(names, type_numbers, values):
        converted = context.convert(value, type_number)
        if converted is NOT_CARRIED:
            image.not_carried.append(name)
            continue
        spark_type, text = converted
        image.values[name] = text
        if spark_type is not None:
            image.types[name] = spark_type
    return image


# ---------------------------------------------------------------- value records to typed texts

NOT_CARRIED = object()

# MySQL binlog type numbers (Field.dataTypeNumber for MySQL-family sources).
_MYSQL_FLOAT = 4
_MYSQL_DATE = 10
_MYSQL_TIME = 11
_MYSQL_YEAR = 13
_MYSQL_FAMILY = ("MySQL", "DRDS")
# Sources whose DateTime/Timestamp "millis" field holds microseconds; others send nanoseconds.
_MICROSECOND_SOURCES = ("MySQL", "DRDS", "PostgreSQL")

# MySQL character set names that are not Python codec names.
_CHARSETS = {
    "": "utf-8",
    "utf8": "utf-8",
    "utf8mb3": "utf-8",
    "utf8mb4": "utf-8",
    "latin1": "cp1252",  # MySQL's latin1 is Windows-1252
    "ucs2": "utf-16-be",
    "utf16": "utf-16-be",
    "utf16le": "utf-16-le",
    "utf32": "utf-32-be",
    "ujis": "euc_jp",
    "eucjpms": "euc_jp",
    "sjis": "shift_jis",
    "euckr": "euc_kr",
    "koi8r": "koi8_r",
    "koi8u": "koi8_u",
    "greek": "iso8859_7",
    "hebrew": "iso8859_8",
    "latin2": "iso8859_2",
    "latin5": "iso8859_9",
    "latin7": "iso8859_13",
    "macroman": "mac_roman",
    "macce": "mac_latin2",
    "tis620": "tis_620",
}


class _ValueContext:
    """Converts DTS value records to (Spark type, text) for ``values.text_to_variant``."""

    def __init__(self, source_type: str | None) -> None:
        self.mysql = source_type in _MYSQL_FAMILY
        self.fraction_per_micro = 1 if source_type in _MICROSECOND_SOURCES else 1000

    def convert(self, value: Any, type_number: int | None) -> Any:
        """(spark type or None, text or None), or NOT_CARRIED; raises on a value that is not valid."""
        if value is None:
            return None, None
        if not isinstance(value, tuple):
            raise _Quarantine(Q_IMAGE_NOT_OBJECT)
        kind = value[0].rsplit(".", 1)[-1]
        body = value[1]
        try:
            return self._convert(kind, body, type_number)
        except _Quarantine:
            raise
        except (ValueError, TypeError, KeyError, ArithmeticError, LookupError, UnicodeError):
            raise _Quarantine(Q_TYPE_MISMATCH) from None

    def _convert(self, kind: str, body: Any, type_number: int | None) -> Any:
        if kind == "EmptyObject":
            return NOT_CARRIED if body == "NONE" else (None, None)
        if kind == "Integer":
            return integer_type(body["precision"]), str(int(body["value"].strip()))
        if kind == "Decimal":
            return decimal_type(body["precision"], body["scale"]), _decimal_text(body["value"])
        if kind == "Float":
            single = self.mysql and type_number == _MYSQL_FLOAT
            return ("float" if single else "double"), _float_text(body["value"])
        if kind == "Timestamp":
            return "timestamp", _instant_text(body["timestamp"], body["millis"] or 0)
        if kind == "DateTime":
            return self._date_time(body, type_number)
        if kind == "TimestampWithTimeZone":
            return "timestamp", self._zoned_text(body["value"], body["timezone"])
        if kind == "Character":
            return _character(body["charset"], body["value"])
        if kind in ("BinaryObject", "BinaryGeometry"):
            return "binary", _b64(body["value"])
        if kind in ("TextObject", "TextGeometry"):
            return "string", body["value"]
        raise _Quarantine(Q_IMAGE_NOT_OBJECT)

    def _micros(self, fraction: int | None) -> int:
        return (fraction or 0) // self.fraction_per_micro

    def _date_time(self, body: dict[str, Any], type_number: int | None) -> tuple[str, str | None]:
        year, month, day = body.get("year"), body.get("month"), body.get("day")
        hour, minute, second = body.get("hour"), body.get("minute"), body.get("second")
        has_date = None not in (year, month, day)
        has_time = hour is not None or minute is not None or second is not None
        if (self.mysql and type_number == _MYSQL_YEAR) or (year is not None and month is None and not has_time):
            return "int", str(year)
        if (self.mysql and type_number == _MYSQL_TIME) or (not has_date and has_time):
            return "string", _time_text(hour or 0, minute or 0, second or 0, self._micros(body.get("millis")))
        if not has_date:
            raise ValueError("DateTime without a date")
        if (self.mysql and type_number == _MYSQL_DATE) or not has_time:
            return "date", None if 0 in (year, month, day) else dt.date(year, month, day).isoformat()
        if 0 in (year, month, day):  # MySQL's zero date
            return "timestamp", None
        local = dt.datetime(year, month, day, hour or 0, minute or 0, second or 0, self._micros(body.get("millis")))
        return "timestamp", local.replace(tzinfo=dt.timezone.utc).isoformat()

    def _zoned_text(self, body: dict[str, Any], zone: str) -> str:
        local = dt.datetime(
            body["year"], body["month"], body["day"], body.get("hour") or 0, body.get("minute") or 0,
            body.get("second") or 0, self._micros(body.get("millis")),
        )
        return local.replace(tzinfo=parse_zone(zone)).astimezone(dt.timezone.utc).isoformat()


def integer_type(precision: int) -> str:
    """Spark type of an Integer value by its declared digits (BIGINT's own precision is 19)."""
    if 0 < precision <= 9:
        return "int"
    if precision <= 19:
        return "bigint"
    return f"decimal({min(precision, 38)},0)"


def decimal_type(precision: int, scale: int) -> str:
    """``decimal(p,s)`` within Spark's limits; an undeclared precision becomes 38."""
    p = precision if 0 < precision <= 38 else 38
    s = min(max(scale, 0), p)
    return f"decimal({p},{s})"


def _decimal_text(text: str) -> str:
    number = Decimal(text.strip())
    if not number.is_finite():
        raise ValueError(f"not a finite decimal: {text!r}")
    return format(number, "f")


def _float_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def _instant_text(seconds: int, micros: int) -> str:
    instant = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=seconds, microseconds=micros)
    return instant.isoformat()


def _time_text(hour: int, minute: int, second: int, micros: int) -> str:
    negative = min(hour, minute, second, micros) < 0
    hour, minute, second, micros = abs(hour), abs(minute), abs(second), abs(micros)
    text = f"{'-' if negative else ''}{hour:02d}:{minute:02d}:{second:02d}"
    return f"{text}.{micros:06d}" if micros else text


def _character(charset: str, data: bytes) -> tuple[str, str]:
    name = (charset or "").strip().lower()
    if name == "binary":
        return "binary", _b64(data)
    codec = _CHARSETS.get(name, name)
    codecs.lookup(codec)  # LookupError for a charset Python does not know
    try:
        return "string", data.decode(codec)
    except UnicodeDecodeError:
        if codec == "cp1252":  # the five bytes Windows-1252 leaves undefined are latin-1 in MySQL
            return "string", data.decode("latin-1")
        raise


_OFFSET = re.compile(r"([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?")


def parse_zone(zone: str) -> dt.tzinfo:
    """A DTS time zone: an offset (``+08:00``, ``+0800``, ``GMT+8``, ``-05``), UTC/GMT/Z, or a name."""
    text = zone.strip()
    upper = text.upper()
    if upper in ("", "Z", "UTC", "GMT"):
        return dt.timezone.utc
    bare = upper[3:] if upper.startswith(("GMT", "UTC")) else upper
    match = _OFFSET.fullmatch(bare)
    if match:
        sign = -1 if match.group(1) == "-" else 1
        delta = dt.timedelta(hours=int(match.group(2)), minutes=int(match.group(3) or 0), seconds=int(match.group(4) or 0))
        return dt.timezone(sign * delta)
    from zoneinfo import ZoneInfo

    return ZoneInfo(text)  # raises (a LookupError subclass) for an unknown name


# ---------------------------------------------------------------- position and key

_BINLOG_POSITION = re.compile(r"(\d+)@.*?(\d+)")
_LSN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")
_MAX_LONG = (1 << 63) - 1


def log_position(record_id: int, source_position: str) -> list[int]:
    """``[id]`` then what ``sourcePosition`` orders by, where it is numeric.

    ``offset@file`` (MySQL binlog: ``1234@mysql-bin.000003`` or ``1234@3``) gives the file number
    then the offset; digits alone (an SCN) give that number; ``X/Y`` (a PostgreSQL LSN) gives the
    LSN as one number. Anything else adds nothing: ``id`` alone orders the stream.
    """
    position = source_position.strip()
    extra: list[int] = []
    if match := _BINLOG_POSITION.fullmatch(position):
        extra = [int(match.group(2)), int(match.group(1))]
    elif position.isdigit():
        extra = [int(position)]
    elif match := _LSN.fullmatch(position):
        extra = [(int(match.group(1), 16) << 32) | int(match.group(2), 16)]
    if any(value > _MAX_LONG for value in extra):
        extra = []
    return [record_id, *extra]


def key_columns(pk_uk_info: str | None) -> list[str] | None:
    """Key columns from ``tags.pk_uk_info`` (``{"PRIMARY":["id"], "uk_x":[...]}``): the primary
    key, else the first unique key; None when the record names none."""
    if not pk_uk_info:
        return None
    try:
        keys = json.loads(pk_uk_info)
    except ValueError:
        return None
    if not isinstance(keys, dict):
        return None
    candidates = [keys.get("PRIMARY"), *(v for k, v in keys.items() if k != "PRIMARY")]
    for columns in candidates:
        if isinstance(columns, list) and columns and all(isinstance(c, str) for c in columns):
            return columns
    return None

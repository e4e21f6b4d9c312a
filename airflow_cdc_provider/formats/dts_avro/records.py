"""The Python worker's side of ``dts-avro``: message bytes to one row of plain columns per Record.

Runs inside Spark's Python workers (``mapInArrow``), so every function here is module level and
imports nothing from the JVM side.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import pyarrow as pa

from airflow_cdc_provider.contract.tables import qualify
from airflow_cdc_provider.formats.dts_avro.schema import record_schema
from airflow_cdc_provider.formats.dts_avro.values import (
    NOT_CARRIED,
    Quarantine,
    ValueContext,
    b64,
)
from airflow_cdc_provider.formats.events import (
    IGNORED_DDL,
    IGNORED_HEARTBEAT,
    IGNORED_TRANSACTION,
    KIND_CHANGE,
    KIND_IGNORED,
    KIND_QUARANTINED,
    OP_DELETE,
    OP_INSERT,
    OP_UPDATE,
    Q_BAD_AVRO,
    Q_IMAGE_NOT_OBJECT,
    Q_KEY_UNKNOWN,
    Q_MISSING_IMAGE,
    Q_MISSING_TABLE,
    Q_UNKNOWN_OP,
)
from airflow_cdc_provider.spark.arrow_rows import ArrowRows

CONTAINER_MAGIC = b"Obj\x01"
LAYOUT_JSON_LINES = "json-lines"
LAYOUT_CONTAINER = "container"
LAYOUT_MESSAGE = "message"


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

# ---------------------------------------------------------------- Python worker: Avro to columns


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
                out.add(*source, raw if raw is not None else b64(payload), _message_row(payload))
            if len(out) >= _OUTPUT_ROWS_PER_BATCH:
                yield out.flush()
    if len(out):
        yield out.flush()


class _Columns(ArrowRows):
    """DTS output rows: a decoded Record's columns with where it came from."""

    def __init__(self) -> None:
        super().__init__(_ARROW_SCHEMA)

    def add(self, file: str, file_pos: int, line: int | None, raw: str | None, row: dict[str, Any]) -> None:
        self.append({**row, "file": file, "file_pos": file_pos, "line": line, "raw": raw})


def _quarantined(reason: str) -> dict[str, Any]:
    return {"kind": KIND_QUARANTINED, "reason": reason}


def _message_row(payload: bytes) -> dict[str, Any]:
    try:
        record = read_message(payload)
    except Quarantine as bad:
        return _quarantined(bad.reason)
    return record_row(record)


def read_message(payload: bytes) -> dict[str, Any]:
    """Decode one schemaless DTS message; raise ``Quarantine(Q_BAD_AVRO)`` when it is not one.

    The common prefix of old and new Records is read first; what follows must be nothing (older
    DTS) or exactly one long (``bornTimestamp``), so a message cut short or padded with garbage
    is caught rather than half-read.
    """
    import fastavro

    stream = io.BytesIO(payload)
    try:
        record = fastavro.schemaless_reader(stream, _message_schema(), None, return_named_type=True)
    except Exception:  # fastavro raises EOFError, ValueError, IndexError, UnicodeDecodeError...
        raise Quarantine(Q_BAD_AVRO) from None
    rest = payload[stream.tell() :]
    if rest:
        born, used = _read_varint(rest)
        if born is None or used != len(rest):
            raise Quarantine(Q_BAD_AVRO)
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
    return b64(buffer.getvalue())


def record_row(record: dict[str, Any]) -> dict[str, Any]:
    """Output columns for one decoded Record (kind, op, images as JSON texts, types, position)."""
    try:
        row = {
            "table": qualify(object_name.split(".")) if (object_name := record.get("objectName")) else None,
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
    except Quarantine as bad:
        return {**row, **_quarantined(bad.reason)}


def _change_columns(record: dict[str, Any], op: str | None) -> dict[str, Any]:
    if op is None:
        raise Quarantine(Q_UNKNOWN_OP)
    if not record.get("objectName"):
        raise Quarantine(Q_MISSING_TABLE)
    names, type_numbers = _field_list(record.get("fields"))
    source = record.get("source") or {}
    context = ValueContext(source.get("sourceType"))
    before = _image(record.get("beforeImages"), names, type_numbers, context)
    after = _image(record.get("afterImages"), names, type_numbers, context)
    if op == OP_DELETE and before is None:
        raise Quarantine(Q_KEY_UNKNOWN)
    if op != OP_DELETE and after is None:
        raise Quarantine(Q_MISSING_IMAGE)
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
    if not isinstance(fields, list) or not all(
        isinstance(f, dict) and isinstance(f.get("name"), str) for f in fields
    ):
        raise Quarantine(Q_IMAGE_NOT_OBJECT)
    return [f["name"] for f in fields], [f.get("dataTypeNumber") for f in fields]


class _Image:
    """One row image: value texts and Spark types by column, and the columns it does not carry."""

    def __init__(self) -> None:
        self.values: dict[str, str | None] = {}
        self.types: dict[str, str] = {}
        self.not_carried: list[str] = []

    def to_json(self) -> str:
        return json.dumps(self.values, ensure_ascii=False)


def _image(values: Any, names: list[str], type_numbers: list[int], context: ValueContext) -> _Image | None:
    """Pair a positional image with the record's ``fields``; None when the record has no image."""
    if values is None:
        return None
    if not isinstance(values, list) or len(values) != len(names):
        raise Quarantine(Q_IMAGE_NOT_OBJECT)
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

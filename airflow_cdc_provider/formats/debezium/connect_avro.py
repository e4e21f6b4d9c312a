"""Debezium records in Avro, turned back into what Kafka Connect's JsonConverter writes.

Kafka Connect's Avro converter (Confluent's ``AvroData``) writes each Connect schema as an Avro
schema and keeps what Avro cannot say in ``connect.*`` properties: ``connect.name`` (the logical
name, e.g. ``io.debezium.time.MicroTimestamp``), ``connect.parameters`` (a Decimal's scale and
precision) and ``connect.type`` (``int8``, ``int16``). Standard Avro logical types (``decimal``,
``date``, ``time-millis``, ``timestamp-millis``, ...) stand for Connect's own logical types.

This module turns an Avro schema back into the Connect schema block and each record back into the
JSON payload the JsonConverter writes (bytes and decimals as Base64, dates as epoch days,
timestamps as epoch numbers), so the ``debezium-json`` decoder types, orders and positions them
(``formats/common/kafka_connect.py``, ``formats/debezium/envelope.py``): one mapping for every Debezium landing.

It runs in Spark's Python workers (``decode_batches``, through ``mapInArrow``: the records) and on
the driver (the schema blocks, one per file, from container headers and Parquet footers): plain
Python, no Spark session.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import math
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pyarrow as pa

from airflow_cdc_provider.formats.common.kafka_connect import DECIMAL_NAME
from airflow_cdc_provider.formats.events import Q_BAD_AVRO
from airflow_cdc_provider.spark.arrow_rows import ArrowRows

# Avro logical types -> the Connect logical name that means the same (AvroData's mapping; the
# micro-precision ones have no Connect type and read as Debezium's).
_LOGICAL_NAMES = {
    "date": "org.apache.kafka.connect.data.Date",
    "time-millis": "org.apache.kafka.connect.data.Time",
    "timestamp-millis": "org.apache.kafka.connect.data.Timestamp",
    "local-timestamp-millis": "org.apache.kafka.connect.data.Timestamp",
    "time-micros": "io.debezium.time.MicroTime",
    "timestamp-micros": "io.debezium.time.MicroTimestamp",
    "local-timestamp-micros": "io.debezium.time.MicroTimestamp",
}
_PRIMITIVES = {
    "int": "int32",
    "long": "int64",
    "float": "float32",
    "double": "float64",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
    "null": "string",
}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH_DAY = dt.date(1970, 1, 1)

# What the Python worker returns per Avro record (or per container it could not read on).
DECODED_DDL = "file string, file_pos bigint, line bigint, text string, bad string"
_ARROW_SCHEMA = pa.schema(
    [
        ("file", pa.string()),
        ("file_pos", pa.int64()),
        ("line", pa.int64()),
        ("text", pa.string()),
        ("bad", pa.string()),
    ]
)
_OUTPUT_ROWS_PER_BATCH = 4096
# A container file's header (magic, metadata with the writer schema, sync marker) is read from its
# first bytes; a schema larger than this is read from the whole file.
HEADER_BYTES = 64 * 1024


class AvroSchema:
    """A writer schema with its named types, so references (``"x.Value"``) resolve."""

    def __init__(self, schema: Any) -> None:
        self.root = schema
        self.named: dict[str, Any] = {}
        self._collect(schema)

    def _collect(self, node: Any) -> None:
        if isinstance(node, list):
            for branch in node:
                self._collect(branch)
        elif isinstance(node, dict):
            if node.get("type") in ("record", "enum", "fixed") and "name" in node:
                self.named[node["name"]] = node
                namespace = node.get("namespace")
                if namespace and "." not in node["name"]:
                    self.named[f"{namespace}.{node['name']}"] = node
            for child in node.get("fields", ()):
                self._collect(child["type"])
            for key in ("items", "values"):
                if key in node:
                    self._collect(node[key])
            if isinstance(node.get("type"), (dict, list)):
                self._collect(node["type"])

    def resolve(self, node: Any) -> Any:
        """The definition behind a name; a node whose ``type`` is itself a schema, that schema."""
        while True:
            if isinstance(node, str) and node in self.named:
                node = self.named[node]
            elif isinstance(node, dict) and isinstance(node.get("type"), (dict, list)) and "name" not in node:
                node = node["type"]
            elif isinstance(node, dict) and isinstance(node.get("type"), str) and node["type"] in self.named:
                node = self.named[node["type"]]
            else:
                return node

    def unwrap(self, node: Any) -> tuple[Any, bool]:
        """``(schema, optional)`` of a field type: ``["null", X]`` is an optional ``X``."""
        node = self.resolve(node)
        if isinstance(node, list):
            branches = [b for b in node if b != "null"]
            optional = len(branches) < len(node)
            if len(branches) == 1:
                return self.resolve(branches[0]), optional
            return {"type": "string"}, optional  # a union of several types: kept as JSON text
        return node, False

    def field(self, record: Any, name: str) -> Any:
        record = self.resolve(record)
        for f in record.get("fields", ()) if isinstance(record, dict) else ():
            if f["name"] == name:
                return f["type"]
        return None


def _type_name(node: Any) -> str:
    return node if isinstance(node, str) else node.get("type") if isinstance(node, dict) else "union"


def connect_field(schema: AvroSchema, node: Any, name: str) -> dict[str, Any]:
    """The Connect schema of one column, as a JsonConverter schema block lists it."""
    node, optional = schema.unwrap(node)
    avro_type = _type_name(node)
    props = node if isinstance(node, dict) else {}
    out: dict[str, Any] = {"field": name, "optional": optional}
    if avro_type == "record":
        out.update(type="struct", name=props.get("connect.name") or props.get("name"))
        return out
    if avro_type == "array":
        out["type"] = "array"
        return out
    if avro_type == "map":
        out["type"] = "map"
        return out
    if avro_type == "enum":
        out.update(type="string", name=props.get("connect.name"))
        return out
    out["type"] = props.get("connect.type") or (
        "bytes" if avro_type == "fixed" else _PRIMITIVES.get(avro_type)
    )
    out["type"] = out["type"] or "string"
    parameters = dict(props.get("connect.parameters") or {})
    logical = props.get("logicalType")
    connect_name = props.get("connect.name")
    if logical == "decimal" and avro_type in ("bytes", "fixed"):
        connect_name = DECIMAL_NAME
        parameters.setdefault("scale", str(props.get("scale", 0)))
        if "precision" in props:
            parameters.setdefault("connect.decimal.precision", str(props["precision"]))
    elif connect_name is None and logical in _LOGICAL_NAMES:
        connect_name = _LOGICAL_NAMES[logical]
    if connect_name:
        out["name"] = connect_name
    if parameters:
        out["parameters"] = {str(k): str(v) for k, v in parameters.items()}
    return out


def connect_schema(schema: AvroSchema) -> dict[str, Any]:
    """The schema block of an envelope record: its ``before`` and ``after`` columns, in order."""
    fields = []
    for side in ("before", "after"):
        node = schema.field(schema.root, side)
        if node is None:
            continue
        record, optional = schema.unwrap(node)
        if not isinstance(record, dict) or record.get("type") != "record":
            continue
        fields.append(
            {
                "field": side,
                "type": "struct",
                "optional": optional,
                "name": record.get("connect.name") or record.get("name"),
                "fields": [connect_field(schema, f["type"], f["name"]) for f in record["fields"]],
            }
        )
    root = schema.resolve(schema.root)
    name = root.get("connect.name") or root.get("name") if isinstance(root, dict) else None
    return {"type": "struct", "name": name, "optional": False, "fields": fields}


def container_block(head: bytes) -> str | None:
    """The schema block of an Avro container file (compact JSON, as JsonConverter writes it) from
    its first bytes, or None when they hold no readable header (not Avro, damaged, or a header
    longer than ``head``)."""
    import fastavro

    try:
        schema = AvroSchema(fastavro.reader(io.BytesIO(head)).writer_schema)
        return json.dumps(connect_schema(schema), separators=(",", ":"))
    except Exception:  # fastavro raises ValueError, EOFError, ... on a short or damaged header
        return None


# ---------------------------------------------------------------- values as JsonConverter writes them


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unscaled_bytes(value: Decimal, scale: int) -> bytes:
    """A decimal's unscaled value as big-endian two's complement, as Connect's Decimal writes it."""
    unscaled = int(value.scaleb(scale).to_integral_value())
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return unscaled.to_bytes(length, "big", signed=True)


def connect_value(schema: AvroSchema, node: Any, value: Any) -> Any:
    """A value fastavro decoded (logical types converted) -> the JSON value JsonConverter writes."""
    if value is None:
        return None
    node, _ = schema.unwrap(node)
    props = node if isinstance(node, dict) else {}
    avro_type = _type_name(node)
    logical = props.get("logicalType")
    if avro_type == "record" and isinstance(value, dict):
        return {f["name"]: connect_value(schema, f["type"], value.get(f["name"])) for f in node["fields"]}
    if avro_type == "array" and isinstance(value, list):
        return [connect_value(schema, node["items"], item) for item in value]
    if avro_type == "map" and isinstance(value, dict):
        return {str(k): connect_value(schema, node["values"], v) for k, v in value.items()}
    if isinstance(value, Decimal):
        return _b64(_unscaled_bytes(value, int(props.get("scale", 0))))
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        micros = (moment - _EPOCH) // dt.timedelta(microseconds=1)
        return micros if logical and logical.endswith("micros") else micros // 1000
    if isinstance(value, dt.date):
        return (value - _EPOCH_DAY).days
    if isinstance(value, dt.time):
        micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
        return micros if logical == "time-micros" else micros // 1000
    if isinstance(value, (bytes, bytearray)):
        return _b64(bytes(value))
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (dict, list)):  # a union of several branches: its JSON text
        return json.dumps(value, default=str)
    return value


# ---------------------------------------------------------------- Python worker: containers to rows


def container_records(file: str, content: bytes) -> Iterator[dict[str, Any]]:
    """One output row per record of an Avro container file; where it stops decoding, one ``bad Avro`` row.

    A codec fastavro has no library for (snappy and lz4 need ``cramjam``) stops the job with a
    clear error instead: every file of such a landing would otherwise be quarantined.
    """
    import fastavro

    index = 0
    try:
        reader = fastavro.reader(io.BytesIO(content))
        schema = AvroSchema(reader.writer_schema)
        for record in reader:
            payload = connect_value(schema, schema.root, record)
            yield {"file": file, "file_pos": index, "text": json.dumps(payload, separators=(",", ":"))}
            index += 1
    except ValueError as exc:
        if "you need to install" in str(exc):
            raise RuntimeError(f"cannot decode Avro file {file}: {exc}") from None
        yield {"file": file, "file_pos": index, "bad": Q_BAD_AVRO}
    except Exception:  # fastavro raises EOFError, IndexError, UnicodeDecodeError, ... on damage
        yield {"file": file, "file_pos": index, "bad": Q_BAD_AVRO}


def decode_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: one row per Avro file in (path, content), one row per record out."""
    out = ArrowRows(_ARROW_SCHEMA)
    for batch in batches:
        columns = batch.to_pydict()
        for file, content in zip(columns["file"], columns["content"]):
            for row in container_records(file, content):
                out.append(row)
                if len(out) >= _OUTPUT_ROWS_PER_BATCH:
                    yield out.flush()
    if len(out):
        yield out.flush()

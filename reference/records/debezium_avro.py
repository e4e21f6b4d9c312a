"""Debezium records as Kafka Connect's Avro converter writes them, and Avro container files of them.

The schema is the one Debezium's MySQL connector publishes through the converter (Confluent
``AvroData``): an ``Envelope`` record of ``before``/``after`` (the table's ``Value`` record,
optional), ``source``, ``op``, ``ts_ms`` and ``transaction``, with Connect logical types as
``connect.name``/``connect.parameters`` and Avro logical types."""

from __future__ import annotations

import io
from typing import Any

import fastavro

SERVER = "dbserver1"
T0 = 1_725_271_200_000  # 2024-09-02T10:00:00Z


def _optional(avro_type: Any) -> list[Any]:
    return ["null", avro_type]


def _column(name: str, avro_type: Any, optional: bool = True) -> dict[str, Any]:
    if optional:
        return {"name": name, "type": _optional(avro_type), "default": None}
    return {"name": name, "type": avro_type}


DECIMAL_10_2 = {
    "type": "bytes",
    "scale": 2,
    "precision": 10,
    "connect.version": 1,
    "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
    "connect.name": "org.apache.kafka.connect.data.Decimal",
    "logicalType": "decimal",
}


def debezium_time(name: str, base: str) -> dict[str, Any]:
    return {"type": base, "connect.version": 1, "connect.name": f"io.debezium.time.{name}"}


# A products table covering the Connect and Debezium logical types (time.precision.mode adaptive
# for DATE/DATETIME/TIMESTAMP columns, connect for the *_c ones).
PRODUCT_COLUMNS = [
    _column("id", "int", optional=False),
    _column("name", "string"),
    _column("qty", {"type": "int", "connect.type": "int16"}),
    _column("price", DECIMAL_10_2),
    _column("weight", "double"),
    _column("ratio", "float"),
    _column("active", "boolean"),
    _column("photo", "bytes"),
    _column("made", debezium_time("Date", "int")),
    _column("opens", debezium_time("MicroTime", "long")),
    _column("updated", debezium_time("MicroTimestamp", "long")),
    _column("created", debezium_time("Timestamp", "long")),
    _column("nano", debezium_time("NanoTimestamp", "long")),
    _column("zoned", debezium_time("ZonedTimestamp", "string")),
    _column(
        "made_c", {"type": "int", "connect.name": "org.apache.kafka.connect.data.Date", "logicalType": "date"}
    ),
    _column(
        "created_c",
        {
            "type": "long",
            "connect.name": "org.apache.kafka.connect.data.Timestamp",
            "logicalType": "timestamp-millis",
        },
    ),
    _column(
        "amount",
        {
            "type": "record",
            "name": "VariableScaleDecimal",
            "namespace": "io.debezium.data",
            "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
            "connect.name": "io.debezium.data.VariableScaleDecimal",
        },
    ),
]


def envelope_schema(table: str = "products", columns: list[dict] | None = None) -> dict[str, Any]:
    namespace = f"{SERVER}.inventory.{table}"
    value = {
        "type": "record",
        "name": "Value",
        "namespace": namespace,
        "fields": columns if columns is not None else PRODUCT_COLUMNS,
        "connect.name": f"{namespace}.Value",
    }
    source = {
        "type": "record",
        "name": "Source",
        "namespace": "io.debezium.connector.mysql",
        "fields": [
            {"name": "version", "type": "string"},
            {"name": "connector", "type": "string"},
            {"name": "name", "type": "string"},
            {"name": "ts_ms", "type": "long"},
            {
                "name": "snapshot",
                "type": [
                    {
                        "type": "string",
                        "connect.version": 1,
                        "connect.parameters": {"allowed": "true,last,false,incremental"},
                        "connect.default": "false",
                        "connect.name": "io.debezium.data.Enum",
                    },
                    "null",
                ],
                "default": "false",
            },
            {"name": "db", "type": "string"},
            {"name": "sequence", "type": ["null", "string"], "default": None},
            {"name": "table", "type": ["null", "string"], "default": None},
            {"name": "server_id", "type": "long"},
            {"name": "gtid", "type": ["null", "string"], "default": None},
            {"name": "file", "type": "string"},
            {"name": "pos", "type": "long"},
            {"name": "row", "type": "int"},
            {"name": "thread", "type": ["null", "long"], "default": None},
            {"name": "query", "type": ["null", "string"], "default": None},
        ],
        "connect.name": "io.debezium.connector.mysql.Source",
    }
    transaction = {
        "type": "record",
        "name": "block",
        "namespace": "event",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "total_order", "type": "long"},
            {"name": "data_collection_order", "type": "long"},
        ],
        "connect.version": 1,
        "connect.name": "event.block",
    }
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": namespace,
        "fields": [
            {"name": "before", "type": ["null", value], "default": None},
            {"name": "after", "type": ["null", f"{namespace}.Value"], "default": None},
            {"name": "source", "type": source},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
            {"name": "transaction", "type": ["null", transaction], "default": None},
        ],
        "connect.version": 1,
        "connect.name": f"{namespace}.Envelope",
    }


def source(pos: int, *, table: str | None = "products", snapshot: str = "false") -> dict[str, Any]:
    return {
        "version": "2.7.0.Final",
        "connector": "mysql",
        "name": SERVER,
        "ts_ms": T0 + pos * 1000,
        "snapshot": snapshot,
        "db": "inventory",
        "sequence": None,
        "table": table,
        "server_id": 223344,
        "gtid": None,
        "file": "mysql-bin.000003",
        "pos": pos,
        "row": 0,
        "thread": None,
        "query": None,
    }


def envelope(op: str, before: dict | None, after: dict | None, pos: int, **src: Any) -> dict[str, Any]:
    return {
        "before": before,
        "after": after,
        "source": source(pos, **src),
        "op": op,
        "ts_ms": T0 + pos * 1000 + 7,
        "transaction": None,
    }


def container(records: list[dict], schema: dict | None = None, codec: str = "deflate") -> bytes:
    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(schema or envelope_schema()), records, codec=codec)
    return buffer.getvalue()

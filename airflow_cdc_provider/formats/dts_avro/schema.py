"""The Avro schema of Alibaba DTS's ``Record``, written from its published field list.

DTS writes one ``Record`` per Kafka message as schemaless Avro: a reader must use exactly the
writer's field order and union branches, so the schema is spelled out here rather than inferred.
It follows the public ``Record.avsc`` of Alibaba's DTS subscribe demo (namespace
``com.alibaba.dts.formats.avro``); see ``docs/formats/dts-avro.md``. No spark-avro jar exists here, so the
schema is used by fastavro inside Python workers.

``bornTimestamp`` is the one field newer DTS releases append to the end of the record; older
messages stop before it. ``record_schema(born_timestamp=False)`` is the common prefix both share,
which the decoder reads before checking what, if anything, follows.
"""

from __future__ import annotations

from typing import Any

NAMESPACE = "com.alibaba.dts.formats.avro"

# Operation enum symbols, in the order the writer numbers them.
OPERATIONS = (
    "INSERT",
    "UPDATE",
    "DELETE",
    "DDL",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "ABORT",
    "HEARTBEAT",
    "CHECKPOINT",
    "COMMAND",
    "FILL",
    "FINISH",
    "CONTROL",
    "RDB",
    "NOOP",
    "INIT",
)

SOURCE_TYPES = (
    "MySQL",
    "Oracle",
    "SQLServer",
    "PostgreSQL",
    "MongoDB",
    "Redis",
    "DB2",
    "PPAS",
    "DRDS",
    "HBASE",
    "HDFS",
    "FILE",
    "OTHER",
)

# Value record types, in the order of the image union (after its leading "null").
VALUE_TYPES = (
    "Integer",
    "Character",
    "Decimal",
    "Float",
    "Timestamp",
    "DateTime",
    "TimestampWithTimeZone",
    "BinaryGeometry",
    "TextGeometry",
    "BinaryObject",
    "TextObject",
    "EmptyObject",
)


def qualified(name: str) -> str:
    """Full Avro name of a DTS type, as fastavro reports union branches."""
    return f"{NAMESPACE}.{name}"


def _record(name: str, *fields: tuple[str, Any]) -> dict[str, Any]:
    return {
        "type": "record",
        "name": name,
        "namespace": NAMESPACE,
        "fields": [{"name": field, "type": kind} for field, kind in fields],
    }


def _optional_int(name: str) -> dict[str, Any]:
    return {"name": name, "type": ["null", "int"], "default": None}


def _value_type_definitions() -> list[dict[str, Any]]:
    """Named value types, each defined once (the after-image union refers to them by name)."""
    date_time = {
        "type": "record",
        "name": "DateTime",
        "namespace": NAMESPACE,
        "fields": [
            _optional_int(part) for part in ("year", "month", "day", "hour", "minute", "second", "millis")
        ],
    }
    return [
        _record("Integer", ("precision", "int"), ("value", "string")),
        _record("Character", ("charset", "string"), ("value", "bytes")),
        _record("Decimal", ("value", "string"), ("precision", "int"), ("scale", "int")),
        _record("Float", ("value", "double"), ("precision", "int"), ("scale", "int")),
        _record("Timestamp", ("timestamp", "long"), ("millis", "int")),
        date_time,
        _record("TimestampWithTimeZone", ("value", qualified("DateTime")), ("timezone", "string")),
        _record("BinaryGeometry", ("type", "string"), ("value", "bytes")),
        _record("TextGeometry", ("type", "string"), ("value", "string")),
        _record("BinaryObject", ("type", "string"), ("value", "bytes")),
        _record("TextObject", ("type", "string"), ("value", "string")),
        {"type": "enum", "name": "EmptyObject", "namespace": NAMESPACE, "symbols": ["NULL", "NONE"]},
    ]


def _image_field(name: str, items: list[Any]) -> dict[str, Any]:
    # An image is null, a string (DDL text rides in afterImages) or a positional list of values.
    return {
        "name": name,
        "type": ["null", "string", {"type": "array", "items": ["null", *items]}],
        "default": None,
    }


def record_schema(born_timestamp: bool = True) -> dict[str, Any]:
    """The DTS ``Record`` schema as a plain dict (fastavro parses it once per worker)."""
    source = {
        "type": "record",
        "name": "Source",
        "namespace": NAMESPACE,
        "fields": [
            {
                "name": "sourceType",
                "type": {
                    "type": "enum",
                    "name": "SourceType",
                    "namespace": NAMESPACE,
                    "symbols": list(SOURCE_TYPES),
                },
            },
            {"name": "version", "type": "string"},
        ],
    }
    field_record = _record("Field", ("name", "string"), ("dataTypeNumber", "int"))
    fields: list[dict[str, Any]] = [
        {"name": "version", "type": "int"},
        {"name": "id", "type": "long"},
        {"name": "sourceTimestamp", "type": "long"},
        {"name": "sourcePosition", "type": "string"},
        {"name": "safeSourcePosition", "type": "string", "default": ""},
        {"name": "sourceTxid", "type": "string", "default": ""},
        {"name": "source", "type": source},
        {
            "name": "operation",
            "type": {
                "type": "enum",
                "name": "Operation",
                "namespace": NAMESPACE,
                "symbols": list(OPERATIONS),
            },
        },
        {"name": "objectName", "type": ["null", "string"], "default": None},
        {"name": "processTimestamps", "type": ["null", {"type": "array", "items": "long"}], "default": None},
        {"name": "tags", "type": {"type": "map", "values": "string"}, "default": {}},
        {
            "name": "fields",
            "type": ["null", "string", {"type": "array", "items": field_record}],
            "default": None,
        },
        _image_field("beforeImages", _value_type_definitions()),
        _image_field("afterImages", [qualified(name) for name in VALUE_TYPES]),
    ]
    if born_timestamp:
        fields.append({"name": "bornTimestamp", "type": "long", "default": 0})
    return {"type": "record", "name": "Record", "namespace": NAMESPACE, "fields": fields}

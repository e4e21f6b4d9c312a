"""DTS Avro messages, written with the package's ``record_schema`` the way DTS writes them.

Schemaless (``fastavro.schemaless_writer``), as DTS sends them to Kafka.
"""

from __future__ import annotations

import io
from typing import Any

import fastavro

from airflow_cdc_provider.formats.dts_avro.schema import NAMESPACE, record_schema

WRITER = fastavro.parse_schema(record_schema())
PK = '{"PRIMARY":["id"]}'
T0 = 1725260000  # 2024-09-02T06:53:20Z, seconds as DTS sends sourceTimestamp


def value(kind: str, **body: Any) -> tuple[str, Any]:
    return (f"{NAMESPACE}.{kind}", body)


def integer(v: int | str, precision: int = 19) -> tuple[str, Any]:
    return value("Integer", precision=precision, value=str(v))


def chars(text: str, charset: str = "utf8mb4") -> tuple[str, Any]:
    codec = {"utf8mb4": "utf-8", "gbk": "gbk", "latin1": "cp1252"}.get(charset, "utf-8")
    return value("Character", charset=charset, value=text.encode(codec))


def empty(symbol: str = "NULL") -> tuple[str, str]:
    return (f"{NAMESPACE}.EmptyObject", symbol)


PRODUCT_FIELDS = [
    ("id", 8),
    ("name", 253),
    ("price", 246),
    ("weight", 4),
    ("score", 5),
    ("created", 7),
    ("updated", 12),
    ("day", 10),
    ("photo", 252),
    ("doc", 245),
]


def record(
    operation: str,
    id_: int,
    *,
    before: list[Any] | None = None,
    after: list[Any] | str | None = None,
    table: str | None = "shop.products",
    fields: list[tuple[str, int]] | None = PRODUCT_FIELDS,
    pk: str | None = PK,
    ts: int | None = None,
    position: str | None = None,
    source: str = "MySQL",
) -> dict[str, Any]:
    return {
        "version": 1,
        "id": id_,
        "sourceTimestamp": T0 + id_ if ts is None else ts,
        "sourcePosition": position if position is not None else f"{1000 + id_}@mysql-bin.000007",
        "safeSourcePosition": "",
        "sourceTxid": f"tx{id_ // 10}",
        "source": {"sourceType": source, "version": "8.0.32"},
        "operation": operation,
        "objectName": table,
        "processTimestamps": None,
        "tags": {"pk_uk_info": pk} if pk else {},
        "fields": [{"name": n, "dataTypeNumber": t} for n, t in fields] if fields is not None else None,
        "beforeImages": before,
        "afterImages": after,
        "bornTimestamp": (T0 + id_) * 1000,
    }


def message(rec: dict[str, Any], schema: Any = WRITER) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, rec)
    return buffer.getvalue()

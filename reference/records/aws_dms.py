"""AWS DMS messages as its Kafka/Kinesis target writes them (the layout of the Paimon capture)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

T0 = 1_725_271_200_000  # 2024-09-02T10:00:00Z


def stamp(ms: int, fmt: str = "%Y-%m-%dT%H:%M:%S.%fZ") -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime(fmt)


def record(
    op: str,
    data: dict | None,
    *,
    ms: int = T0,
    table: str = "product",
    schema: str = "test",
    record_type: str = "data",
    tx: int = 670014899490,
) -> str:
    """One DMS Kafka/Kinesis message as a JSON line (the layout of the Paimon capture)."""
    metadata = {
        "timestamp": stamp(ms),
        "record-type": record_type,
        "operation": op,
        "partition-key-type": "schema-table",
        "schema-name": schema,
        "table-name": table,
        "transaction-id": tx,
    }
    message = {"data": data, "metadata": metadata} if data is not None else {"metadata": metadata}
    return json.dumps(message)

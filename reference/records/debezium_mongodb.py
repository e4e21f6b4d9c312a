"""Debezium MongoDB connector values (documents as extended-JSON strings)."""

from __future__ import annotations

import json

T = 1_725_264_000_000  # 2024-09-02T08:00:00Z


def value(
    op: str | None,
    *,
    after: dict | str | None = None,
    before: dict | str | None = None,
    ts_ms: int = T,
    ord_: int | None = 1,
    db: str = "shop",
    collection: str | None = "orders",
    snapshot: str = "false",
    **extra,
) -> str:
    """A Debezium MongoDB value as a JSON line; dict documents are written as extended-JSON strings."""

    def doc(d):
        return json.dumps(d) if isinstance(d, dict) else d

    record = {
        "before": doc(before),
        "after": doc(after),
        "updateDescription": None,
        "source": {
            "version": "2.7.0.Final",
            "connector": "mongodb",
            "name": "m",
            "ts_ms": ts_ms,
            "snapshot": snapshot,
            "db": db,
            "collection": collection,
            "ord": ord_,
        },
        "op": op,
        "ts_ms": ts_ms + 5,
        "transaction": None,
        **extra,
    }
    return json.dumps(record)

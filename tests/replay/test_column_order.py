"""Snapshot columns in the source table's order: the order the source declares, else the rows' order."""

from __future__ import annotations

import json

import pytest

from tests.conftest import write_jsonl

from airflow_cdc_provider.replay.schemas import merge_column_order


@pytest.mark.parametrize(
    "order, sequence, merged",
    [
        ([], ["zeta", "id", "b"], ["zeta", "id", "b"]),
        (["zeta", "id", "b", "a"], ["zeta", "id", "a", "late"], ["zeta", "id", "b", "a", "late"]),
        # A column added between two others lands between them.
        (["id", "name"], ["id", "age", "name"], ["id", "age", "name"]),
        # One with no known column before it goes first.
        (["a", "b"], ["z", "a"], ["z", "a", "b"]),
        # Known columns never move, whatever order the sequence has; a new one follows its neighbour.
        (["id", "name", "qty"], ["qty", "name", "id", "new"], ["id", "new", "name", "qty"]),
    ],
)
def test_merge_column_order(order, sequence, merged):
    merge_column_order(order, sequence)
    assert order == merged


def _debezium(after: dict, pos: int, schema_fields: list | None = None) -> str:
    source = {"connector": "mysql", "ts_ms": 1697788899000, "db": "shop", "table": "t"}
    source.update({"file": "mysql-bin.000001", "pos": pos, "row": 0})
    payload = {"before": None, "after": after, "source": source, "op": "c", "ts_ms": 1697788899000}
    if schema_fields is None:
        return json.dumps(payload)
    row = {"type": "struct", "fields": schema_fields, "optional": True}
    schema = {"type": "struct", "fields": [dict(row, field="before"), dict(row, field="after")]}
    return json.dumps({"schema": schema, "payload": payload})


def test_snapshot_columns_follow_the_declared_order_else_the_rows_order(replay, spark, tmp_path):
    fields = [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "zname"},
        {"type": "int64", "optional": True, "field": "amount"},
    ]
    path = write_jsonl(
        tmp_path / "dbz.json",
        [
            # No schema: the rows' own order, a column one row adds goes after its neighbour.
            _debezium({"zeta": 1, "id": 1, "b": "x"}, 4),
            _debezium({"zeta": 2, "id": 2, "mid": 5, "b": "y"}, 5),
        ],
    )
    metrics, _ = replay("debezium-json", path, key="id")
    assert spark.read.parquet(metrics["tables"]["shop.t"]["path"]).columns == ["zeta", "id", "mid", "b"]

    # The schema block's field order wins over the order the values are written in.
    path = write_jsonl(
        tmp_path / "dbz_schema.json", [_debezium({"amount": 3, "zname": "n", "id": 1}, 4, fields)]
    )
    metrics, tables = replay("debezium-json", path, key="id")
    assert spark.read.parquet(metrics["tables"]["shop.t"]["path"]).columns == ["id", "zname", "amount"]
    assert tables == {"shop.t": [{"id": 1, "zname": "n", "amount": 3}]}

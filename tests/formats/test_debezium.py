"""debezium-json, open-source Debezium specifics: unsigned PostgreSQL LSNs, decimals as numbers."""

from __future__ import annotations

import json
from decimal import Decimal, localcontext

from tests.conftest import assert_events_add_up, decode_events, write_jsonl

FMT = "debezium-json"
MAX_LONG = 2**63 - 1


def pg_change(row: dict, lsn, ts_ms: int = 1734430557496, op: str = "c") -> str:
    """A PostgreSQL Debezium record (payload only); ``lsn`` is written as given (raw JSON text if str)."""
    source = {
        "version": "1.6.4.Final",
        "connector": "postgresql",
        "ts_ms": ts_ms,
        "snapshot": "false",
        "db": "qa",
        "schema": "public",
        "table": "t",
        "lsn": "@LSN@",
    }
    record = {"before": None, "after": row, "source": source, "op": op, "ts_ms": ts_ms + 5}
    return json.dumps(record).replace('"@LSN@"', lsn if isinstance(lsn, str) else json.dumps(lsn))


# --- LSNs are unsigned 64-bit; an unreadable one never costs the row ---------------------------------


def test_lsn_positions_order_as_unsigned_64_bit(spark, tmp_path):
    lsns = [
        "5",
        str(MAX_LONG),
        str(2**63),
        str(2**64 - 1),
        '"24160560"',  # as text
        "-9223372036854776000",  # Long.MIN_VALUE printed through a double (SeaTunnel, Debezium 1.6)
        str(2**64),
        "1.5",
        '"0/16B3748"',  # PostgreSQL's own text form is not what Debezium writes: unreadable
    ]
    path = write_jsonl(tmp_path / "pg.json", [pg_change({"id": i}, lsn) for i, lsn in enumerate(lsns)])
    events = decode_events(spark, FMT, path)
    assert [(e["kind"], e["reason"], e["log_pos"]) for e in events] == [
        ("change", None, [5]),
        ("change", None, [MAX_LONG]),
        ("change", None, [MAX_LONG, 0]),
        ("change", None, [MAX_LONG, MAX_LONG]),
        ("change", None, [24160560]),
        ("change", None, None),
        ("change", None, None),
        ("change", None, None),
        ("change", None, None),
    ]
    assert [e["after"] for e in events] == [{"id": i} for i in range(len(lsns))]


def test_an_lsn_beyond_2_pow_63_wins_over_a_smaller_one_landed_later(replay, tmp_path):
    path = write_jsonl(
        tmp_path / "pg.json",
        [
            pg_change({"id": 1, "v": "newest"}, str(2**63 + 1), op="u"),
            pg_change({"id": 1, "v": "older"}, str(MAX_LONG), op="u"),
            pg_change({"id": 1, "v": "oldest"}, "7"),
        ],
    )
    metrics, tables = replay(FMT, path, key="id")
    assert tables == {"qa.public.t": [{"id": 1, "v": "newest"}]}
    assert metrics["events"]["quarantined"] == 0
    assert metrics["events"]["applied"] == 3
    assert metrics["ordering"] == {"unreadable_log_position": 0}
    assert_events_add_up(metrics)


def test_an_unreadable_lsn_orders_the_record_by_event_time_and_keeps_the_row(replay, tmp_path):
    bad = "-9223372036854776000"
    path = write_jsonl(
        tmp_path / "pg.json",
        [
            pg_change({"id": 1, "v": "later"}, bad, ts_ms=1734430560000, op="u"),
            pg_change({"id": 1, "v": "earlier"}, bad, ts_ms=1734430550000),
            pg_change({"id": 2, "v": "only"}, bad),
        ],
    )
    metrics, tables = replay(FMT, path, key="id")
    assert tables == {"qa.public.t": [{"id": 1, "v": "later"}, {"id": 2, "v": "only"}]}
    assert metrics["events"] == {
        "read": 3,
        "applied": 3,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 0,
    }
    assert metrics["ordering"] == {"unreadable_log_position": 3}


# --- Kafka Connect decimals as Base64, JSON numbers (decimal.format=NUMERIC) or text -----------------


def _decimal_schema(columns: dict[str, tuple[int, int]]) -> dict:
    fields = [{"type": "int32", "optional": False, "field": "id"}] + [
        {
            "type": "bytes",
            "optional": True,
            "name": "org.apache.kafka.connect.data.Decimal",
            "version": 1,
            "parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)},
            "field": name,
        }
        for name, (precision, scale) in columns.items()
    ]
    row = {"type": "struct", "fields": fields, "optional": True, "field": "after"}
    return {"type": "struct", "fields": [dict(row, field="before"), row], "optional": False}


def mysql_change(schema: dict, row: dict, pos: int) -> str:
    source = {"connector": "mysql", "ts_ms": 1697788899000, "db": "shop", "table": "prices"}
    source.update({"file": "mysql-bin.000003", "pos": pos, "row": 0, "snapshot": "false"})
    payload = {"before": None, "after": row, "source": source, "op": "c", "ts_ms": 1697788899100}
    # Written by hand so JSON numbers keep every digit as the producer wrote them.
    return json.dumps({"schema": schema, "payload": payload}).replace('"@', "").replace('@"', "")


def test_decimals_in_every_encoding_are_exact(replay, spark, tmp_path):
    schema = _decimal_schema({"price": (10, 2), "big": (38, 10)})
    path = write_jsonl(
        tmp_path / "numeric.json",
        [
            # Base64 (the default): 12345 = 0x3039 -> 123.45; -1 = 0xFF -> -0.0000000001
            mysql_change(schema, {"id": 1, "price": "MDk=", "big": "/w=="}, 4),
            # decimal.format=NUMERIC: 28 integral + 10 fractional digits, more than a double holds
            mysql_change(
                schema, {"id": 2, "price": "@123.45@", "big": "@1234567890123456789012345678.0123456789@"}, 5
            ),
            mysql_change(schema, {"id": 3, "price": "@-7@", "big": "@1.5e2@"}, 6),
            # decimals as JSON text
            mysql_change(schema, {"id": 4, "price": "0.10", "big": "-98765432109876543210.5"}, 7),
            mysql_change(schema, {"id": 5, "price": None, "big": "@0@"}, 8),
        ],
    )
    metrics, tables = replay(FMT, path, key="id")
    # Exact digits: each value as plain text at its column's scale (the Parquet type fixes the scale).
    scales = {"price": Decimal("0.01"), "big": Decimal("1E-10")}
    with localcontext() as ctx:
        ctx.prec = 60
        got = {
            r["id"]: tuple(None if r[c] is None else format(r[c].quantize(scales[c]), "f") for c in scales)
            for r in tables["shop.prices"]
        }
    assert got == {
        1: ("123.45", "-0.0000000001"),
        2: ("123.45", "1234567890123456789012345678.0123456789"),
        3: ("-7.00", "150.0000000000"),
        4: ("0.10", "-98765432109876543210.5000000000"),
        5: (None, "0.0000000000"),
    }
    types = {
        f.name: f.dataType.simpleString()
        for f in spark.read.parquet(metrics["tables"]["shop.prices"]["path"]).schema
    }
    assert types == {"id": "int", "price": "decimal(10,2)", "big": "decimal(38,10)"}
    assert metrics["events"]["quarantined"] == 0


def test_a_decimal_that_is_neither_base64_nor_a_number_is_quarantined(replay, tmp_path):
    schema = _decimal_schema({"price": (10, 2)})
    path = write_jsonl(
        tmp_path / "bad.json",
        [
            mysql_change(schema, {"id": 1, "price": "12,50"}, 4),
            mysql_change(schema, {"id": 2, "price": "@true@"}, 5),
            mysql_change(schema, {"id": 3, "price": "@12.5@"}, 6),
        ],
    )
    metrics, tables = replay(FMT, path, key="id")
    assert tables == {"shop.prices": [{"id": 3, "price": Decimal("12.50")}]}
    assert metrics["quarantine"]["reasons"] == {"type mismatch": 2}
    assert_events_add_up(metrics)

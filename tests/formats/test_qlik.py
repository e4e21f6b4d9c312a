"""Qlik Replicate JSON decoder: MD/DT envelope messages decoded by the real decoder and engine.

The Qlik seed document (../shared/seeds/004_*.txt) describes every field of the MD and DT messages
but holds no sample message, so the messages here are built field by field from it (``reference.records.qlik``): the envelope
(``magic``, ``type``, ``headers``, ``messageSchemaId``, ``messageSchema``, ``message``), the MD
``schemaId``/``lineage``/``tableStructure.tableColumns``/``dataSchema`` and the DT
``data``/``beforeData``/``headers`` (operation, changeSequence, timestamp, streamPosition,
transactionId, changeMask, columnMask, transactionEventCounter, transactionLastEvent).
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from tests.conftest import assert_events_add_up

from airflow_cdc_provider.formats import DecodeOptions, get_decoder
from airflow_cdc_provider.formats.qlik.values import change_sequence_position, column_present
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import list_landed_files
from reference.records.qlik import dt_msg, md

# ------------------------------------------------------------------ what Replicate messages give

CUSTOMER_TYPES = {
    "ID": "int",
    "NAME": "string",
    "BALANCE": "decimal(10,2)",
    "ACTIVE": "boolean",
    "BORN": "date",
    "UPDATED": "timestamp",
    "PHOTO": "binary",
    "SCORE": "double",
    "VISITS": "decimal(20,0)",
}


def seq(n: int, second: int = 0) -> str:
    """A 35-character changeSequence: YYYYMMDDHHmmSShh + a 19-digit counter."""
    return f"20240902101{second:03d}00" + f"{n:019d}"


def at(second: int = 0) -> str:
    return f"2024-09-02T10:{10 + second // 60:02d}:{second % 60:02d}.000"


def customer(id_: int, name: str | None, balance: str = "10.50", **extra: Any) -> dict[str, Any]:
    row = {
        "ID": id_,
        "NAME": name,
        "BALANCE": balance,
        "ACTIVE": True,
        "BORN": "1990-01-02",
        "UPDATED": "2024-09-01 08:00:00.250000",
        "PHOTO": "CAFE",
        "SCORE": 1.5,
        "VISITS": "18446744073709551615",
    }
    row.update(extra)
    return row


def typed_customer(id_: int, name: str) -> dict[str, str]:
    """``customer(id_, name)`` as ``decode`` shows its image: every value converted to its MD type."""
    return {
        "ID": f"INT {id_}",
        "NAME": f'STRING "{name}"',
        "BALANCE": "DECIMAL 10.5",
        "ACTIVE": "BOOLEAN true",
        "BORN": 'DATE "1990-01-02"',
        "UPDATED": 'TIMESTAMP "2024-09-01 08:00:00.25+00:00"',
        "PHOTO": 'BINARY "yv4="',
        "SCORE": "DOUBLE 1.5",
        "VISITS": "DECIMAL 18446744073709551615",
    }


def land(path: Path, *messages: Any) -> Path:
    """One JSON message per line, the way a Kafka sink lands them (strings are written as given)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((m if isinstance(m, str) else json.dumps(m)) + "\n" for m in messages))
    return path


# ------------------------------------------------------------------ decoding to plain rows


def _typed(image: F.Column) -> F.Column:
    """Each value as "KIND json", so a test sees what a value was converted to.

    The kind is coarse (INT for every integral width, DECIMAL without precision): the variant only
    carries the value, the declared type (``types``) is what the engine casts it to.
    """

    def kind(v: F.Column) -> F.Column:
        t = F.schema_of_variant(v)
        return F.when(t.isin("TINYINT", "SMALLINT", "INT", "BIGINT"), F.lit("INT")).otherwise(
            F.regexp_replace(t, r"\(.*\)$", "")
        )

    return F.transform_values(
        image, lambda _k, v: F.when(v.isNotNull(), F.concat_ws(" ", kind(v), F.to_json(v)))
    )


def decode(spark, *paths: Path, **options: Any) -> list[dict[str, Any]]:
    files = list_landed_files(spark, [str(p) for p in paths])
    events = get_decoder("qlik-json").decode(spark, files, DecodeOptions(**options))
    rows = events.select(
        F.element_at(F.split("file", "/"), -1).alias("file"),
        "line",
        "kind",
        "op",
        "reason",
        "table",
        "event_ms",
        "log_pos",
        "tx_id",
        "tx_end",
        "partial",
        "key_cols",
        "types",
        _typed(F.col("before")).alias("before"),
        _typed(F.col("after")).alias("after"),
    ).collect()
    return sorted((r.asDict(recursive=True) for r in rows), key=lambda r: (r["file"], r["line"]))


def shape(rows: list[dict[str, Any]]) -> list[tuple]:
    return [(r["file"], r["line"], r["kind"], r["op"], r["reason"], r["table"]) for r in rows]


def utc(*parts: int) -> dt.datetime:
    """A UTC instant as PySpark returns timestamps (naive, in the Python process's local time)."""
    return dt.datetime.fromtimestamp(dt.datetime(*parts, tzinfo=dt.timezone.utc).timestamp())


def snapshot_row(id_: int, name: str | None, balance: str) -> dict[str, Any]:
    return {
        "ID": id_,
        "NAME": name,
        "BALANCE": Decimal(balance),
        "ACTIVE": True,
        "BORN": dt.date(1990, 1, 2),
        "UPDATED": utc(2024, 9, 1, 8, 0, 0, 250000),
        "PHOTO": bytearray(b"\xca\xfe"),
        "SCORE": 1.5,
        "VISITS": Decimal("18446744073709551615"),
    }


# ------------------------------------------------------------------ events of one landing


def test_each_message_becomes_one_typed_canonical_event(spark, tmp_path):
    path = land(
        tmp_path / "crm.json",
        md(),
        dt_msg("REFRESH", customer(1, "Ann")),
        dt_msg(
            "UPDATE",
            customer(1, "Ann", "11.00"),
            customer(1, "Ann"),
            seq=seq(7),
            at=at(1),
            tx="00000000000000000000000000060008",
        ),
        dt_msg("DELETE", customer(1, "Ann", "11.00"), seq=seq(8), at=at(2), mask="01", last=False),
    )
    rows = decode(spark, path)
    assert shape(rows) == [
        ("crm.json", 1, "ignored", None, "ddl", "dbo.CUSTOMERS"),
        ("crm.json", 2, "change", "read", None, "dbo.CUSTOMERS"),
        ("crm.json", 3, "change", "update", None, "dbo.CUSTOMERS"),
        ("crm.json", 4, "change", "delete", None, "dbo.CUSTOMERS"),
    ]
    full = typed_customer(1, "Ann")
    refresh, update, delete = rows[1], rows[2], rows[3]
    assert refresh["after"] == full
    assert refresh["before"] is None
    assert (refresh["log_pos"], refresh["event_ms"], refresh["tx_id"], refresh["partial"]) == (
        [0, 0, 0],
        None,
        None,
        False,
    )
    assert refresh["key_cols"] == ["ID"]
    assert refresh["types"] == CUSTOMER_TYPES

    assert update["after"] == {**full, "BALANCE": "DECIMAL 11"}
    assert update["before"] == full
    assert update["log_pos"] == [2024090210100000, 0, 7]
    assert update["event_ms"] == 1725271801000  # 2024-09-02T10:10:01Z
    assert (update["tx_id"], update["tx_end"], update["partial"]) == (
        "00000000000000000000000000060008",
        True,
        False,
    )

    # A DELETE carries its row in `data`; columnMask 01 says only ID was captured.
    assert delete["after"] is None
    assert delete["before"] == {"ID": "INT 1"}
    assert (delete["log_pos"], delete["tx_end"], delete["partial"]) == (
        [2024090210100000, 0, 8],
        False,
        False,
    )


def test_change_sequence_orders_like_the_string(spark):
    sequences = [
        "20240902101000000000000000000000009",
        "20240902101000000000000000000000010",
        "20240902101000009999999999999999999",  # counter at its 19-digit maximum: no overflow
        "20240902101001000000000000000000001",
        "20240902101001000000000000000000002",
        "20250101000000000000000000000000001",
    ]
    df = spark.createDataFrame([(s,) for s in reversed(sequences)], "s string")
    ordered = [r.s for r in df.orderBy(change_sequence_position(E.col("s")).column()).collect()]
    assert ordered == sequences
    odd = spark.createDataFrame([("",), ("12ab",), ("7",)], "s string")
    assert [r.p for r in odd.select(change_sequence_position(E.col("s")).alias("p").column()).collect()] == [
        None,
        None,
        [0, 0, 7],
    ]


def test_column_mask_is_little_endian_over_md_ordinals(spark):
    # The seed's own example: 0B = 1011 binary -> ordinals 1, 2 and 4.
    cases = [("0B", o) for o in range(1, 9)] + [("FF02", 9), ("FF02", 10), ("FF02", 8), ("01", 9), ("1", 1)]
    df = spark.createDataFrame(cases, "mask string, ordinal int")
    got = [
        (r.mask, r.ordinal, r.present)
        for r in df.select(
            "mask", "ordinal", column_present(E.col("mask"), E.col("ordinal")).alias("present").column()
        ).collect()
    ]
    assert got == [
        ("0B", 1, True),
        ("0B", 2, True),
        ("0B", 3, False),
        ("0B", 4, True),
        ("0B", 5, False),
        ("0B", 6, False),
        ("0B", 7, False),
        ("0B", 8, False),
        ("FF02", 9, False),
        ("FF02", 10, True),
        ("FF02", 8, True),
        ("01", 9, False),  # bytes past the end of the mask are zero
        ("1", 1, True),
    ]


def test_column_not_captured_is_absent_and_marks_the_image_partial(spark, tmp_path):
    path = land(
        tmp_path / "crm.json",
        md(),
        # FD01: bit 1 (ordinal 2, NAME) clear: NAME was not captured, its null is not a value.
        dt_msg("UPDATE", customer(1, None, "11.00"), seq=seq(1), at=at(1), mask="FD01"),
        # All bits set: NAME really became null.
        dt_msg("UPDATE", customer(2, None, "12.00"), seq=seq(2), at=at(2)),
    )
    _, not_captured, set_null = decode(spark, path)
    assert not_captured["partial"] is True
    assert "NAME" not in not_captured["after"]
    assert not_captured["after"]["BALANCE"] == "DECIMAL 11"
    assert set_null["partial"] is False
    assert "NAME" in set_null["after"] and set_null["after"]["NAME"] is None


def test_images_that_are_not_exactly_the_declared_columns_are_typed_the_same_way(spark, tmp_path):
    # An image holding exactly the MD's columns, all captured, is typed by one compiled expression per
    # column; any other image by the general per-value typing. Both must give the same values.
    typed = typed_customer(1, "a")
    named = {"schema": "dbo", "table": "CUSTOMERS"}  # found by name: NOTE is not an MD column
    without_score = customer(1, "a")
    del without_score["SCORE"]
    path = land(
        tmp_path / "crm.json",
        md(),
        dt_msg("INSERT", customer(1, "a"), seq=seq(1), at=at(1), **named),
        # A column the MD does not declare keeps its JSON value and reaches the snapshot.
        dt_msg("INSERT", customer(1, "a", NOTE="x"), seq=seq(2), at=at(2), **named),
        dt_msg("INSERT", without_score, seq=seq(3), at=at(3), mask=None, **named),
        dt_msg("INSERT", customer(1, "a", "abc", NOTE="x"), seq=seq(4), at=at(4), **named),
        dt_msg("INSERT", customer(1, "a", "abc"), seq=seq(5), at=at(5), **named),
    )
    _, exact, undeclared, missing, bad_general, bad_exact = decode(spark, path)
    assert exact["after"] == typed
    assert undeclared["after"] == {**typed, "NOTE": 'STRING "x"'}
    assert missing["after"] == {k: v for k, v in typed.items() if k != "SCORE"}
    assert [(r["kind"], r["reason"]) for r in (exact, undeclared, missing)] == [("change", None)] * 3
    assert [r["partial"] for r in (exact, undeclared, missing)] == [False] * 3
    assert [(r["kind"], r["reason"]) for r in (bad_general, bad_exact)] == [
        ("quarantined", "type mismatch")
    ] * 2


# ------------------------------------------------------------------ finding the table of a DT message


def test_dt_messages_find_their_md_every_documented_way(spark, tmp_path):
    orders = {"ORDER_ID": (1, "INT8", 19, 0, 1), "AMOUNT": (2, "REAL4", 0, 0, 0)}
    land(tmp_path / "in" / "0-md.json", md(), md("ORDERS", orders, schema="sales", schema_id="md-orders-1"))
    land(
        tmp_path / "in" / "1-dt.json",
        dt_msg(
            "INSERT",
            {"ORDER_ID": "7", "AMOUNT": 2.5},
            seq=seq(1),
            at=at(1),
            mask="03",
            schema_id="md-orders-1",
        ),
        # Some landings put schema/table beside the envelope fields rather than inside `message`.
        {
            **dt_msg("INSERT", {"ORDER_ID": 8, "AMOUNT": 3}, seq=seq(2), at=at(2), mask="03"),
            "schema": "sales",
            "table": "ORDERS",
        },
        # The table's columns fit only sales.ORDERS: the one MD that explains the message.
        dt_msg("INSERT", {"ORDER_ID": 9, "AMOUNT": 4}, seq=seq(3), at=at(3), mask="03"),
        # Nothing names the table and the columns fit no MD: not guessed.
        dt_msg("INSERT", {"SKU": "x"}, seq=seq(4), at=at(4), mask="01"),
        # The MD named does not exist in the landing.
        dt_msg(
            "INSERT", {"ORDER_ID": 10, "AMOUNT": 5}, seq=seq(5), at=at(5), mask="03", schema_id="md-missing"
        ),
        dt_msg(
            "INSERT",
            {"ORDER_ID": 11, "AMOUNT": 6},
            seq=seq(6),
            at=at(6),
            mask="03",
            schema="sales",
            table="RETURNS",
        ),
    )
    rows = decode(spark, tmp_path / "in")
    assert shape(rows)[2:] == [
        ("1-dt.json", 1, "change", "insert", None, "sales.ORDERS"),
        ("1-dt.json", 2, "change", "insert", None, "sales.ORDERS"),
        ("1-dt.json", 3, "change", "insert", None, "sales.ORDERS"),
        ("1-dt.json", 4, "quarantined", "insert", "unknown table/schema", None),
        ("1-dt.json", 5, "quarantined", "insert", "unknown table/schema", None),
        ("1-dt.json", 6, "quarantined", "insert", "unknown table/schema", "sales.RETURNS"),
    ]
    assert [r["after"] for r in rows[2:5]] == [
        {"ORDER_ID": "INT 7", "AMOUNT": "FLOAT 2.5"},
        {"ORDER_ID": "INT 8", "AMOUNT": "FLOAT 3.0"},
        {"ORDER_ID": "INT 9", "AMOUNT": "FLOAT 4.0"},
    ]
    assert rows[2]["key_cols"] == ["ORDER_ID"] and rows[2]["types"] == {
        "ORDER_ID": "bigint",
        "AMOUNT": "float",
    }


def test_table_option_ties_unnamed_messages_and_ambiguous_columns_are_not_guessed(spark, tmp_path):
    twin = {"ID": (1, "INT4", 10, 0, 1), "NAME": (2, "WSTRING", 0, 0, 0)}
    land(tmp_path / "in" / "0-md.json", md("A", twin, schema_id="a"), md("B", twin, schema_id="b"))
    land(
        tmp_path / "in" / "1-dt.json",
        dt_msg("INSERT", {"ID": 1, "NAME": "x"}, seq=seq(1), at=at(1), mask="03"),
    )
    assert shape(decode(spark, tmp_path / "in"))[2] == (
        "1-dt.json",
        1,
        "quarantined",
        "insert",
        "unknown table/schema",
        None,
    )
    # --table: qualified, or the bare table name when no other schema has a table of that name.
    assert shape(decode(spark, tmp_path / "in", table="dbo.B"))[2] == (
        "1-dt.json",
        1,
        "change",
        "insert",
        None,
        "dbo.B",
    )
    assert shape(decode(spark, tmp_path / "in", table="A"))[2] == (
        "1-dt.json",
        1,
        "change",
        "insert",
        None,
        "dbo.A",
    )


def test_a_table_version_applies_from_its_md_timestamp(spark, tmp_path):
    v1 = {"ID": (1, "INT4", 10, 0, 1), "NAME": (2, "WSTRING", 0, 0, 0)}
    v2 = {**v1, "EMAIL": (3, "STRING", 0, 0, 0), "NAME": (2, "WSTRING", 0, 0, 0)}
    land(
        tmp_path / "crm.json",
        md("T", v1, schema_id="t1", version=1, at="2024-09-02T09:00:00.000"),
        md("T", v2, schema_id="t2", version=2, at="2024-09-02T10:10:30.000"),
        dt_msg("INSERT", {"ID": 1, "NAME": "a"}, seq=seq(1), at=at(1), mask="03", table="T", schema="dbo"),
        dt_msg(
            "INSERT",
            {"ID": 2, "NAME": "b", "EMAIL": "b@x"},
            seq=seq(2),
            at=at(40),
            mask="07",
            table="T",
            schema="dbo",
        ),
        dt_msg("REFRESH", {"ID": 3, "NAME": "c"}, mask="03", table="T", schema="dbo"),
    )
    rows = decode(spark, tmp_path / "crm.json")
    assert [r["types"] for r in rows[2:]] == [
        {"ID": "int", "NAME": "string"},
        {"ID": "int", "NAME": "string", "EMAIL": "string"},
        {"ID": "int", "NAME": "string"},  # full load: no change time, the first version
    ]
    assert [r["partial"] for r in rows[2:]] == [False, False, False]


# ------------------------------------------------------------------ malformed records


def test_malformed_records_are_quarantined_with_their_reason(spark, tmp_path, replay):
    path = land(
        tmp_path / "in" / "crm.json",
        md(),
        dt_msg(None, customer(1, "a"), seq=seq(1), at=at(1)),  # headers without operation
        dt_msg("MERGE", customer(2, "b"), seq=seq(2), at=at(2)),
        dt_msg("INSERT", [1, 2], seq=seq(3), at=at(3)),
        dt_msg("UPDATE", customer(4, "d"), "not a row", seq=seq(4), at=at(4)),
        dt_msg("INSERT", None, seq=seq(5), at=at(5)),
        dt_msg("DELETE", None, seq=seq(6), at=at(6)),
        dt_msg("INSERT", customer(7, "g", "abc"), seq=seq(7), at=at(7)),
        dt_msg("INSERT", customer(8, "h", PHOTO="not hex"), seq=seq(8), at=at(8)),
        dt_msg("INSERT", customer(9, "i"), seq=seq(9), at=at(9), mask="ZZ"),
        dt_msg("INSERT", customer(10, "j"), seq=seq(10), at=at(10), schema="dbo", table="NOPE"),
        {**dt_msg("INSERT", customer(11, "k"), seq=seq(11), at=at(11)), "type": "XX"},
        '{"magic": "atMSG", "type": "DT", "message": "bytes"}',
        "{not json",
        "",
        dt_msg("INSERT", customer(12, "ok"), seq=seq(12), at=at(12)),
    )
    rows = decode(spark, path)
    assert [(r["line"], r["kind"], r["reason"]) for r in rows] == [
        (1, "ignored", "ddl"),
        (2, "quarantined", "missing op"),
        (3, "quarantined", "unknown op"),
        (4, "quarantined", "row image not an object"),
        (5, "quarantined", "row image not an object"),
        (6, "quarantined", "missing image"),
        (7, "quarantined", "key unknown: delete with neither before nor after image"),
        (8, "quarantined", "type mismatch"),
        (9, "quarantined", "type mismatch"),
        (10, "quarantined", "type mismatch"),
        (11, "quarantined", "unknown table/schema"),
        (12, "quarantined", "unknown op"),
        (13, "quarantined", "type mismatch"),
        (14, "quarantined", "not JSON"),
        (15, "ignored", "tombstone"),
        (16, "change", None),
    ]
    metrics, tables = replay("qlik-json", tmp_path / "in")
    assert_events_add_up(metrics)
    assert metrics["events"] == {
        "read": 16,
        "applied": 1,
        "after_as_of": 0,
        "ignored": 2,
        "duplicates": 0,
        "quarantined": 13,
    }
    assert tables == {"dbo.CUSTOMERS": [snapshot_row(12, "ok", "10.50")]}


# ------------------------------------------------------------------ replay end to end


def test_replay_full_load_then_changes(spark, tmp_path, replay):
    land(tmp_path / "in" / "0-md.json", md())
    # The full load lands in a file that sorts after the changes: REFRESH still orders first.
    land(
        tmp_path / "in" / "2-full-load.json",
        dt_msg("REFRESH", customer(1, "Ann")),
        dt_msg("REFRESH", customer(2, "Bob")),
        dt_msg("REFRESH", customer(3, "Cy")),
        dt_msg("REFRESH", customer(5, "Eve")),
    )
    land(
        tmp_path / "in" / "1-changes.json",
        # NAME not captured (bit clear): Ann keeps her name, BALANCE changes.
        dt_msg("UPDATE", customer(1, None, "11.00"), seq=seq(1), at=at(1), mask="FD01"),
        # The key changes: beforeData holds the old key.
        dt_msg("UPDATE", customer(20, "Bob", "20.00"), customer(2, "Bob"), seq=seq(2), at=at(2)),
        dt_msg("DELETE", {"ID": 3}, seq=seq(3), at=at(3), mask="01"),
        dt_msg("INSERT", customer(4, "Dan", "4.00"), seq=seq(4), at=at(4)),
        # Eve's change arrives after AS OF.
        dt_msg("UPDATE", customer(5, "Eve", "99.00"), seq=seq(5, second=1), at=at(90)),
    )
    metrics, tables = replay("qlik-json", tmp_path / "in", "2024-09-02T10:10:30Z")
    assert_events_add_up(metrics)
    assert metrics["events"] == {
        "read": 10,
        "applied": 8,
        "after_as_of": 1,
        "ignored": 1,
        "duplicates": 0,
        "quarantined": 0,
    }
    assert tables == {
        "dbo.CUSTOMERS": sorted(
            [
                snapshot_row(1, "Ann", "11.00"),
                snapshot_row(4, "Dan", "4.00"),
                snapshot_row(5, "Eve", "10.50"),
                snapshot_row(20, "Bob", "20.00"),
            ],
            key=lambda r: json.dumps(r, sort_keys=True, default=str),
        )
    }
    info = metrics["tables"]["dbo.CUSTOMERS"]
    assert (info["rows"], info["inserts"], info["updates"], info["deletes"]) == (4, 5, 2, 1)
    # The columns in MD ordinal order, the source table's (not by name).
    columns = spark.read.parquet(info["path"]).columns
    assert columns == ["ID", "NAME", "BALANCE", "ACTIVE", "BORN", "UPDATED", "PHOTO", "SCORE", "VISITS"]

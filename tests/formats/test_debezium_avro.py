"""debezium-avro: Debezium records in Avro container files and Parquet, as Kafka Connect sinks land them.

The files are written (``reference.records.debezium_avro``) from the schema Debezium's MySQL
connector publishes through Kafka Connect's Avro converter (Confluent ``AvroData``): an ``Envelope`` record of ``before``/``after``
(the table's ``Value`` record, optional), ``source``, ``op``, ``ts_ms`` and ``transaction``, with
Connect logical types as ``connect.name``/``connect.parameters`` and Avro logical types. Avro with
fastavro (``fastavro.writer``, as the sinks' AvroFormat writes container files), Parquet with
pyarrow (as their ParquetFormat writes it through parquet-avro: the Avro schema in the footer).

The same records written as ``debezium-json`` (the JsonConverter's output, schema block included)
must decode to the same events: one mapping of Connect types for every Debezium landing.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

# The decoder runs fastavro in Python workers: they must be this interpreter. Set before the session.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from tests.conftest import assert_events_add_up, decode_events  # noqa: E402

from reference.records.debezium_avro import (  # noqa: E402
    PRODUCT_COLUMNS,
    SERVER,
    T0,
    container,
    envelope,
    envelope_schema,
    source,
)

FMT = "debezium-avro"

# --- rows of the products table (its schema and the envelope: reference.records.debezium_avro) -----------


def product(id_: int, name: str = "scooter", qty: int | None = 3, price: str = "12.50", **more: Any) -> dict:
    """A products row as fastavro takes it (Python values of the Avro logical types)."""
    row = {
        "id": id_,
        "name": name,
        "qty": qty,
        "price": Decimal(price),
        "weight": 3.5,
        "ratio": 0.25,
        "active": True,
        "photo": b"\x00\x01\xfe",
        "made": 19968,  # epoch days: 2024-09-02
        "opens": 34_200_000_000,  # µs since midnight: 09:30
        "updated": 1_725_271_200_123_456,
        "created": 1_725_271_200_123,
        "nano": 1_725_271_200_123_456_789,
        "zoned": "2024-09-02T10:00:00.5Z",
        "made_c": dt.date(2024, 9, 2),
        "created_c": dt.datetime(2024, 9, 2, 10, 0, 0, 250000, tzinfo=dt.timezone.utc),
        "amount": {"scale": 3, "value": (12345).to_bytes(2, "big", signed=True)},
    }
    row.update(more)
    return row


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# --- the same records as debezium-json (Kafka Connect's JsonConverter) ---------------------------------------


def _json_field(field: str, connect_type: str, optional: bool = True, **more: Any) -> dict:
    return {"type": connect_type, "optional": optional, "field": field, **more}


JSON_PRODUCT_FIELDS = [
    _json_field("id", "int32", optional=False),
    _json_field("name", "string"),
    _json_field("qty", "int16"),
    _json_field(
        "price",
        "bytes",
        name="org.apache.kafka.connect.data.Decimal",
        version=1,
        parameters={"scale": "2", "connect.decimal.precision": "10"},
    ),
    _json_field("weight", "double"),
    _json_field("ratio", "float"),
    _json_field("active", "boolean"),
    _json_field("photo", "bytes"),
    _json_field("made", "int32", name="io.debezium.time.Date", version=1),
    _json_field("opens", "int64", name="io.debezium.time.MicroTime", version=1),
    _json_field("updated", "int64", name="io.debezium.time.MicroTimestamp", version=1),
    _json_field("created", "int64", name="io.debezium.time.Timestamp", version=1),
    _json_field("nano", "int64", name="io.debezium.time.NanoTimestamp", version=1),
    _json_field("zoned", "string", name="io.debezium.time.ZonedTimestamp", version=1),
    _json_field("made_c", "int32", name="org.apache.kafka.connect.data.Date", version=1),
    _json_field("created_c", "int64", name="org.apache.kafka.connect.data.Timestamp", version=1),
    _json_field(
        "amount",
        "struct",
        name="io.debezium.data.VariableScaleDecimal",
        fields=[_json_field("scale", "int32", False), _json_field("value", "bytes", False)],
    ),
]


def _json_row(row: dict | None) -> dict | None:
    """A products row as the JsonConverter writes its values."""
    if row is None:
        return None
    b64 = lambda data: base64.b64encode(data).decode("ascii")  # noqa: E731
    unscaled = int(row["price"].scaleb(2))
    return {
        **row,
        "price": b64(unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)),
        "photo": b64(row["photo"]),
        "made_c": (row["made_c"] - dt.date(1970, 1, 1)).days,
        "created_c": int(row["created_c"].timestamp() * 1000),
        "amount": {"scale": row["amount"]["scale"], "value": b64(row["amount"]["value"])},
    }


def json_twin(records: list[dict]) -> str:
    def side(name: str) -> dict:
        value = f"{SERVER}.inventory.products.Value"
        return {
            "type": "struct",
            "optional": True,
            "name": value,
            "field": name,
            "fields": JSON_PRODUCT_FIELDS,
        }

    schema = {
        "type": "struct",
        "optional": False,
        "name": f"{SERVER}.inventory.products.Envelope",
        "fields": [side("before"), side("after")],
    }
    out = []
    for r in records:
        payload = {**r, "before": _json_row(r["before"]), "after": _json_row(r["after"])}
        out.append(json.dumps({"schema": schema, "payload": payload}))
    return "\n".join(out) + "\n"


# --- decoding ----------------------------------------------------------------------------------------------

EVERY_OP = [
    envelope("r", None, product(1, "snapshot row"), 1, snapshot="true"),
    envelope("c", None, product(2, "car battery", price="-0.01"), 2),
    envelope("u", product(2, "car battery", price="-0.01"), product(2, "battery", qty=None), 3),
    envelope("u", product(1), product(10, "moved"), 4),  # a key change
    envelope("d", product(2, "battery", qty=None), None, 5),
    envelope("d", product(99, "never there"), None, 6),
    envelope("u", product(98), product(98, "created by update"), 7),
    envelope("c", None, product(5), 8, table="gone"),
    envelope("t", None, None, 9, table="gone"),  # a truncate empties its table
    envelope("c", None, product(3, "late"), 60),  # after AS OF
]
COMPARED = (
    "table",
    "kind",
    "op",
    "reason",
    "event_ms",
    "log_pos",
    "tx_id",
    "before",
    "after",
    "types",
    "key_cols",
)


def test_every_op_decodes_as_the_same_records_in_debezium_json(spark, tmp_path):
    avro = write(tmp_path / "avro" / "topic+0+0000000000.avro", container(EVERY_OP))
    twin = tmp_path / "json" / "topic-0.json"
    twin.parent.mkdir()
    twin.write_text(json_twin(EVERY_OP))
    from_avro = decode_events(spark, FMT, avro)
    from_json = decode_events(spark, "debezium-json", twin)
    assert [{k: e[k] for k in COMPARED} for e in from_avro] == [
        {k: e[k] for k in COMPARED} for e in from_json
    ]
    assert [e["op"] for e in from_avro] == [
        "read", "insert", "update", "update", "delete", "delete", "update", "insert", "truncate", "insert",
    ]  # fmt: skip
    assert [(e["file_pos"], e["line"]) for e in from_avro] == [(i, None) for i in range(len(EVERY_OP))]
    first = from_avro[0]
    assert first["table"] == "inventory.products" and first["log_pos"] == [3, 1, 0]
    assert first["types"] == {
        "id": "int", "name": "string", "qty": "smallint", "price": "decimal(10,2)", "weight": "double",
        "ratio": "float", "active": "boolean", "photo": "binary", "made": "date", "opens": "string",
        "updated": "timestamp", "created": "timestamp", "nano": "timestamp", "zoned": "timestamp",
        "made_c": "date", "created_c": "timestamp", "amount": "string",
    }  # fmt: skip
    utc = dt.timezone.utc
    assert {k: first["after"][k] for k in ("price", "made", "opens", "updated", "created", "nano", "zoned", "created_c", "amount")} == {
        "price": Decimal("12.50"),
        "made": dt.date(2024, 9, 2),
        "opens": "09:30:00.000000",
        "updated": dt.datetime(2024, 9, 2, 10, 0, 0, 123456, tzinfo=utc),
        "created": dt.datetime(2024, 9, 2, 10, 0, 0, 123000, tzinfo=utc),
        "nano": dt.datetime(2024, 9, 2, 10, 0, 0, 123456, tzinfo=utc),
        "zoned": dt.datetime(2024, 9, 2, 10, 0, 0, 500000, tzinfo=utc),
        "created_c": dt.datetime(2024, 9, 2, 10, 0, 0, 250000, tzinfo=utc),
        "amount": Decimal("12.345"),
    }  # fmt: skip


def expected_rows() -> list[dict]:
    def typed(row: dict) -> dict:
        naive = lambda micros: dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)  # noqa: E731
        return {
            **row,
            "photo": bytearray(row["photo"]),
            "made": dt.date(2024, 9, 2),
            "opens": "09:30:00.000000",
            "updated": naive(row["updated"]),
            "created": naive(row["created"] * 1000),
            "nano": naive(row["nano"] // 1000),
            "zoned": naive(1_725_271_200_500_000),
            "created_c": dt.datetime(2024, 9, 2, 10, 0, 0, 250000),
            "amount": "12.345",
        }

    return sorted(
        [typed(product(10, "moved")), typed(product(98, "created by update"))], key=lambda r: r["id"]
    )


def test_every_op_replays_with_counts(replay, spark, tmp_path):
    write(tmp_path / "in" / "topic+0+0000000000.avro", container(EVERY_OP))
    metrics, tables = replay(FMT, tmp_path / "in", T0 + 30_000, key="id")
    assert sorted(tables["inventory.products"], key=lambda r: r["id"]) == expected_rows()
    columns = spark.read.parquet(metrics["tables"]["inventory.products"]["path"]).columns
    assert columns == [c["name"] for c in PRODUCT_COLUMNS]  # the schema's order
    assert tables["inventory.gone"] == [] and metrics["tables"]["inventory.gone"]["truncates"] == 1
    assert metrics["events"] == {
        "read": 10, "applied": 9, "after_as_of": 1, "ignored": 0, "duplicates": 0, "quarantined": 0,
    }  # fmt: skip
    t = metrics["tables"]["inventory.products"]
    assert (t["inserts"], t["updates"], t["deletes"]) == (2, 3, 1)
    assert (t["updates_of_unknown_key"], t["deletes_of_unknown_key"]) == (1, 1)
    assert_events_add_up(metrics)


def test_out_of_order_files_and_redeliveries(replay, tmp_path):
    landing = tmp_path / "in"
    later = [envelope("u", product(1, "a"), product(1, "c"), 30), envelope("d", product(2), None, 31)]
    earlier = [
        envelope("c", None, product(1, "a"), 10),
        envelope("c", None, product(2), 11),
        envelope("u", product(1, "a"), product(1, "b"), 20),
    ]
    write(landing / "partition=0" / "products+0+0000000000.avro", container(later))  # listed first
    write(landing / "partition=1" / "products+1+0000000000.avro", container(earlier))
    write(landing / "partition=1" / "products+1+0000000003.avro", container(later[:1]))  # re-delivered
    metrics, tables = replay(FMT, landing, key="id")
    assert [(r["id"], r["name"]) for r in tables["inventory.products"]] == [(1, "c")]
    assert metrics["events"]["duplicates"] == 1
    assert metrics["tables"]["inventory.products"]["updates"] == 2
    assert_events_add_up(metrics)


def test_records_and_files_that_cannot_be_decoded_are_quarantined(spark, replay, tmp_path):
    landing = tmp_path / "in"
    good = [envelope("c", None, product(1), 1), envelope("c", None, product(2), 2)]
    write(landing / "a.avro", container(good))
    whole = container(good + [envelope("c", None, product(3), 3)], codec="null")
    write(landing / "b.avro", whole[:-40])  # cut short inside its only block
    write(landing / "c.avro", b"this is not an Avro container")
    odd = [
        envelope("x", None, product(4), 4),
        envelope("c", None, None, 5),
        envelope("d", None, None, 6),
        envelope("c", None, product(7), 7, table=None),
        envelope("c", None, product(8, qty=None), 8),
    ]
    write(landing / "d.avro", container(odd))
    # A container of records that are no Debezium envelope.
    other = {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "int"}]}
    write(landing / "e.avro", container([{"x": 1}], schema=other))
    write(landing / "f.parquet", b"PAR1 not really parquet")
    events = decode_events(spark, FMT, landing)
    got = [(Path(e["file"]).name, e["file_pos"], e["reason"]) for e in events]
    assert got == [
        ("a.avro", 0, None),
        ("a.avro", 1, None),
        ("b.avro", 0, "bad Avro"),
        ("c.avro", 0, "bad Avro"),
        ("d.avro", 0, "unknown op"),
        ("d.avro", 1, "missing image"),
        ("d.avro", 2, "key unknown: delete with neither before nor after image"),
        ("d.avro", 3, "missing table"),
        ("d.avro", 4, None),
        ("e.avro", 0, "missing op"),
        ("f.parquet", 0, "bad Parquet"),
    ]
    output = tmp_path / "out"
    metrics, tables = replay(FMT, landing, key="id", output=output)
    assert sorted(r["id"] for r in tables["inventory.products"]) == [1, 2, 8]
    assert metrics["quarantine"]["reasons"] == {
        "bad Avro": 2,
        "unknown op": 1,
        "missing image": 1,
        "key unknown: delete with neither before nor after image": 1,
        "missing table": 1,
        "missing op": 1,
        "bad Parquet": 1,
    }
    quarantined = [
        json.loads(x) for p in (output / "_quarantine").glob("part-*") for x in p.read_text().splitlines()
    ]
    unknown = [q for q in quarantined if q["reason"] == "unknown op"]
    assert (
        unknown[0].get("line") is None and unknown[0]["file_pos"] == 0 and '"op":"x"' in unknown[0]["record"]
    )
    assert_events_add_up(metrics)


@pytest.mark.parametrize("typing", ["a branch per block", "joined on the file"])
def test_files_of_several_schemas_and_a_header_past_the_first_read_are_typed_by_their_own_schema(
    spark, tmp_path, monkeypatch, typing
):
    """Schema blocks are read on the driver, one per file: a header longer than the first read is
    read whole, and files of two schemas each keep their own types, whether each block's files
    decode as a branch of their own (a large landing) or pick their types by a join (a small one)."""
    from airflow_cdc_provider.formats.debezium import avro as decoder

    monkeypatch.setattr(decoder, "BRANCHES_MIN_BYTES", 0 if typing == "a branch per block" else 2**62)
    landing = tmp_path / "in"
    write(landing / "a.avro", container(EVERY_OP))
    long_doc = {**envelope_schema(), "doc": "x" * 70_000}  # the header passes 64 KiB
    write(landing / "b.avro", container(EVERY_OP, schema=long_doc))
    narrow = [c for c in PRODUCT_COLUMNS if c["name"] in ("id", "name", "price")]
    rows = [envelope("c", None, {"id": 9, "name": "cart", "price": Decimal("1.25")}, 99)]
    write(landing / "c.avro", container(rows, schema=envelope_schema(columns=narrow)))
    events = decode_events(spark, FMT, landing)
    by_file = {
        name: [e for e in events if Path(e["file"]).name == name] for name in ("a.avro", "b.avro", "c.avro")
    }
    assert [{k: e[k] for k in COMPARED} for e in by_file["b.avro"]] == [
        {k: e[k] for k in COMPARED} for e in by_file["a.avro"]
    ]
    assert by_file["b.avro"][0]["after"]["price"] == Decimal("12.50")
    (narrow_event,) = by_file["c.avro"]
    assert narrow_event["types"] == {"id": "int", "name": "string", "price": "decimal(10,2)"}
    assert narrow_event["after"] == {"id": 9, "name": "cart", "price": Decimal("1.25")}


def test_a_header_the_driver_cannot_read_quarantines_its_records(spark, tmp_path, monkeypatch):
    """The worker decodes a file whose schema block the driver did not get (a file replaced between
    the two reads): its records would go untyped, so they are quarantined instead."""
    from airflow_cdc_provider.formats.debezium import avro as decoder

    landing = tmp_path / "in"
    write(landing / "a.avro", container(EVERY_OP[:2]))
    unreadable = write(landing / "b.avro", container(EVERY_OP[:1])).read_bytes()
    read = decoder.container_block
    # The driver's header reads only (the workers are other processes); b.avro is one short read.
    monkeypatch.setattr(decoder, "container_block", lambda head: None if head == unreadable else read(head))
    events = decode_events(spark, FMT, landing)
    got = [(Path(e["file"]).name, e["file_pos"], e["kind"], e["reason"]) for e in events]
    assert got == [
        ("a.avro", 0, "change", None),
        ("a.avro", 1, "change", None),
        ("b.avro", 0, "quarantined", "bad Avro"),
    ]


def test_a_codec_without_its_library_stops_the_job_clearly(spark, tmp_path):
    data = container([envelope("c", None, product(1), 1)], codec="null")
    # The same file, declaring the snappy codec (fastavro needs cramjam for it, which is not installed).
    patched = data.replace(b"\x14avro.codec\x08null", b"\x14avro.codec\x0csnappy", 1)
    assert patched != data
    path = write(tmp_path / "in" / "snappy.avro", patched)
    with pytest.raises(Exception, match="cannot decode Avro file .*snappy.avro: snappy codec"):
        decode_events(spark, FMT, path)


# --- Parquet --------------------------------------------------------------------------------------------


def parquet_envelopes(records: list[dict], path: Path) -> Path:
    """Envelopes as a parquet-avro writer lays them out: Avro logical types as Parquet ones, the
    Avro schema in the footer (``parquet.avro.schema``)."""
    value = pa.struct(
        [
            ("id", pa.int32()),
            ("name", pa.string()),
            ("qty", pa.int32()),
            ("price", pa.decimal128(10, 2)),
            ("weight", pa.float64()),
            ("ratio", pa.float32()),
            ("active", pa.bool_()),
            ("photo", pa.binary()),
            ("made", pa.int32()),
            ("opens", pa.int64()),
            ("updated", pa.int64()),
            ("created", pa.int64()),
            ("nano", pa.int64()),
            ("zoned", pa.string()),
            ("made_c", pa.date32()),
            ("created_c", pa.timestamp("ms", tz="UTC")),
            ("amount", pa.struct([("scale", pa.int32()), ("value", pa.binary())])),
        ]
    )
    source_type = pa.struct(
        [
            (
                k,
                pa.int64()
                if k in ("ts_ms", "server_id", "pos", "thread")
                else pa.int32()
                if k == "row"
                else pa.string(),
            )
            for k in source(0)
        ]
    )
    table = pa.table(
        {
            "before": pa.array([r["before"] for r in records], value),
            "after": pa.array([r["after"] for r in records], value),
            "source": pa.array([r["source"] for r in records], source_type),
            "op": [r["op"] for r in records],
            "ts_ms": pa.array([r["ts_ms"] for r in records], pa.int64()),
        }
    )
    table = table.replace_schema_metadata({"parquet.avro.schema": json.dumps(envelope_schema())})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def test_parquet_landing_gives_the_same_events_and_snapshot(spark, replay, tmp_path):
    avro = write(tmp_path / "avro" / "topic+0+0000000000.avro", container(EVERY_OP))
    parquet = parquet_envelopes(EVERY_OP, tmp_path / "parquet" / "topic+0+0000000000.snappy.parquet")
    from_avro = decode_events(spark, FMT, avro)
    from_parquet = decode_events(spark, FMT, parquet)
    # Parquet names a Connect Timestamp by its own timestamp type: read as µs, the same instant.
    assert [{k: e[k] for k in COMPARED if k != "types"} for e in from_parquet] == [
        {k: e[k] for k in COMPARED if k != "types"} for e in from_avro
    ]
    assert from_parquet[0]["types"] == from_avro[0]["types"]
    metrics, tables = replay(FMT, tmp_path / "parquet", T0 + 30_000, key="id")
    assert sorted(tables["inventory.products"], key=lambda r: r["id"]) == expected_rows()
    assert metrics["events"]["applied"] == 9 and metrics["events"]["after_as_of"] == 1
    assert_events_add_up(metrics)


def test_parquet_without_an_avro_schema_is_typed_by_its_own_columns(spark, tmp_path):
    table = pa.table(
        {
            "before": pa.array([None], pa.struct([("id", pa.int64()), ("price", pa.decimal128(6, 3))])),
            "after": pa.array(
                [{"id": 5, "price": Decimal("1.250")}],
                pa.struct([("id", pa.int64()), ("price", pa.decimal128(6, 3))]),
            ),
            "source": pa.array([{"db": "shop", "table": "items", "ts_ms": T0}]),
            "op": ["c"],
        }
    )
    path = tmp_path / "in" / "items.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path)
    (event,) = decode_events(spark, FMT, path)
    assert (event["table"], event["op"], event["event_ms"]) == ("shop.items", "insert", T0)
    assert event["after"] == {"id": 5, "price": Decimal("1.250")}
    assert event["types"] == {"id": "bigint", "price": "decimal(6,3)"}

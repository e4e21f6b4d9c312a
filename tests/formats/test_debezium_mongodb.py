"""debezium-mongodb: the Paimon conformance capture, Kafka key lines, extended JSON, partial updates, quarantine."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from tests.conftest import CONFORMANCE, assert_events_add_up, decode_events, write_jsonl

from reference.records.debezium_mongodb import T, value

FMT = "debezium-mongodb"
PAIMON = CONFORMANCE / "paimon" / "debezium-bson" / "table" / "event"
LICENCE_LINES = 17  # each Paimon file starts with a 17-line /* ... */ ASF licence comment
OID = "67ab25755c0d5ac87eb8c632"


def key(id_json: str) -> str:
    """The Kafka key line Debezium writes: ``id`` is the extended JSON of ``_id``."""
    return json.dumps({"id": id_json})


def ms_time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).replace(tzinfo=None)


# --- conformance corpus -----------------------------------------------------------------------------


def _paimon_row(expected: dict) -> dict:
    """Paimon flattens every value to text; the snapshot keeps types: the same values, typed."""
    return {
        "_id": expected["_id"],
        "created_at": int(expected["created_at"]),  # $numberLong -> bigint
        "created_by": expected["created_by"],
        "tags": expected["tags"],  # arrays -> their JSON text, exactly Paimon's
        "updated_at": ms_time(int(expected["updated_at"])),  # $date (epoch ms) -> timestamp
    }


@pytest.mark.corpus
def test_paimon_insert_then_update_then_delete(replay, spark, tmp_path):
    expected = json.loads((PAIMON / "event.expected.json").read_text())
    # All six captured values share one source position (ts_ms 1739321992000, ord 28): only the
    # landing orders them, so the files are landed under names that sort insert, update, delete.
    landing = tmp_path / "landing"
    landing.mkdir()
    for i, (step, name) in enumerate(zip(expected["steps"], ("insert", "update", "delete")), start=1):
        shutil.copy(PAIMON / f"event-{name}.txt", landing / f"{i}-event-{name}.txt")
        metrics, tables = replay(FMT, landing)
        assert list(tables) == ["bigdata_test.sync_test_table"]
        rows = tables["bigdata_test.sync_test_table"]
        assert rows == [_paimon_row(r) for r in step["rows"]], f"after {name}"
        # Licence lines are quarantined, never lost; every value's Kafka key line is counted as ignored.
        assert metrics["quarantine"]["reasons"] == {"not JSON": LICENCE_LINES * i}
        assert metrics["ignored"] == {"Kafka key": {1: 1, 2: 3, 3: 6}[i]}
        assert metrics["events"]["applied"] + metrics["events"]["duplicates"] == {1: 1, 2: 3, 3: 6}[i]
        assert_events_add_up(metrics)
        if i == 2:
            schema = spark.read.parquet(metrics["tables"]["bigdata_test.sync_test_table"]["path"]).schema
            assert [(f.name, f.dataType.simpleString()) for f in schema] == [
                ("_id", "string"),
                ("created_at", "bigint"),
                ("created_by", "string"),
                ("tags", "string"),
                ("updated_at", "timestamp"),
            ]
    assert metrics["rows"] == expected["row_count"] == 0


@pytest.mark.corpus
def test_paimon_deletes_take_their_key_from_the_kafka_key_line(spark):
    events = [e for e in decode_events(spark, FMT, PAIMON / "event-delete.txt") if e["kind"] == "change"]
    # {"$oid": ...} and a bare JSON string name the same _id; the third delete carries its before image.
    assert [(e["op"], e["before"]["_id"], e["after"]) for e in events] == [("delete", OID, None)] * 3
    assert events[2]["before"]["created_by"] == "peter"
    assert [e["line"] for e in events] == [19, 21, 23]


def test_extended_json_values_become_typed_columns(spark, replay, tmp_path):
    doc = {
        "_id": {"$oid": OID},
        "age": 25,
        "long": {"$numberLong": "1735934393769"},
        "int": {"$numberInt": "7"},
        "double": {"$numberDouble": "1.5"},
        "nan": {"$numberDouble": "NaN"},
        "price": {"$numberDecimal": "3.14"},
        "created": {"$date": 1735934393769},
        "created_iso": {"$date": "2024-09-02T08:00:00Z"},
        "created_long": {"$date": {"$numberLong": "1735934393769"}},
        "register": {"$timestamp": {"t": 1736997330, "i": 2}},
        "flag": True,
        "nothing": None,
        "undefined": {"$undefined": True},
        "regex": {"$regularExpression": {"pattern": "^pass$", "options": "i"}},
        "symbol": {"$symbol": "sym"},
        "min": {"$minKey": 1},
        "code": {"$code": "function(){}"},
        "binary": {"$binary": "uE2/4v5MSVOiJZkOo3APKQ==", "$type": "0"},
        "uuid": {"$binary": {"base64": "uE2/4v5MSVOiJZkOo3APKQ==", "subType": "04"}},
        "tags": ["a", {"$numberLong": "2"}],
        "context": {
            "city": "Shanghai",
            "location": {"lat": 31.2304, "lon": {"$numberDouble": "121.4737"}},
            "end": {"$numberLong": "1735934393769"},
            "at": {"$date": {"$numberLong": "5"}},
            "nan": {"$numberDouble": "NaN"},
        },
    }
    path = write_jsonl(tmp_path / "in" / "a.json", [value("c", after=doc)])
    (event,) = decode_events(spark, FMT, path)
    assert event["types"] == {
        "_id": "string",
        "price": "decimal(3,2)",
        "created": "timestamp",
        "created_iso": "timestamp",
        "created_long": "timestamp",
        "register": "timestamp",
        "flag": "boolean",
        "regex": "string",
        "symbol": "string",
        "min": "string",
        "code": "string",
        "binary": "binary",
        "uuid": "string",
        "tags": "string",
        "context": "string",
    }
    metrics, tables = replay(FMT, path)
    (row,) = tables["shop.orders"]
    assert row["nan"] != row["nan"]  # NaN
    row.pop("nan")
    assert row == {
        "_id": OID,
        "age": 25,
        "long": 1735934393769,
        "int": 7,
        "double": 1.5,
        "price": Decimal("3.14"),
        "created": ms_time(1735934393769),
        "created_iso": datetime(2024, 9, 2, 8, 0),
        "created_long": ms_time(1735934393769),
        "register": ms_time(1736997330000),
        "flag": True,
        "nothing": None,
        "undefined": None,
        "regex": "/^pass$/i",
        "symbol": "sym",
        "min": "MinKey",
        "code": "function(){}",
        "binary": bytearray(bytes.fromhex("b84dbfe2fe4c4953a225990ea3700f29")),
        "uuid": "b84dbfe2-fe4c-4953-a225-990ea3700f29",
        "tags": '["a",2]',
        # Nested documents keep their field order; the wrappers inside become plain values.
        "context": '{"city":"Shanghai","location":{"lat":31.2304,"lon":121.4737},"end":1735934393769,'
        '"at":5,"nan":"NaN"}',
    }
    assert_events_add_up(metrics)


def test_every_op_key_lines_snapshot_and_partial_updates(spark, replay, tmp_path):
    a = {"_id": 1, "name": "a", "qty": 1, "note": "n"}
    lines = [
        key('{"$numberLong": "1"}'),  # a key line before its value
        value("r", after={**a, "_id": {"$numberLong": "1"}}, snapshot="true", ts_ms=T, ord_=1),
        value("c", after={"_id": 2, "name": "b", "qty": 2}, ts_ms=T + 1000, ord_=1),
        # 2.x change streams without the full document: the changed fields and the removed ones.
        key("1"),
        value(
            "u",
            ts_ms=T + 2000,
            updateDescription={"updatedFields": json.dumps({"qty": 5}), "removedFields": ["note"]},
        ),
        # 1.x oplog: $set/$unset patch and the key in `filter`.
        value("u", ts_ms=T + 3000, patch=json.dumps({"$v": 1, "$set": {"name": "bb"}}), filter='{"_id": 2}'),
        # 1.x replacement: the patch is the whole document.
        value("u", ts_ms=T + 4000, patch=json.dumps({"_id": 3, "name": "c"}), filter='{"_id": 3}'),
        # A delete with neither before nor after: the key line names the row.
        key("2"),
        value("d", ts_ms=T + 5000),
        value("d", ts_ms=T + 6000, filter='{"_id": 9}'),  # 1.x delete of a key never there
        "null",  # the tombstone after a delete
    ]
    path = write_jsonl(tmp_path / "in" / "a.json", lines)
    events = decode_events(spark, FMT, path)
    got = [(e["kind"], e["op"] or e["reason"], e["partial"], e["before"], e["after"]) for e in events]
    assert got == [
        ("ignored", "Kafka key", False, None, None),
        ("change", "read", False, None, {"_id": 1, "name": "a", "qty": 1, "note": "n"}),
        ("change", "insert", False, None, {"_id": 2, "name": "b", "qty": 2}),
        ("ignored", "Kafka key", False, None, None),
        ("change", "update", True, None, {"_id": 1, "qty": 5, "note": None}),
        ("change", "update", True, None, {"_id": 2, "name": "bb"}),
        ("change", "update", False, None, {"_id": 3, "name": "c"}),
        ("ignored", "Kafka key", False, None, None),
        ("change", "delete", False, {"_id": 2}, None),
        ("change", "delete", False, {"_id": 9}, None),
        ("ignored", "tombstone", False, None, None),
    ]
    assert events[1]["event_ms"] == T and events[1]["log_pos"] == [T, 1]
    metrics, tables = replay(FMT, path)
    assert sorted(tables["shop.orders"], key=lambda r: r["_id"]) == [
        {"_id": 1, "name": "a", "qty": 5, "note": None},
        {"_id": 3, "name": "c", "qty": None, "note": None},
    ]
    t = metrics["tables"]["shop.orders"]
    assert {
        k: t[k] for k in ("inserts", "updates", "deletes", "updates_of_unknown_key", "deletes_of_unknown_key")
    } == {
        "inserts": 2,
        "updates": 3,
        "deletes": 1,
        "updates_of_unknown_key": 1,
        "deletes_of_unknown_key": 1,
    }
    assert metrics["ignored"] == {"Kafka key": 3, "tombstone": 1}
    assert_events_add_up(metrics)


def test_key_lines_pair_with_their_values_across_split_boundaries(spark, replay, tmp_path):
    """A file over the whole-read limit is read in splits; a key line ending one split still names
    the delete that starts the next (a split's records are numbered within it, so pairing cannot
    rely on consecutive positions)."""
    from airflow_cdc_provider.spark.reader import WHOLE_FILE_MAX_BYTES

    split_bytes = 64 * 1024
    n = 700
    inserts = [value("c", after={"_id": i, "v": "x"}, ts_ms=T + i, ord_=1) for i in range(n)]
    pairs = []
    for i in range(n):
        # JSON whitespace pads the key line (still a key line): most boundaries fall inside one.
        pairs += [key(str(i))[:-1] + " " * 2000 + "}", value("d", ts_ms=T + n + i, ord_=1)]
    lines = inserts + pairs
    path = write_jsonl(tmp_path / "in" / "a.json", lines)
    assert path.stat().st_size > WHOLE_FILE_MAX_BYTES
    offsets, at = [], 0
    for line in lines:
        offsets.append(at)
        at += len(line.encode()) + 1
    straddled = sum(
        1
        for i in range(len(inserts), len(lines), 2)
        if offsets[i] // split_bytes != offsets[i + 1] // split_bytes
    )
    assert straddled > 3  # the test only means something when key and value sit in different splits
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(split_bytes))
    try:
        metrics, tables = replay(FMT, path)
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    assert tables == {"shop.orders": []}
    t = metrics["tables"]["shop.orders"]
    assert (t["inserts"], t["deletes"], t["deletes_of_unknown_key"], t["rows"]) == (n, n, 0, 0)
    assert metrics["ignored"] == {"Kafka key": n}
    assert metrics["events"]["quarantined"] == 0
    assert_events_add_up(metrics)


def test_out_of_order_files_duplicates_and_after_as_of(replay, tmp_path):
    late = [
        value("u", after={"_id": "k1", "v": "second"}, ts_ms=T + 2000, ord_=1),
        value("c", after={"_id": "k2", "v": "late"}, ts_ms=T + 60_000, ord_=1),  # after AS OF
        # Same second, later oplog increment: ord orders it after the update above.
        value("u", after={"_id": "k1", "v": "third"}, ts_ms=T + 2000, ord_=2),
    ]
    early = [value("c", after={"_id": "k1", "v": "first"}, ts_ms=T, ord_=1)]
    write_jsonl(tmp_path / "in" / "a.json", late[::-1])
    write_jsonl(tmp_path / "in" / "b.json", early + early)  # delivered twice
    metrics, tables = replay(FMT, tmp_path / "in", as_of=T + 30_000)
    assert tables == {"shop.orders": [{"_id": "k1", "v": "third"}]}
    assert metrics["events"] == {
        "read": 5,
        "applied": 3,
        "after_as_of": 1,
        "ignored": 0,
        "duplicates": 1,
        "quarantined": 0,
    }
    assert_events_add_up(metrics)


def test_malformed_records_are_quarantined_with_their_reason(spark, replay, tmp_path):
    lines = [
        (value("c", after={"_id": 1, "name": "ok"}), None),
        (value(None, after={"_id": 2}), "missing op"),
        (value("x", after={"_id": 3}), "unknown op"),
        (value("c", after={"_id": 4}, collection=None), "missing table"),
        (value("c", after="[1, 2]"), "row image not an object"),
        (value("c", after="not json"), "row image not an object"),
        (value("c", after={"_id": 5, "n": {"$numberLong": "abc"}}), "type mismatch"),
        (value("c", after={"_id": 6, "d": {"$numberDecimal": "NaN"}}), "type mismatch"),
        (
            value("u", updateDescription={"updatedFields": json.dumps({"a.b": 1})}, filter='{"_id": 7}'),
            "update of a nested field without the full document",
        ),
        (
            value(
                "u", patch=json.dumps({"$v": 2, "diff": {"sarr": {"a": True, "u0": 1}}}), filter='{"_id": 7}'
            ),
            "update of a nested field without the full document",
        ),
        (value("c"), "missing image"),
        (value("u"), "missing image"),
        (value("d"), "key unknown: delete with neither before nor after image"),
        (value("c", after={"name": "no _id"}), "missing key"),
        ("[1, 2]", "not a JSON object"),
        ("not json", "not JSON"),
    ]
    path = tmp_path / "in" / "bad.json"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(line for line, _ in lines) + '\n{"op": "c", "after": "{\\"_id')
    events = decode_events(spark, FMT, path)
    assert [(e["kind"], e["reason"]) for e in events] == [
        ("change", None),
        *[("quarantined", r) if r != "missing key" else ("change", None) for _, r in lines[1:]],
        ("quarantined", "truncated"),
    ]
    metrics, tables = replay(FMT, path)
    assert tables == {"shop.orders": [{"_id": 1, "name": "ok"}]}
    assert metrics["quarantine"]["reasons"] == {
        "missing op": 1,
        "unknown op": 1,
        "missing table": 1,
        "row image not an object": 2,
        "type mismatch": 2,
        "update of a nested field without the full document": 2,
        "missing image": 2,
        "key unknown: delete with neither before nor after image": 1,
        "missing key": 1,
        "not a JSON object": 1,
        "not JSON": 1,
        "truncated": 1,
    }
    assert metrics["events"]["read"] == 17 and metrics["events"]["quarantined"] == 16
    assert_events_add_up(metrics)

"""datahub-blob: the seed's BLOB samples, the Paimon aliyun conformance files, update pairs, full load."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.conftest import CONFORMANCE, assert_events_add_up

from reference.records.datahub_blob import message

FMT = "datahub-blob"

# --- seed 003, "Sample JSON messages", copied verbatim (split only into Python string pieces) ---------

SEED_INSERT = (
    '{ "schema": { "dataColumn": [ { "name": "id", "type": "LONG" }, { "name": "name", "type": "STRING" }, '
    '{ "name": "comment", "type": "STRING" } ], "source": { "dbName": "example_db", "dbType": "MySQL", '
    '"tableName": "example_table_pk" }, "primaryKey": [ "id", "name" ] }, "payload": { "op": "INSERT", '
    '"after": { "dataColumn": { "name": "joe", "comment": "comment", "id": 1 } }, '
    '"sequenceId": "1605339516000000004", "timestamp": { "eventTime": 1605339932000, '
    '"systemTime": 1605339932736, "checkpointTime": 1605339932000 } }, "version": "0.0.1" }'
)
SEED_UPDATE_BEFORE = (
    '{ "schema": { "dataColumn": [ { "name": "id", "type": "LONG" }, { "name": "name", "type": "STRING" }, '
    '{ "name": "comment", "type": "STRING" } ], "source": { "dbName": "example_db", "dbType": "MySQL", '
    '"tableName": "example_table_pk" }, "primaryKey": [ "id", "name" ] }, "payload": { "op": "UPDATE_BEFOR", '
    '"before": { "dataColumn": { "name": "joe", "comment": "comment", "id": 1 } }, '
    '"sequenceId": "1605339516000000005", "timestamp": { "eventTime": 1605339934000, '
    '"systemTime": 1605339934951, "checkpointTime": 1605339934000 } }, "version": "0.0.1" }'
)
SEED_UPDATE_AFTER = (
    '{ "schema": { "dataColumn": [ { "name": "id", "type": "LONG" }, { "name": "name", "type": "STRING" }, '
    '{ "name": "comment", "type": "STRING" } ], "source": { "dbName": "example_db", "dbType": "MySQL", '
    '"tableName": "example_table_pk" }, "primaryKey": [ "id", "name" ] }, "payload": { "op": "UPDATE_AFTER", '
    '"after": { "dataColumn": { "name": "joe", "comment": "com1", "id": 1 } }, '
    '"sequenceId": "1605339516000000005", "timestamp": { "eventTime": 1605339934000, '
    '"systemTime": 1605339934951, "checkpointTime": 1605339934000 } }, "version": "0.0.1" }'
)
SEED_DELETE = (
    '{ "schema": { "dataColumn": [ { "name": "id", "type": "LONG" }, { "name": "name", "type": "STRING" }, '
    '{ "name": "comment", "type": "STRING" } ], "source": { "dbName": "example_db", "dbType": "MySQL", '
    '"tableName": "example_table_pk" }, "primaryKey": [ "id", "name" ] }, "payload": { "op": "DELETE", '
    '"before": { "dataColumn": { "name": "joe", "comment": "com1", "id": 1 } }, '
    '"sequenceId": "1605339516000000006", "timestamp": { "eventTime": 1605339937000, '
    '"systemTime": 1605339937671, "checkpointTime": 1605339937000 } }, "version": "0.0.1" }'
)
SEED_HEARTBEAT = (
    '{ "schema": {}, "payload": { "op": "MHEARTBEAT", "timestamp": { "eventTime": 1605339953629, '
    '"checkpointTime": 1605339953629 } }, "version": "0.0.1" }'
)
SEED_DDL = (
    '{ "schema": { "source": { "dbName": "example_db", "dbType": "MySQL", '
    '"tableName": "example_table_nopk" } }, "payload": { "op": "ALTER", "sequenceId": "1605339516000000035", '
    '"ddl": { "text": "alter table example_table_nopk add column holo text", '
    '"ddlMeta": "rO0ABXNyACljb20uYWxpYmFiYS5kaS5wbHVnaW4uY2VudGVyLm1ldGEuRERMTWV0YQLb5Cx/YWXtAgACTAAHZGRsVGV4'
    "dHQAEkxqYXZhL2xhbmcvU3RyaW5nO0wACXN0YXRlbWVudHQAKkxjb20vYWxpYmFiYS9mYXN0c3FsL3NxbC9hc3QvU1FMU3RhdGVtZW50"
    "O3hwdAAtYWx0ZXIgdGFibGUgdF9zaGl5dV9ub3BrIGFkZCBjb2x1bW4gaG9sbyB0ZXh0c3IAPGNvbS5hbGliYWJhLmZhc3RzcWwuc3Fs"
    "LmFzdC5zdGF0ZW1lbnQuU1FMQWx0ZXJUYWJsZVN0YXRlbWVudBQPP3vMUl2cAgAPSQAHYnVja2V0c1oABmlnbm9yZVoAF2ludmFsaWRh"
    "dGVHbG9iYWxJbmRleGVzWgAPbWVyZ2VTbWFsbEZpbGVzWgAHb2ZmbGluZVoABm9ubGluZVoADnJlbW92ZVBhdGl0aW5nWgATdXBkYXRl"
    "R2xvYmFsSW5kZXhlc1oAD3VwZ3JhZGVQYXRpdGluZ0wAC2NsdXN0ZXJlZEJ5dAAQTGphdmEvdXRpbC9MaXN0O0wABWl0ZW1zcQB+AAZM"
    "AAlwYXJ0aXRpb250ACxMY29tL2FsaWJhYmEvZmFzdHNxbC9zcWwvYXN0L1NRTFBhcnRpdGlvbkJ5O0wACHNvcnRlZEJ5cQB+AAZMAAx0"
    "YWJsZU9wdGlvbnNxAH4ABkwAC3RhYmxlU291cmNldAA6TGNvbS9hbGliYWJhL2Zhc3RzcWwvc3FsL2FzdC9zdGF0ZW1lbnQvU1FMRXhw"
    "clRhYmxlU291cmNlO3hyACxjb20uYWxpYmFiYS5mYXN0c3FsLnNxbC5hc3QuU1FMU3RhdGVtZW50SW1wbEOxUUDVCJMGAgADWgAJYWZ0"
    "ZXJTZW1pTAAGZGJUeXBldAAcTGNvbS9hbGliYWJhL2Zhc3RzcWwvRGJUeXBlO0wACWhlYWRIaW50c3EAfgAGeHIAKWNvbS5hbGliYWJh"
    "LmZhc3RzcWwuc3FsLmFzdC5TUUxPYmplY3RJbXBs5LvqLFggFVECAAVJAAxzb3VyY2VDb2x1bW5JAApzb3VyY2VMaW5lTAAKYXR0cmli"
    "dXRlc3QAD0xqYXZhL3V0aWwvTWFwO0wABGhpbnR0ACxMY29tL2FsaWJhYmEvZmFzdHNxbC9zcWwvYXN0L1NRTENvbW1lbnRIaW50O0wA"
    "BnBhcmVudHQAJ0xjb20vYWxpYmFiYS9mYXN0c3FsL3NxbC9hc3QvU1FMT2JqZWN0O3hwAAAAAAAAAABwcHAAfnIAGmNvbS5hbGliYWJh"
    "LmZhc3RzcWwuRGJUeXBlAAAAAAAAAAASAAB4cgAOamF2YS5sYW5nLkVudW0AAAAAAAAAABIAAHhwdAAFbXlzcWxwAAAAAAAAAAAAAAAA"
    "c3IAE2phdmEudXRpbC5BcnJheUxpc3R4gdIdmcdhnQMAAUkABHNpemV4cAAAAAB3BAAAAAB4c3EAfgAUAAAAAXcEAAAAAXNyADxjb20u"
    "YWxpYmFiYS5mYXN0c3FsLnNxbC5hc3Quc3RhdGVtZW50LlNRTEFsdGVyVGFibGVBZGRDb2x1bW4l5T6CFe//BAIABloAB2Nhc2NhZGVa"
    "AAVmaXJzdEwAC2FmdGVyQ29sdW1udAAlTGNvbS9hbGliYWJhL2Zhc3RzcWwvc3FsL2FzdC9TUUxOYW1lO0wAB2NvbHVtbnNxAH4ABkwA"
    "C2ZpcnN0Q29sdW1ucQB+ABhMAAhyZXN0cmljdHQAE0xqYXZhL2xhbmcvQm9vbGVhbjt4cQB+AAsAAAAAAAAAAHBwcQB+AA8AAHBzcQB+"
    "ABQAAAABdwQAAAABc3IAOWNvbS5hbGliYWJhLmZhc3RzcWwuc3FsLmFzdC5zdGF0ZW1lbnQuU1FMQ29sdW1uRGVmaW5pdGlvbst0gLKZ"
    "0qAtAgAmWgANYXV0b0luY3JlbWVudFoADGRpc2FibGVJbmRleFoAB3ByZVNvcnRJAAxwcmVTb3J0T3JkZXJaAAZzdG9yZWRaAAd2aXJ0"
    "dWFsWgAHdmlzaWJsZUwACGFubkluZGV4dAApTGNvbS9hbGliYWJhL2Zhc3RzcWwvc3FsL2FzdC9TUUxBbm5JbmRleDtMAAZhc0V4cHJ0"
    "ACVMY29tL2FsaWJhYmEvZmFzdHNxbC9zcWwvYXN0L1NRTEV4cHI7TAALY2hhcnNldEV4cHJxAH4AHkwADWNvbFByb3BlcnRpZXNxAH4A"
    "BkwAC2NvbGxhdGVFeHBycQB+AB5MAAdjb21tZW50cQB+AB5MAAtjb21wcmVzc2lvbnQALkxjb20vYWxpYmFiYS9mYXN0c3FsL3NxbC9h"
    "c3QvZXhwci9TUUxDaGFyRXhwcjtMAAtjb25zdHJhaW50c3EAfgAGTAAIZGF0YVR5cGV0AClMY29tL2FsaWJhYmEvZmFzdHNxbC9zcWwv"
    "YXN0L1NRTERhdGFUeXBlO0wABmRiVHlwZXEAfgAKTAALZGVmYXVsdEV4cHJxAH4AHkwACWRlbGltaXRlcnEAfgAeTAASZGVsaW1pdGVy"
    "VG9rZW5pemVycQB+AB5MAAZlbmFibGVxAH4AGUwABmVuY29kZXEAfgAfTAAGZm9ybWF0cQB+AB5MABBnZW5lcmF0ZWRBbGF3c0FzcQB+"
    "AB5MAAhpZGVudGl0eXQARExjb20vYWxpYmFiYS9mYXN0c3FsL3NxbC9hc3Qvc3RhdGVtZW50L1NRTENvbHVtbkRlZmluaXRpb24kSWRl"
    "bnRpdHk7TAASanNvbkluZGV4QXR0cnNFeHBycQB+AB5MAAhtYXBwZWRCeXEAfgAGTAAEbmFtZXEAfgAYTAAMbmxwVG9rZW5pemVycQB+"
    "AB5MAAhvblVwZGF0ZXEAfgAeTAAEcmVseXEAfgAZTAAMc2VxdWVuY2VUeXBldAAvTGNvbS9hbGliYWJhL2Zhc3RzcWwvc3FsL2FzdC9B"
    "dXRvSW5jcmVtZW50VHlwZTtMAARzdGVwcQB+AB5MAAdzdG9yYWdlcQB+AB5MAAl1bml0Q291bnRxAH4AHkwACXVuaXRJbmRleHEAfgAe"
    "TAAIdmFsaWRhdGVxAH4AGUwACXZhbHVlVHlwZXEAfgAeeHEAfgALAAAAAAAAAABwcHEAfgAaAAAAAAAAAAAAAHBwcHBwcHBzcQB+ABQA"
    "AAAAdwQAAAAAeHNyADpjb20uYWxpYmFiYS5mYXN0c3FsLnNxbC5hc3Quc3RhdGVtZW50LlNRTENoYXJhY3RlckRhdGFUeXBlqtJac/d+"
    "04cCAAVaAAloYXNCaW5hcnlMAAtjaGFyU2V0TmFtZXEAfgABTAAIY2hhclR5cGVxAH4AAUwAB2NvbGxhdGVxAH4AAUwABWhpbnRzcQB+"
    "AAZ4cgArY29tLmFsaWJhYmEuZmFzdHNxbC5zcWwuYXN0LlNRTERhdGFUeXBlSW1wbEWL29pc1gZFAgAJSgAObmFtZUhhc2hDb2RlNjRa"
    "AAh1bnNpZ25lZFoAEXdpdGhMb2NhbFRpbWVab25lWgAIemVyb2ZpbGxMAAlhcmd1bWVudHNxAH4ABkwABmRiVHlwZXEAfgAKTAAHaW5k"
    "ZXhCeXEAfgAeTAAEbmFtZXEAfgABTAAMd2l0aFRpbWVab25lcQB+ABl4cQB+AAsAAAAAAAAAAHBwcQB+ACP6BPTvGZVAfgAAAHNxAH4A"
    "FAAAAAB3BAAAAAB4cHB0AAR0ZXh0cABwcHBwcQB+ABJwcHBwcHBwcHBwc3IAMmNvbS5hbGliYWJhLmZhc3RzcWwuc3FsLmFzdC5leHBy"
    "LlNRTElkZW50aWZpZXJFeHBy3DXH1zvWbgkCAARKAApoYXNoQ29kZTY0TAAEbmFtZXEAfgABTAAOcmVzb2x2ZWRDb2x1bW5xAH4ADkwA"
    "E3Jlc29sdmVkT3duZXJPYmplY3RxAH4ADnhyACdjb20uYWxpYmFiYS5mYXN0c3FsLnNxbC5hc3QuU1FMRXhwckltcGxs2ypmFJxWrQIA"
    "AHhxAH4ACwAAAAAAAAAAcHBwQCnxzH5tIDl0AARob2xvcHBwcHBwcHBwcHBweHBweHBzcQB+ABQAAAAAdwQAAAAAeHNxAH4AFAAAAAB3"
    "BAAAAAB4c3IAOGNvbS5hbGliYWJhLmZhc3RzcWwuc3FsLmFzdC5zdGF0ZW1lbnQuU1FMRXhwclRhYmxlU291cmNlRHD7eYJ4eswCAAVM"
    "AAdjb2x1bW5zcQB+AAZMAARleHBycQB+AB5MAApwYXJ0aXRpb25zcQB+AAZMAAhzYW1wbGluZ3QAOExjb20vYWxpYmFiYS9mYXN0c3Fs"
    "L3NxbC9hc3Qvc3RhdGVtZW50L1NRTFRhYmxlU2FtcGxpbmc7TAAMc2NoZW1hT2JqZWN0dAAxTGNvbS9hbGliYWJhL2Zhc3RzcWwvc3Fs"
    "L3JlcG9zaXRvcnkvU2NoZW1hT2JqZWN0O3hyADhjb20uYWxpYmFiYS5mYXN0c3FsLnNxbC5hc3Quc3RhdGVtZW50LlNRTFRhYmxlU291"
    "cmNlSW1wbAqEMenTm5zUAgAESgAPYWxpYXNIYXNoQ29kZTY0TAAFYWxpYXNxAH4AAUwACWZsYXNoYmFja3EAfgAeTAAFaGludHNxAH4A"
    "BnhxAH4ACwAAAAAAAAAAcHBwAAAAAAAAAABwcHBwc3EAfgAqAAAAAAAAAABwcHEAfgA0NH7o4UvP9Dt0AAx0X3NoaXl1X25vcGtwcHBw"
    'cA==" }, "timestamp": { "eventTime": 1605342109000, "systemTime": 1605342109259, '
    '"checkpointTime": 1605342109000 } }, "version": "0.0.1" }'
)


def decode(spark, *paths: Path, **options) -> list[dict]:
    """Canonical events of ``paths`` in landing order, images as plain Python values."""
    from tests.conftest import decode_events

    return decode_events(spark, FMT, list(paths), **options)


def pick(events: list[dict], *fields: str) -> list[dict]:
    return [{f: e[f] for f in fields} for e in events]


def write_jsonl(path: Path, records: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8"
    )
    return path


SEED_TYPES = {"id": "bigint", "name": "string", "comment": "string"}
SEED_TABLE = "example_db.example_table_pk"


def land_seed(d: Path) -> Path:
    for i, sample in enumerate(
        (SEED_INSERT, SEED_UPDATE_BEFORE, SEED_UPDATE_AFTER, SEED_DELETE, SEED_HEARTBEAT, SEED_DDL), start=1
    ):
        write_jsonl(d / f"{i}.json", [sample])
    return d


# --- seed samples ------------------------------------------------------------------------------------


def test_seed_samples_decode_exactly(spark, tmp_path):
    events = decode(spark, land_seed(tmp_path / "seed"))
    assert pick(events, "table", "kind", "op", "reason", "event_ms", "log_pos", "key_cols", "types") == [
        {
            "table": SEED_TABLE,
            "kind": "change",
            "op": "insert",
            "reason": None,
            "event_ms": 1605339932000,
            "log_pos": [1605339516000000004],
            "key_cols": ["id", "name"],
            "types": SEED_TYPES,
        },
        {
            "table": SEED_TABLE,
            "kind": "ignored",
            "op": None,
            "reason": "update before image",
            "event_ms": 1605339934000,
            "log_pos": [1605339516000000005],
            "key_cols": None,
            "types": None,
        },
        {
            "table": SEED_TABLE,
            "kind": "change",
            "op": "update",
            "reason": None,
            "event_ms": 1605339934000,
            "log_pos": [1605339516000000005],
            "key_cols": ["id", "name"],
            "types": SEED_TYPES,
        },
        {
            "table": SEED_TABLE,
            "kind": "change",
            "op": "delete",
            "reason": None,
            "event_ms": 1605339937000,
            "log_pos": [1605339516000000006],
            "key_cols": ["id", "name"],
            "types": SEED_TYPES,
        },
        {
            "table": None,
            "kind": "ignored",
            "op": None,
            "reason": "heartbeat",
            "event_ms": 1605339953629,
            "log_pos": None,
            "key_cols": None,
            "types": None,
        },
        {
            "table": "example_db.example_table_nopk",
            "kind": "ignored",
            "op": None,
            "reason": "ddl",
            "event_ms": 1605342109000,
            "log_pos": [1605339516000000035],
            "key_cols": None,
            "types": None,
        },
    ]
    insert, _, update, delete, _, ddl = events
    assert (insert["before"], insert["after"]) == (None, {"id": 1, "name": "joe", "comment": "comment"})
    # The UPDATE_AFTER takes its before image from the UPDATE_BEFOR sharing its sequenceId.
    assert update["before"] == {"id": 1, "name": "joe", "comment": "comment"}
    assert update["after"] == {"id": 1, "name": "joe", "comment": "com1"} and update["partial"] is False
    assert (delete["before"], delete["after"]) == ({"id": 1, "name": "joe", "comment": "com1"}, None)
    assert ddl["raw"] == SEED_DDL and all(e["sub_pos"] == 0 for e in events)


@pytest.mark.parametrize(
    ("as_of", "rows", "applied", "after_as_of"),
    [
        (
            1605339935000,
            [{"id": 1, "name": "joe", "comment": "com1"}],
            2,
            1,
        ),  # after the update, before the delete
        ("2100-01-01T00:00:00Z", [], 3, 0),
    ],
)
def test_seed_samples_replay(replay, spark, tmp_path, as_of, rows, applied, after_as_of):
    metrics, tables = replay(FMT, land_seed(tmp_path / "seed"), as_of)
    assert tables == {SEED_TABLE: rows}
    # schema.dataColumn's order, the source table's; the images write name, comment, id.
    assert spark.read.parquet(metrics["tables"][SEED_TABLE]["path"]).columns == ["id", "name", "comment"]
    assert metrics["events"] == {
        "read": 6,
        "applied": applied,
        "after_as_of": after_as_of,
        "ignored": 3,
        "duplicates": 0,
        "quarantined": 0,
    }
    assert metrics["ignored"] == {"ddl": 1, "heartbeat": 1, "update before image": 1}
    assert_events_add_up(metrics)


# --- conformance: Paimon's aliyun-json fixtures ----------------------------------------------------------

ALIYUN = CONFORMANCE / "paimon" / "aliyun" / "table" / "event"


@pytest.mark.corpus
def test_paimon_aliyun_events_in_order(replay):
    expected = json.loads((ALIYUN / "event.expected.json").read_text())
    inputs = [CONFORMANCE / f for f in expected["source_files"]]  # insert, update-in-one, delete
    metrics, tables = replay(FMT, inputs)
    # The expected file holds the raw values; the declared types make them DOUBLE and DATE (timestamp).
    (raw,) = expected["rows"]
    typed = {
        "id": raw["id"],
        "val": float(raw["val"]),
        "name": raw["name"],
        "create_time": datetime.fromtimestamp(raw["create_time"] / 1000, timezone.utc).replace(tzinfo=None),
    }
    assert tables == {"bigdata_test.sync_test_table": [typed]}
    assert typed == {"id": 2, "val": 2.2, "name": "a", "create_time": datetime(2024, 11, 15, 8, 58, 34)}
    # Each file opens with a 17-line ASF licence comment (not JSON) and a blank line (an empty record).
    assert metrics["events"] == {
        "read": 57,
        "applied": 3,
        "after_as_of": 0,
        "ignored": 3,
        "duplicates": 0,
        "quarantined": 51,
    }
    assert metrics["quarantine"]["reasons"] == {"not JSON": 51}
    t = metrics["tables"]["bigdata_test.sync_test_table"]
    # The full-load insert (sequenceId -1) applies first; the DELETE is of id 1, which nothing inserted.
    assert (t["rows"], t["inserts"], t["updates"], t["deletes"], t["deletes_of_unknown_key"]) == (
        1,
        1,
        1,
        0,
        1,
    )
    assert_events_add_up(metrics)


@pytest.mark.corpus
def test_paimon_aliyun_messages_decode(spark):
    events = [
        e
        for e in decode(
            spark,
            ALIYUN / "event-insert.txt",
            ALIYUN / "event-update-in-one.txt",
            ALIYUN / "event-delete.txt",
        )
        if e["kind"] == "change"
    ]
    types = {"id": "bigint", "val": "double", "name": "string", "create_time": "timestamp"}
    ts = datetime(2024, 11, 15, 8, 58, 34, tzinfo=timezone.utc)
    assert pick(events, "op", "event_ms", "log_pos", "line", "before", "after", "types") == [
        {
            "op": "delete",
            "event_ms": 1731662085000,
            "log_pos": [1731663842292000000],
            "line": 19,
            "before": {"id": 1, "val": 1.1, "name": "a", "create_time": ts},
            "after": None,
            "types": types,
        },
        {
            "op": "read",
            "event_ms": -1,
            "log_pos": [-1],
            "line": 19,
            "before": None,
            "after": {"id": 2, "val": 1.1, "name": "a", "create_time": ts},
            "types": types,
        },
        {
            "op": "update",
            "event_ms": 1731662097000,
            "log_pos": [1731663842292000001],
            "line": 19,
            "before": {"id": 2, "val": 1.1, "name": "a", "create_time": ts},
            "after": {"id": 2, "val": 2.2, "name": "a", "create_time": ts},
            "types": types,
        },
    ]


# --- update pairs, full load, truncate, ignored ops ------------------------------------------------------


def test_update_pairs_full_load_order_and_truncate(spark, replay, tmp_path):
    d = tmp_path / "land"
    write_jsonl(
        d / "a_changes.json",
        [
            message("TRANSACTION_BEGIN", seq=None),
            message("INSERT", seq="100", after={"id": 1, "name": "changed after the full load"}),
            # A split update whose key changes (2 -> 20), spelled UPDATE_BEFOR as DataWorks writes it.
            message("UPDATE_BEFOR", seq="101", before={"id": 2, "name": "two"}),
            message("UPDATE_AFTER", seq="101", after={"id": 20, "name": "two"}),
            # The other spelling; the key stays.
            message("UPDATE_BEFORE", seq="102", before={"id": 3, "name": "three"}),
            message("UPDATE_AFTER", seq="102", after={"id": 3, "name": "three, updated"}),
            # One message with both images, key 4 -> 40.
            message(
                "UPDATE_AFTER", seq="103", before={"id": 4, "name": "four"}, after={"id": 40, "name": "four"}
            ),
            message("TRANSACTION_END", seq=None),
            message("MHEARTBEAT", seq=None, table=None),
            message("ALTER", seq="104", ddl={"text": "alter table t add column x int"}),
        ],
    )
    # Landed after the changes, but sequenceId -1 (full load) orders it before all of them.
    write_jsonl(
        d / "b_full_load.json",
        [
            message("INSERT", seq="-1", event_ms=-1, after={"id": i, "name": n})
            for i, n in ((1, "from the full load"), (2, "two"), (3, "three"), (4, "four"), (5, "five"))
        ]
        + [message("INSERT", seq="-1", event_ms=-1, table="t2", after={"id": 9, "name": "nine"})],
    )
    write_jsonl(
        d / "c_truncate.json", [message("TRUNCATE", seq="200", table="t2", ddl={"text": "truncate table t2"})]
    )

    events = decode(spark, d)
    assert [(e["kind"], e["op"] or e["reason"]) for e in events] == [
        ("ignored", "transaction marker"),
        ("change", "insert"),
        ("ignored", "update before image"),
        ("change", "update"),
        ("ignored", "update before image"),
        ("change", "update"),
        ("change", "update"),
        ("ignored", "transaction marker"),
        ("ignored", "heartbeat"),
        ("ignored", "ddl"),
        *[("change", "read")] * 6,
        ("change", "truncate"),
    ]
    assert [(e["before"], e["after"]) for e in events if e["op"] == "update"] == [
        ({"id": 2, "name": "two"}, {"id": 20, "name": "two"}),
        ({"id": 3, "name": "three"}, {"id": 3, "name": "three, updated"}),
        ({"id": 4, "name": "four"}, {"id": 40, "name": "four"}),
    ]
    assert events[-1]["table"] == "db.t2" and events[-1]["log_pos"] == [200]

    metrics, tables = replay(FMT, d)
    assert tables == {
        "db.t": [
            {"id": 1, "name": "changed after the full load"},
            {"id": 20, "name": "two"},
            {"id": 3, "name": "three, updated"},
            {"id": 40, "name": "four"},
            {"id": 5, "name": "five"},
        ],
        "db.t2": [],
    }
    assert metrics["events"] == {
        "read": 17,
        "applied": 11,
        "after_as_of": 0,
        "ignored": 6,
        "duplicates": 0,
        "quarantined": 0,
    }
    assert metrics["ignored"] == {"ddl": 1, "heartbeat": 1, "transaction marker": 2, "update before image": 2}
    assert metrics["tables"]["db.t2"]["truncates"] == 1
    assert_events_add_up(metrics)


def test_value_types(spark, replay, tmp_path):
    columns = {
        "id": "LONG",
        "name": "STRING",
        "score": "DOUBLE",
        "ok": "BOOLEAN",
        "ts": "DATE",
        "bin": "BYTES",
        "extra": "GEOMETRY",
    }
    path = write_jsonl(
        tmp_path / "types.json",
        [
            message(
                "INSERT",
                seq="1",
                columns=columns,
                after={
                    "id": 5,
                    "name": 42,
                    "score": "1.5",
                    "ok": True,
                    "ts": 1590315269000,
                    "bin": "dGV4dDEyMw==",
                    "extra": "POINT(1 2)",
                },
            ),
            message(
                "INSERT",
                seq="2",
                columns=columns,
                after={"id": "6", "name": None, "score": 2, "ok": "false", "ts": "1590315269001", "bin": ""},
            ),
        ],
    )
    first, second = decode(spark, path)
    assert first["types"] == {
        "id": "bigint",
        "name": "string",
        "score": "double",
        "ok": "boolean",
        "ts": "timestamp",
        "bin": "binary",
    }  # an unknown type is left to inference
    assert first["after"] == {
        "id": 5,
        "name": "42",
        "score": 1.5,
        "ok": True,
        "ts": datetime(2020, 5, 24, 10, 14, 29, tzinfo=timezone.utc),
        "bin": b"text123",
        "extra": "POINT(1 2)",
    }
    assert second["after"] == {
        "id": 6,
        "name": None,
        "score": 2.0,
        "ok": False,
        "ts": datetime(2020, 5, 24, 10, 14, 29, 1000, tzinfo=timezone.utc),
        "bin": b"",
    }

    metrics, tables = replay(FMT, path)
    assert tables == {
        "db.t": [  # rows sorted by their JSON text: "bin" first
            {
                "id": 6,
                "name": None,
                "score": 2.0,
                "ok": False,
                "ts": datetime(2020, 5, 24, 10, 14, 29, 1000),
                "bin": bytearray(b""),
                "extra": None,
            },
            {
                "id": 5,
                "name": "42",
                "score": 1.5,
                "ok": True,
                "ts": datetime(2020, 5, 24, 10, 14, 29),
                "bin": bytearray(b"text123"),
                "extra": "POINT(1 2)",
            },
        ]
    }
    assert_events_add_up(metrics)


# --- malformed records -------------------------------------------------------------------------------


def test_malformed_records_are_quarantined_with_their_reason(spark, replay, tmp_path):
    bytes_cols = {"id": "LONG", "name": "STRING", "bin": "BYTES"}
    no_table = message("INSERT", seq="9", after={"id": 9, "name": "x"})
    del no_table["schema"]["source"]["tableName"]
    bad_shape = message("INSERT", seq="10", after={"id": 10, "name": "x"})
    bad_shape["schema"]["dataColumn"] = "id LONG"
    list_image = message("INSERT", seq="6", after=None)
    list_image["payload"]["after"] = {"dataColumn": [1, 2]}
    path = write_jsonl(
        tmp_path / "bad.json",
        [
            message("INSERT", seq="1", after={"id": 1, "name": "good"}),
            {"schema": {}, "payload": {"sequenceId": "2"}, "version": "0.0.1"},  # no op
            message("UPSERT", seq="3", after={"id": 3, "name": "x"}),
            message("insert", seq="4", after={"id": 4, "name": "x"}),  # ops are case-sensitive
            message("INSERT", seq="5", after="x"),
            list_image,
            message("INSERT", seq="7", after=None),
            message("DELETE", seq="8"),  # neither image: no key to delete
            no_table,
            bad_shape,
            message(
                "INSERT", seq="11", columns=bytes_cols, after={"id": 11, "name": "x", "bin": "not base64!!"}
            ),
            message("INSERT", seq="12", after={"id": "twelve", "name": "x"}),
            message("INSERT", seq="x13", after={"id": 13, "name": "x"}),
            message("UPDATE_AFTER", seq="14", before="x", after={"id": 1, "name": "y"}),
            '{"schema": {}, "payload": ',
            message("UPDATE_AFTER", seq="15", after={"id": 1, "name": "updated"}),
        ],
    )
    events = decode(spark, path)
    assert pick(events, "line", "kind", "reason") == [
        {"line": 1, "kind": "change", "reason": None},
        {"line": 2, "kind": "quarantined", "reason": "missing op"},
        {"line": 3, "kind": "quarantined", "reason": "unknown op"},
        {"line": 4, "kind": "quarantined", "reason": "unknown op"},
        {"line": 5, "kind": "quarantined", "reason": "row image not an object"},
        {"line": 6, "kind": "quarantined", "reason": "row image not an object"},
        {"line": 7, "kind": "quarantined", "reason": "missing image"},
        {
            "line": 8,
            "kind": "quarantined",
            "reason": "key unknown: delete with neither before nor after image",
        },
        {"line": 9, "kind": "quarantined", "reason": "missing table"},
        {"line": 10, "kind": "quarantined", "reason": "type mismatch"},
        {"line": 11, "kind": "quarantined", "reason": "bad Base64"},
        {"line": 12, "kind": "quarantined", "reason": "type mismatch"},
        {"line": 13, "kind": "quarantined", "reason": "type mismatch"},
        {"line": 14, "kind": "quarantined", "reason": "row image not an object"},
        {"line": 15, "kind": "quarantined", "reason": "not JSON"},
        {"line": 16, "kind": "change", "reason": None},
    ]
    assert events[-1]["before"] is None  # no UPDATE_BEFOR landed: the engine upserts

    metrics, tables = replay(FMT, path)
    assert tables == {"db.t": [{"id": 1, "name": "updated"}]}
    assert metrics["events"] == {
        "read": 16,
        "applied": 2,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 14,
    }
    assert metrics["quarantine"]["reasons"] == {
        "bad Base64": 1,
        "key unknown: delete with neither before nor after image": 1,
        "missing image": 1,
        "missing op": 1,
        "missing table": 1,
        "not JSON": 1,
        "row image not an object": 3,
        "type mismatch": 3,
        "unknown op": 2,
    }
    assert_events_add_up(metrics)

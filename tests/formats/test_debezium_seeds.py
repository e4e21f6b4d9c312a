"""The samples of seed 000 (Lindorm Debezium format) and 001 (Debezium JSON, CDL 2.0), exact rows out."""

from __future__ import annotations

import copy

from tests.conftest import assert_events_add_up, write_jsonl

SOURCE = {
    "version": "v1.0",
    "db": "ld-xxxx",
    "namespace": "default",
    "table": "customers",
    "ts_ms": 1465491411807,
}

# Seed 000, "Data format description": payload with a schema block (after the payload).
FORMAT_DESCRIPTION = {
    "payload": {
        "op": "u",
        "ts_ms": 1465491411815,
        "before": {"id": 1004, "name": "Jane"},
        "after": {"id": 1004, "name": "Anne"},
        "source": SOURCE,
    },
    "schema": {
        "type": "struct",
        "fields": [
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": False, "field": "ts_ms"},
            {
                "type": "struct",
                "fields": [
                    {"type": "int32", "optional": False, "field": "id"},
                    {"type": "string", "optional": False, "field": "name"},
                ],
                "optional": True,
                "field": "before",
            },
            {
                "type": "struct",
                "fields": [
                    {"type": "int32", "optional": False, "field": "id"},
                    {"type": "string", "optional": False, "field": "name"},
                ],
                "optional": True,
                "field": "after",
            },
            {
                "type": "struct",
                "fields": [
                    {"type": "string", "optional": False, "field": "version"},
                    {"type": "string", "optional": False, "field": "db"},
                    {"type": "string", "optional": False, "field": "namespace"},
                    {"type": "string", "optional": False, "field": "table"},
                    {"type": "int64", "optional": False, "field": "ts_ms"},
                ],
                "optional": False,
                "field": "source",
            },
        ],
        "optional": False,
    },
}
INSERT = {
    "schema": {},
    "payload": {
        "op": "c",
        "ts_ms": 1465491411815,
        "before": None,
        "after": {"id": "1004", "first_name": "Anne", "last_name": "Kretchmar"},
        "source": SOURCE,
    },
}
UPDATE = {
    "schema": {},
    "payload": {
        "op": "u",
        "ts_ms": 1465491411815,
        "before": {"id": "1004", "first_name": "Anne Marie", "last_name": "Kretchmar"},
        "after": {"id": "1004", "first_name": "Anne", "last_name": "Kretchmar"},
        "source": SOURCE,
    },
}
DELETE = {
    "schema": {},
    "payload": {
        "op": "d",
        "ts_ms": 1465491411815,
        "before": {"id": "1004", "first_name": "Anne Marie", "last_name": "Kretchmar"},
        "after": None,
        "source": SOURCE,
    },
}
COLUMN_DELETION = {
    "schema": {},
    "payload": {
        "op": "u",
        "ts_ms": 1465491411815,
        "before": {"id": "1004", "first_name": "Anne Marie", "last_name": "Kretchmar"},
        "after": {"id": "1004", "first_name": "Anne Marie"},
        "source": SOURCE,
    },
}
HBASE_INSERT = {
    "schema": {},
    "payload": {
        "op": "c",
        "ts_ms": 1725258859839,
        "before": None,
        "after": {"ROW": "dXNlcjE=", "f_name": "bHVja3k="},
        "source": {
            "version": "v2.0",
            "db": "ld-xxxx",
            "namespace": "default",
            "table": "customers",
            "ts_ms": 1725258833727,
        },
    },
}

# Seed 001, "A sample in Debezium JSON format" (CDL message_version 2.0), verbatim.
CDL_DEBEZIUM_2 = '{"schema":{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int64","optional":true,"field":"count1"},{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"name":"com.xxx.cdc.data.timestamp","field":"time1"},{"type":"string","optional":true,"name":"com.xxx.cdc.data.Decimal","field":"decimalNum"}],"optional":true,"name":"before","field":"before"},{"type":"struct","fields":[{"type":"int64","optional":true,"field":"count1"},{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"name":"com.xxx.cdc.data.timestamp","field":"time1"},{"type":"string","optional":true,"name":"com.xxx.cdc.data.Decimal","field":"decimalNum"}],"optional":true,"name":"data","field":"after"},{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,last,false"},"default":"false","field":"snapshot"},{"type":"string","optional":false,"field":"db"},{"type":"string","optional":false,"field":"schema"},{"type":"string","optional":false,"field":"table"},{"type":"int64","optional":true,"field":"txId"},{"type":"int64","optional":true,"field":"lsn"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source"},{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":false,"field":"message_version"},{"type":"string","optional":false,"field":"message_type"},{"type":"string","optional":true,"field":"LOB_COLUMNS"},{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":true,"name":"unique","field":"unique"}],"optional":false,"name":"public.ct_pg2hudi"},"payload":{"before":null,"after":{"count1":14,"id":35,"time1":null,"decimalNum":null},"source":{"version":"1.4.0.Final","connector":"postgresql","name":"cdl","ts_ms":1707048891235,"snapshot":"false","db":"cdl","schema":"public","table":"ct_pg2hudi","txId":57227663,"lsn":163955586912},"op":"c","ts_ms":1707048984208,"message_version":"2.0","message_type":"0","LOB_COLUMNS":null,"unique":{"id":35}}}'


def test_format_description_sample_with_schema_block(replay, tmp_path):
    metrics, tables = replay(
        "debezium-json", write_jsonl(tmp_path / "in" / "a.json", [FORMAT_DESCRIPTION]), key="id"
    )
    assert tables == {"default.customers": [{"id": 1004, "name": "Anne"}]}
    t = metrics["tables"]["default.customers"]
    assert (t["rows"], t["updates"], t["updates_of_unknown_key"]) == (1, 1, 1)
    assert_events_add_up(metrics)


def test_insert_sample(replay, tmp_path):
    metrics, tables = replay("debezium-json", write_jsonl(tmp_path / "in" / "a.json", [INSERT]), key="id")
    assert tables == {"default.customers": [{"id": "1004", "first_name": "Anne", "last_name": "Kretchmar"}]}
    assert metrics["events"] == {
        "read": 1,
        "applied": 1,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 0,
    }


def test_update_sample_of_a_key_never_inserted_creates_the_row(replay, tmp_path):
    metrics, tables = replay("debezium-json", write_jsonl(tmp_path / "in" / "a.json", [UPDATE]), key="id")
    assert tables == {"default.customers": [{"id": "1004", "first_name": "Anne", "last_name": "Kretchmar"}]}
    assert metrics["tables"]["default.customers"]["updates_of_unknown_key"] == 1


def test_row_delete_sample_of_an_unknown_key_changes_nothing(replay, tmp_path):
    metrics, tables = replay("debezium-json", write_jsonl(tmp_path / "in" / "a.json", [DELETE]), key="id")
    assert tables == {"default.customers": []}
    t = metrics["tables"]["default.customers"]
    assert (t["rows"], t["deletes"], t["deletes_of_unknown_key"]) == (0, 0, 1)
    assert metrics["events"]["applied"] == 1
    assert_events_add_up(metrics)


def test_insert_then_delete_samples(replay, tmp_path):
    later_delete = copy.deepcopy(DELETE)
    later_delete["payload"]["source"]["ts_ms"] += 1
    metrics, tables = replay(
        "debezium-json", write_jsonl(tmp_path / "in" / "a.json", [INSERT, later_delete]), key="id"
    )
    assert tables == {"default.customers": []}
    t = metrics["tables"]["default.customers"]
    assert (t["inserts"], t["deletes"], t["deletes_of_unknown_key"]) == (1, 1, 0)


def test_column_deletion_sample_drops_the_column_value(replay, tmp_path):
    later = copy.deepcopy(COLUMN_DELETION)
    later["payload"]["source"]["ts_ms"] += 1
    metrics, tables = replay(
        "debezium-json", write_jsonl(tmp_path / "in" / "a.json", [INSERT, later]), key="id"
    )
    # Debezium images are full: the omitted column becomes null (and, held by no row, leaves the table).
    assert tables == {"default.customers": [{"id": "1004", "first_name": "Anne Marie"}]}
    assert_events_add_up(metrics)


def test_column_deletion_keeps_the_column_for_other_rows(replay, tmp_path):
    other = copy.deepcopy(INSERT)
    other["payload"]["after"]["id"] = "1005"
    later = copy.deepcopy(COLUMN_DELETION)
    later["payload"]["source"]["ts_ms"] += 1
    _, tables = replay(
        "debezium-json", write_jsonl(tmp_path / "in" / "a.json", [INSERT, other, later]), key="id"
    )
    assert tables == {
        "default.customers": [
            {"id": "1004", "first_name": "Anne Marie", "last_name": None},
            {"id": "1005", "first_name": "Anne", "last_name": "Kretchmar"},
        ]
    }


def test_hbase_insert_sample_binary_by_default_keyed_by_row(replay, tmp_path):
    metrics, tables = replay("debezium-json", write_jsonl(tmp_path / "in" / "a.json", [HBASE_INSERT]))
    assert tables == {"default.customers": [{"ROW": bytearray(b"user1"), "f_name": bytearray(b"lucky")}]}
    assert metrics["tables"]["default.customers"]["inserts"] == 1


def test_hbase_insert_sample_as_text(replay, tmp_path):
    _, tables = replay(
        "debezium-json", write_jsonl(tmp_path / "in" / "a.json", [HBASE_INSERT]), binary_as_text=True
    )
    assert tables == {"default.customers": [{"ROW": "user1", "f_name": "lucky"}]}


def test_hbase_bad_base64_is_quarantined(replay, tmp_path):
    bad = copy.deepcopy(HBASE_INSERT)
    bad["payload"]["after"]["f_name"] = "not base64!!"
    metrics, tables = replay("debezium-json", write_jsonl(tmp_path / "in" / "a.json", [HBASE_INSERT, bad]))
    assert metrics["quarantine"]["reasons"] == {"bad Base64": 1}
    assert metrics["events"]["quarantined"] == 1
    assert_events_add_up(metrics)


def test_cdl_message_version_2_sample_typed_and_keyed_by_unique(replay, tmp_path):
    metrics, tables = replay("debezium-json", write_jsonl(tmp_path / "in" / "a.json", [CDL_DEBEZIUM_2]))
    assert tables == {"cdl.public.ct_pg2hudi": [{"count1": 14, "id": 35, "time1": None, "decimalNum": None}]}
    t = metrics["tables"]["cdl.public.ct_pg2hudi"]
    assert (t["inserts"], t["last_event_ms"]) == (1, 1707048891235)


def test_cdl_message_version_2_types_come_from_the_schema(replay, spark, tmp_path):
    metrics, _ = replay("debezium-json", write_jsonl(tmp_path / "in" / "a.json", [CDL_DEBEZIUM_2]))
    schema = spark.read.parquet(metrics["tables"]["cdl.public.ct_pg2hudi"]["path"]).schema
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields] == [
        ("count1", "bigint"),
        ("id", "int"),
        ("time1", "string"),
        ("decimalNum", "string"),
    ]


def test_heartbeat_with_a_schema_block_is_ignored(replay, tmp_path):
    heartbeat = {
        "schema": {"type": "struct", "fields": [{"type": "int64", "field": "ts_ms"}]},
        "payload": {"ts_ms": 1725260000000},
    }
    metrics, tables = replay(
        "debezium-json", write_jsonl(tmp_path / "in" / "a.json", [heartbeat, INSERT]), key="id"
    )
    assert tables == {"default.customers": [{"id": "1004", "first_name": "Anne", "last_name": "Kretchmar"}]}
    assert metrics["ignored"] == {"heartbeat": 1}
    assert_events_add_up(metrics)

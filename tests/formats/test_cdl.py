"""Huawei CDL JSON 1.0 decoder: the seed sample verbatim, then changes built from it."""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from tests.conftest import assert_events_add_up

from airflow_cdc_provider.formats import DecodeOptions, get_decoder
from airflow_cdc_provider.spark.reader import list_landed_files
from reference.records.cdl import SEED_CDL_1_0, T0, change

# The same seed's message_version 2.0 sample, verbatim: open-source Debezium, decoded by debezium-json, not here.
SEED_DEBEZIUM_2_0 = '{"schema":{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int64","optional":true,"field":"count1"},{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"name":"com.xxx.cdc.data.timestamp","field":"time1"},{"type":"string","optional":true,"name":"com.xxx.cdc.data.Decimal","field":"decimalNum"}],"optional":true,"name":"before","field":"before"},{"type":"struct","fields":[{"type":"int64","optional":true,"field":"count1"},{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"name":"com.xxx.cdc.data.timestamp","field":"time1"},{"type":"string","optional":true,"name":"com.xxx.cdc.data.Decimal","field":"decimalNum"}],"optional":true,"name":"data","field":"after"},{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,last,false"},"default":"false","field":"snapshot"},{"type":"string","optional":false,"field":"db"},{"type":"string","optional":false,"field":"schema"},{"type":"string","optional":false,"field":"table"},{"type":"int64","optional":true,"field":"txId"},{"type":"int64","optional":true,"field":"lsn"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source"},{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":false,"field":"message_version"},{"type":"string","optional":false,"field":"message_type"},{"type":"string","optional":true,"field":"LOB_COLUMNS"},{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":true,"name":"unique","field":"unique"}],"optional":false,"name":"public.ct_pg2hudi"},"payload":{"before":null,"after":{"count1":14,"id":35,"time1":null,"decimalNum":null},"source":{"version":"1.4.0.Final","connector":"postgresql","name":"cdl","ts_ms":1707048891235,"snapshot":"false","db":"cdl","schema":"public","table":"ct_pg2hudi","txId":57227663,"lsn":163955586912},"op":"c","ts_ms":1707048984208,"message_version":"2.0","message_type":"0","LOB_COLUMNS":null,"unique":{"id":35}}}'  # noqa: E501

SEED_TYPES = {"count1": "bigint", "id": "int", "time1": "timestamp", "decimalNum": "string"}


def row(id_: int, count1: int | None, time1: int | None = None, decimal: str | None = None) -> dict[str, Any]:
    return {"count1": count1, "id": id_, "time1": time1, "decimalNum": decimal}


def land(path: Path, *messages: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((m if isinstance(m, str) else json.dumps(m)) + "\n" for m in messages))
    return path


def _typed(image: F.Column) -> F.Column:
    """Each value as "KIND json" (INT for every integral width), so a test sees its conversion."""

    def kind(v: F.Column) -> F.Column:
        t = F.schema_of_variant(v)
        return F.when(t.isin("TINYINT", "SMALLINT", "INT", "BIGINT"), F.lit("INT")).otherwise(t)

    return F.transform_values(
        image, lambda _k, v: F.when(v.isNotNull(), F.concat_ws(" ", kind(v), F.to_json(v)))
    )


def decode(spark, *paths: Path) -> list[dict[str, Any]]:
    files = list_landed_files(spark, [str(p) for p in paths])
    events = get_decoder("cdl-json").decode(spark, files, DecodeOptions())
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
        "partial",
        "key_cols",
        "types",
        "raw",
        _typed(F.col("before")).alias("before"),
        _typed(F.col("after")).alias("after"),
    ).collect()
    return sorted((r.asDict(recursive=True) for r in rows), key=lambda r: (r["file"], r["line"]))


def utc_ms(ms: int) -> dt.datetime:
    """An epoch-ms instant as PySpark returns timestamps (naive, in the Python process's local time)."""
    return dt.datetime.fromtimestamp(ms / 1000)


def test_seed_sample_decodes_to_one_typed_insert(spark, tmp_path):
    (event,) = decode(spark, land(tmp_path / "cdl.json", SEED_CDL_1_0))
    assert event == {
        "file": "cdl.json",
        "line": 1,
        "kind": "change",
        "op": "insert",
        "reason": None,
        "table": "public.ct_pg2hudi",
        "event_ms": 1707047996013,
        "log_pos": [163955221008, 57227595],
        "tx_id": "57227595",
        "partial": False,
        "key_cols": ["id"],
        "types": SEED_TYPES,
        "raw": SEED_CDL_1_0,
        "before": None,
        "after": {"count1": "INT 13", "id": "INT 34", "time1": "VOID null", "decimalNum": "VOID null"},
    }


def test_seed_sample_replays_to_its_row(replay, tmp_path):
    metrics, tables = replay("cdl-json", land(tmp_path / "in" / "cdl.json", SEED_CDL_1_0))
    assert_events_add_up(metrics)
    assert metrics["events"] == {
        "read": 1,
        "applied": 1,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 0,
    }
    assert tables == {"public.ct_pg2hudi": [{"count1": 13, "id": 34, "time1": None, "decimalNum": None}]}
    assert metrics["tables"]["public.ct_pg2hudi"]["last_event_ms"] == 1707047996013


def test_values_follow_the_schema_block_and_stay_untyped_without_it(spark, tmp_path):
    with_schema = change("INSERT", row(1, 5, time1=1707048000123, decimal="12.50"), lsn=1)
    without = change("INSERT", row(2, 6, time1=1707048000123, decimal="12.50"), lsn=2, schema=False)
    bare = copy.deepcopy(without["payload"])  # no envelope at all: the payload is the record
    bare["data"]["id"] = 3
    bare["unique"] = {"id": 3}
    bare["transaction"]["properties"][0]["value"] = 3
    rows = decode(spark, land(tmp_path / "cdl.json", with_schema, without, bare))
    assert [r["types"] for r in rows] == [SEED_TYPES, None, None]
    assert rows[0]["after"] == {
        "count1": "INT 5",
        "id": "INT 1",
        "time1": 'TIMESTAMP "2024-02-04 12:00:00.123+00:00"',
        "decimalNum": 'STRING "12.50"',
    }
    # Without a schema the JSON values are kept as they are; the engine infers the column types.
    assert rows[1]["after"] == {
        "count1": "INT 6",
        "id": "INT 2",
        "time1": "INT 1707048000123",
        "decimalNum": 'STRING "12.50"',
    }
    assert [(r["kind"], r["table"], r["log_pos"], r["key_cols"]) for r in rows] == [
        ("change", "public.ct_pg2hudi", [1, 57227595], ["id"]),
        ("change", "public.ct_pg2hudi", [2, 57227595], ["id"]),
        ("change", "public.ct_pg2hudi", [3, 57227595], ["id"]),
    ]


def test_heartbeats_are_ignored_and_malformed_records_quarantined(spark, tmp_path, replay):
    heartbeat = change(None, None, unique=None, lsn=9)
    path = land(
        tmp_path / "in" / "cdl.json",
        heartbeat,
        change(None, row(1, 1), lsn=10, HEARTBEAT_IDENTIFIER=None),  # a row but no OPERATION
        change("MERGE", row(2, 2), lsn=11),
        change("INSERT", [2, 3], lsn=12, unique={"id": 2}),
        change("UPDATE", row(3, 3), "old row", lsn=13),
        change("INSERT", row(4, 4), lsn=14, unique=[4]),
        change("INSERT", row(5, 5), lsn=15, TABLE_NAME=None),
        change("INSERT", {"count1": 6, "id": "six"}, lsn=16),
        change("INSERT", None, lsn=17, unique={"id": 7}),
        change("DELETE", None, None, lsn=18, unique=None),
        '{"schema": {}, "payload": {"OPERATION": "INSERT", "transaction": {"properties": {"lsn": 1}}}}',
        "[1, 2]",
        "{truncated",
        SEED_DEBEZIUM_2_0,
        change("INSERT", row(8, 8), lsn=19),
    )
    rows = decode(spark, path)
    assert [(r["line"], r["kind"], r["reason"]) for r in rows] == [
        (1, "ignored", "heartbeat"),
        (2, "quarantined", "missing op"),
        (3, "quarantined", "unknown op"),
        (4, "quarantined", "row image not an object"),
        (5, "quarantined", "row image not an object"),
        (6, "quarantined", "row image not an object"),
        (7, "quarantined", "missing table"),
        (8, "quarantined", "type mismatch"),
        (9, "quarantined", "missing image"),
        (10, "quarantined", "key unknown: delete with neither before nor after image"),
        (11, "quarantined", "type mismatch"),
        (12, "quarantined", "not a JSON object"),
        (13, "quarantined", "not JSON"),
        (14, "quarantined", "missing op"),  # message_version 2.0 is debezium-json's
        (15, "change", None),
    ]
    metrics, tables = replay("cdl-json", tmp_path / "in")
    assert_events_add_up(metrics)
    assert metrics["events"] == {
        "read": 15,
        "applied": 1,
        "after_as_of": 0,
        "ignored": 1,
        "duplicates": 0,
        "quarantined": 13,
    }
    assert tables == {"public.ct_pg2hudi": [{"count1": 8, "id": 8, "time1": None, "decimalNum": None}]}


def test_replay_orders_by_lsn_follows_key_changes_and_deletes(replay, tmp_path):
    t1, t2 = T0 + 1000, T0 + 2000
    # The later change (higher lsn) lands in the file that sorts first: the log position decides.
    land(
        tmp_path / "in" / "a.json",
        change("UPDATE", row(1, 30, time1=t2, decimal="3.25"), row(1, 20), lsn=300, tx=3, ms=t2),
    )
    land(
        tmp_path / "in" / "b.json",
        change("INSERT", row(1, 10, decimal="1.00"), lsn=100, tx=1),
        change("INSERT", row(2, 10), lsn=101, tx=1),
        change("INSERT", row(3, 10), lsn=102, tx=1),
        change("UPDATE", row(1, 20), row(1, 10), lsn=200, tx=2, ms=t1),
        # The key changes: `before` holds the old key.
        change("UPDATE", row(22, 11), row(2, 10), lsn=201, tx=2, ms=t1),
        # A delete carries its row in `before`, or only its key in `unique`.
        change("DELETE", None, row(3, 10), lsn=202, tx=2, ms=t1),
        change("INSERT", row(4, 10), lsn=203, tx=2, ms=t1),
        change("DELETE", None, None, lsn=204, tx=2, ms=t1, unique={"id": 4}),
        change("INSERT", row(5, 50), lsn=400, tx=4, ms=T0 + 9000),  # after AS OF
    )
    metrics, tables = replay("cdl-json", tmp_path / "in", T0 + 5000)
    assert_events_add_up(metrics)
    assert metrics["events"] == {
        "read": 10,
        "applied": 9,
        "after_as_of": 1,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 0,
    }
    assert tables == {
        "public.ct_pg2hudi": [
            {"count1": 11, "id": 22, "time1": None, "decimalNum": None},
            {"count1": 30, "id": 1, "time1": utc_ms(t2), "decimalNum": "3.25"},
        ]
    }
    info = metrics["tables"]["public.ct_pg2hudi"]
    assert (info["rows"], info["inserts"], info["updates"], info["deletes"]) == (2, 4, 3, 2)


def test_transaction_properties_are_found_by_name_in_any_letter_case(spark, tmp_path):
    def with_properties(id_: int, *properties: dict[str, Any]) -> dict[str, Any]:
        message = change("INSERT", row(id_, 1), lsn=0)
        message["payload"]["transaction"] = {"properties": list(properties)}
        return message

    path = land(
        tmp_path / "cdl.json",
        with_properties(1, {"name": "LSN", "value": 10}, {"name": "TxId", "value": 7}),
        # A nameless entry first; scn stands in for a missing lsn.
        with_properties(
            2, {"name": None, "value": 99}, {"name": "Scn", "value": 20}, {"name": "txid", "value": 8}
        ),
        with_properties(3, {"name": "lsn", "value": 30}),  # no txId
        with_properties(4, {"name": "txId", "value": 9}),  # no lsn: no log position
    )
    assert [(e["log_pos"], e["tx_id"]) for e in decode(spark, path)] == [
        ([10, 7], "7"),
        ([20, 8], "8"),
        ([30], None),
        (None, "9"),
    ]

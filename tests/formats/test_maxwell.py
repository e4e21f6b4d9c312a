"""maxwell-json: the Flink conformance capture, every record type, ordering, key changes, quarantine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import CONFORMANCE, assert_events_add_up, decode_events, write_jsonl

from reference.records.maxwell import T, rec

FMT = "maxwell-json"


def by_id(rows: list[dict], col: str = "id") -> list[dict]:
    return sorted(rows, key=lambda r: r[col])


# --- conformance corpus -----------------------------------------------------------------------------


@pytest.mark.corpus
def test_flink_maxwell_data(replay, spark):
    path = CONFORMANCE / "flink" / "maxwell-data.txt"
    expected = json.loads((CONFORMANCE / "flink" / "maxwell-data.expected.json").read_text())
    metrics, tables = replay(FMT, path)
    assert list(tables) == ["test.product"]
    # The raw JSON values of the last message applied, column for column (Maxwell's own types).
    assert by_id(tables["test.product"]) == by_id(expected["rows"])
    assert spark.read.parquet(metrics["tables"]["test.product"]["path"]).columns == [
        "id",
        "name",
        "description",
        "weight",
    ]
    assert metrics["rows"] == expected["row_count"] == 8
    t = metrics["tables"]["test.product"]
    # 11 inserts, 6 updates (the last two in one transaction), 3 deletes (the last two in one).
    assert (t["inserts"], t["updates"], t["deletes"], t["deletes_of_unknown_key"]) == (11, 6, 3, 0)
    assert metrics["events"] == {
        "read": 20,
        "applied": 20,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 0,
    }
    assert t["last_event_ms"] == 1596684938000
    assert_events_add_up(metrics)


@pytest.mark.corpus
def test_flink_maxwell_data_orders_by_ts_xid_and_xoffset_whatever_the_line_order(replay, tmp_path):
    lines = (CONFORMANCE / "flink" / "maxwell-data.txt").read_text().splitlines()
    expected = json.loads((CONFORMANCE / "flink" / "maxwell-data.expected.json").read_text())
    # Newest first, across two files named against the order: ts, xid, xoffset (commit row last) decide.
    write_jsonl(tmp_path / "in" / "a.json", lines[::-1][:10])
    write_jsonl(tmp_path / "in" / "b.json", lines[::-1][10:])
    metrics, tables = replay(FMT, tmp_path / "in")
    assert by_id(tables["test.product"]) == by_id(expected["rows"])
    # As of 1596684912 (111's last update applied, its delete not yet).
    metrics, tables = replay(FMT, tmp_path / "in", as_of=1596684912000)
    assert [r for r in tables["test.product"] if r["id"] == 111] == [
        {"id": 111, "name": "scooter", "description": "Big 2-wheel scooter ", "weight": 5.17}
    ]
    assert metrics["events"]["after_as_of"] == 5
    assert_events_add_up(metrics)


# --- decoding ---------------------------------------------------------------------------------------


def test_every_record_type_decodes_exactly(spark, tmp_path):
    lines = [
        rec("bootstrap-start", {}, ts=T - 10),
        rec("bootstrap-insert", {"id": 9, "name": "loaded"}, ts=T - 9),
        rec("bootstrap-complete", {}, ts=T - 8),
        rec("insert", {"id": 1, "name": "a", "n": 1.5}, xid=7, xoffset=0, position="mysql-bin.000003:120"),
        rec("insert", {"id": 2, "name": "b"}, xid=7, commit=True, position="mysql-bin.000003:120"),
        rec("update", {"id": 1, "name": "aa", "n": 1.5}, old={"name": "a"}, xid=8, commit=True),
        rec("delete", {"id": 2, "name": "b"}, xid=9, commit=True, ts=str(T + 1)),
        rec(
            "table-alter",
            None,
            old={"database": "db", "table": "t", "columns": []},
            sql="ALTER TABLE t ADD COLUMN score INT, DROP COLUMN n",
            pk=None,
            **{"def": {"database": "db", "table": "t", "columns": []}},
        ),
        rec("database-create", None, table=None, sql="CREATE DATABASE x", pk=None),
    ]
    path = write_jsonl(tmp_path / "in" / "a.json", lines)
    events = decode_events(spark, FMT, path)
    got = [
        {k: e[k] for k in ("table", "kind", "op", "reason", "event_ms", "log_pos", "tx_id", "tx_end")}
        for e in events
    ]
    ms = T * 1000
    assert got == [
        {
            "table": "db.t",
            "kind": "ignored",
            "op": None,
            "reason": "bootstrap marker",
            "event_ms": ms - 10_000,
            "log_pos": [0, T - 10, None, 0],
            "tx_id": None,
            "tx_end": None,
        },
        {
            "table": "db.t",
            "kind": "change",
            "op": "read",
            "reason": None,
            "event_ms": ms - 9000,
            "log_pos": [0, T - 9, None, 0],
            "tx_id": None,
            "tx_end": None,
        },
        {
            "table": "db.t",
            "kind": "ignored",
            "op": None,
            "reason": "bootstrap marker",
            "event_ms": ms - 8000,
            "log_pos": [0, T - 8, None, 0],
            "tx_id": None,
            "tx_end": None,
        },
        {
            "table": "db.t",
            "kind": "change",
            "op": "insert",
            "reason": None,
            "event_ms": ms,
            "log_pos": [1, 3, 120, 0],
            "tx_id": "7",
            "tx_end": False,
        },
        {
            "table": "db.t",
            "kind": "change",
            "op": "insert",
            "reason": None,
            "event_ms": ms,
            "log_pos": [1, 3, 120, 1 << 62],  # the commit row, written without xoffset, is the last
            "tx_id": "7",
            "tx_end": True,
        },
        {
            "table": "db.t",
            "kind": "change",
            "op": "update",
            "reason": None,
            "event_ms": ms,
            "log_pos": [0, T, 8, 1 << 62],
            "tx_id": "8",
            "tx_end": True,
        },
        {
            "table": "db.t",
            "kind": "change",
            "op": "delete",
            "reason": None,
            "event_ms": ms + 1000,
            "log_pos": [0, T + 1, 9, 1 << 62],
            "tx_id": "9",
            "tx_end": True,
        },
        {
            "table": "db.t",
            "kind": "ignored",
            "op": None,
            "reason": "ddl",
            "event_ms": ms,
            "log_pos": [0, T, None, 0],
            "tx_id": None,
            "tx_end": None,
        },
        {
            "table": None,
            "kind": "ignored",
            "op": None,
            "reason": "ddl",
            "event_ms": ms,
            "log_pos": [0, T, None, 0],
            "tx_id": None,
            "tx_end": None,
        },
    ]
    read, insert, update, delete, alter = events[1], events[3], events[5], events[6], events[7]
    assert (read["before"], read["after"], read["key_cols"]) == (None, {"id": 9, "name": "loaded"}, ["id"])
    assert insert["after"] == {"id": 1, "name": "a", "n": 1.5} and insert["before"] is None
    # old holds only the changed columns: the before image is data overlaid with old.
    assert update["before"] == {"id": 1, "name": "a", "n": 1.5}
    assert update["after"] == {"id": 1, "name": "aa", "n": 1.5}
    assert (delete["before"], delete["after"]) == ({"id": 2, "name": "b"}, None)
    assert (alter["types"], alter["before"]) == ({"score": "int"}, {"n": None})


def test_binlog_positions_order_before_ts_and_file_order(spark, replay, tmp_path):
    # The same key written three times; each file's lines are in the opposite order of the binlog.
    write_jsonl(
        tmp_path / "in" / "a.json",
        [
            rec("update", {"id": 1, "v": "third"}, old={"v": "second"}, ts=T, position="mysql-bin.000010:4"),
            rec(
                "update",
                {"id": 1, "v": "second"},
                old={"v": "first"},
                ts=T + 5,
                position="mysql-bin.000009:900",
            ),
        ],
    )
    write_jsonl(
        tmp_path / "in" / "b.json",
        [rec("insert", {"id": 1, "v": "first"}, ts=T + 9, position="mysql-bin.000009:100")],
    )
    metrics, tables = replay(FMT, tmp_path / "in")
    assert tables["db.t"] == [{"id": 1, "v": "third"}]
    t = metrics["tables"]["db.t"]
    assert (t["inserts"], t["updates"], t["updates_of_unknown_key"]) == (1, 2, 0)
    # An unreadable position orders the record by event time and is counted.
    write_jsonl(tmp_path / "in2" / "a.json", [rec("insert", {"id": 2, "v": "x"}, position="not a position")])
    metrics, tables = replay(FMT, tmp_path / "in2")
    assert tables["db.t"] == [{"id": 2, "v": "x"}]
    assert metrics["ordering"] == {"unreadable_log_position": 1}


# --- replay -----------------------------------------------------------------------------------------


def test_replay_out_of_order_files_duplicates_key_change_unknown_keys_and_after_as_of(replay, tmp_path):
    insert_1 = rec("insert", {"id": 1, "name": "a", "qty": 1}, ts=T, xid=1, commit=True)
    lines_late = [
        # The key changes 1 -> 10: old names the previous id.
        rec("update", {"id": 10, "name": "a", "qty": 1}, old={"id": 1}, ts=T + 3, xid=3, commit=True),
        rec("delete", {"id": 2, "name": "b", "qty": 2}, ts=T + 4, xid=4, commit=True),
        rec("delete", {"id": 7, "name": "never", "qty": 0}, ts=T + 5, xid=5, commit=True),
        rec("update", {"id": 8, "name": "new", "qty": 8}, old={"qty": 7}, ts=T + 6, xid=6, commit=True),
        rec("insert", {"id": 3, "name": "late", "qty": 3}, ts=T + 100, xid=9, commit=True),  # after AS OF
    ]
    lines_early = [
        insert_1,
        insert_1,  # delivered twice
        rec("insert", {"id": 2, "name": "b", "qty": 2}, ts=T + 1, xid=2, xoffset=0),
        rec("bootstrap-insert", {"id": 5, "name": "loaded", "qty": 5}, ts=T - 100),
    ]
    # The later events land in the file that sorts first.
    write_jsonl(tmp_path / "in" / "a.json", lines_late)
    write_jsonl(tmp_path / "in" / "b.json", lines_early)
    metrics, tables = replay(FMT, tmp_path / "in", as_of=(T + 50) * 1000)
    assert by_id(tables["db.t"]) == [
        {"id": 5, "name": "loaded", "qty": 5},
        {"id": 8, "name": "new", "qty": 8},
        {"id": 10, "name": "a", "qty": 1},
    ]
    assert metrics["events"] == {
        "read": 9,
        "applied": 7,
        "after_as_of": 1,
        "ignored": 0,
        "duplicates": 1,
        "quarantined": 0,
    }
    t = metrics["tables"]["db.t"]
    assert {
        k: t[k] for k in ("inserts", "updates", "deletes", "updates_of_unknown_key", "deletes_of_unknown_key")
    } == {
        "inserts": 3,
        "updates": 2,
        "deletes": 1,
        "updates_of_unknown_key": 1,
        "deletes_of_unknown_key": 1,
    }
    assert_events_add_up(metrics)


def test_key_from_option_when_records_name_none_and_ddl_adds_and_drops_columns(replay, tmp_path):
    lines = [
        rec("insert", {"k": 1, "note": "n1"}, pk=None, ts=T),
        rec("table-alter", None, pk=None, ts=T + 1, sql="ALTER TABLE t ADD COLUMN score INT"),
        rec("table-alter", None, pk=None, ts=T + 2, sql="ALTER TABLE `t` DROP COLUMN `note`"),
        rec("insert", {"k": 2, "score": 5}, pk=None, ts=T + 3),
        rec("bootstrap-start", {}, pk=None, ts=T + 4),
    ]
    path = write_jsonl(tmp_path / "in" / "a.json", lines)
    metrics, tables = replay(FMT, path, key="k")
    assert by_id(tables["db.t"], "k") == [{"k": 1, "score": None}, {"k": 2, "score": 5}]
    assert metrics["ignored"] == {"ddl": 2, "bootstrap marker": 1}
    _, before_drop = replay(FMT, path, key="k", as_of=(T + 1) * 1000)
    assert before_drop["db.t"] == [{"k": 1, "note": "n1", "score": None}]
    assert_events_add_up(metrics)


def test_malformed_records_are_quarantined_with_their_reason(spark, replay, tmp_path):
    good = rec("insert", {"id": 1, "name": "ok"})
    lines = [
        (good, None),
        (rec(None, {"id": 2}), "missing op"),
        (rec("upsert", {"id": 3}), "unknown op"),
        (rec("insert", {"id": 4}, table=None), "missing table"),
        (rec("insert", {"id": 5}, ts="yesterday"), "type mismatch"),
        (rec("insert", None), "missing image"),
        (rec("update", None), "missing image"),
        (rec("delete", None), "key unknown: delete with neither before nor after image"),
        (rec("insert", ["id", 6]), "row image not an object"),
        (rec("update", {"id": 7}, old="name"), "row image not an object"),
        (rec("insert", {"name": "no key"}), "missing key"),
        ("[1, 2]", "not a JSON object"),
        ("not json", "not JSON"),
    ]
    text = "\n".join(line for line, _ in lines) + '\n{"type": "insert", "data": {"id": 9'
    path = tmp_path / "in" / "bad.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    events = decode_events(spark, FMT, path)
    # "missing key" is the engine's (the record decodes; its key column is absent).
    assert [(e["kind"], e["reason"]) for e in events] == [
        ("change", None),
        *[("quarantined", r) if r != "missing key" else ("change", None) for _, r in lines[1:]],
        ("quarantined", "truncated"),
    ]
    metrics, tables = replay(FMT, path)
    assert tables == {"db.t": [{"id": 1, "name": "ok"}]}
    assert metrics["quarantine"]["reasons"] == {
        "missing op": 1,
        "unknown op": 1,
        "missing table": 1,
        "type mismatch": 1,
        "missing image": 2,
        "key unknown: delete with neither before nor after image": 1,
        "row image not an object": 2,
        "missing key": 1,
        "not a JSON object": 1,
        "not JSON": 1,
        "truncated": 1,
    }
    assert metrics["events"]["read"] == 14 and metrics["events"]["quarantined"] == 13
    assert_events_add_up(metrics)
    quarantined = [
        json.loads(line)
        for part in sorted((Path(metrics["output"].removeprefix("file:")) / "_quarantine").glob("part-*"))
        for line in part.read_text().splitlines()
    ]
    assert [(q["line"], q["reason"]) for q in quarantined] == [
        (i + 1, r) for i, (_, r) in enumerate(lines) if r is not None
    ] + [(14, "truncated")]
    assert [q["record"] for q in quarantined[:-1]] == [line for line, r in lines if r is not None]


def test_key_columns_from_a_primary_key_object_and_never_from_its_values(spark, tmp_path):
    lines = [
        rec("insert", {"k": 1, "note": "a"}, pk=None, primary_key={"k": 1}),
        rec("insert", {"k": 2, "note": "b"}, pk=None, primary_key=[2]),  # values only: no names
        rec("insert", {"k": 3, "note": "c"}, pk=("k",), primary_key={"note": "c"}),  # columns win
    ]
    events = decode_events(spark, FMT, write_jsonl(tmp_path / "in" / "a.json", lines))
    assert [e["key_cols"] for e in events] == [["k"], None, ["k"]]


def test_binlog_positions_read_as_the_pattern_reads_them(spark):
    # The usual shape is read without the regular expression; every other text takes the pattern,
    # so both routes must agree: spaces, colons, signs, leading zeros, 64-bit overflow.
    from airflow_cdc_provider.formats.mysql.maxwell import binlog_position
    from airflow_cdc_provider.spark import sqlexpr as E

    expected = {
        "mysql-bin.000003:1234": [3, 1234],
        " mysql-bin.000003 :\t1234\n": [3, 1234],
        "3:4": [3, 4],
        "host:mysql-bin.12:7": [12, 7],
        "ab12cd34:5": [34, 5],
        "binlog.0:000": [0, 0],
        "my sql-bin.000003:5": None,
        "mysql-bin.000003:+5": None,
        "mysql-bin.000003:-5": None,
        "mysql-bin.-3:5": [3, 5],
        "mysql-bin.:5": None,
        "mysql-bin.000003:": None,
        "mysql-bin.000003": None,
        "mysql-bin.000003:5:": None,
        "mysql-bin.99999999999999999999:5": None,
        "mysql-bin.000003:99999999999999999999": None,
        "mysql-bin.\u0663:5": None,
    }
    rows = spark.createDataFrame([(text,) for text in expected], "p string")
    got = rows.select("p", binlog_position(E.col("p")).alias("pos").column()).collect()
    assert {r["p"]: r["pos"] for r in got} == expected

"""aws-dms: the Paimon conformance capture, DMS's S3 CSV and Parquet files, and its Kafka JSON.

The S3 files are written here the way DMS's S3 target documents them: headerless CSV whose first
field is ``Op`` in change files (``YYYYMMDD-HHMMSSffff.csv``) and absent from full-load files
(``LOAD00000001.csv``) unless ``IncludeOpForFullLoad``, in ``schema/table/`` folders; Parquet with
the same ``Op`` column (pyarrow). The JSON records follow DMS's Kafka/Kinesis message layout.
"""

from __future__ import annotations

import gzip
import json
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import CONFORMANCE, assert_events_add_up, decode_events

from airflow_cdc_provider.formats.aws_dms.definitions import file_time_ms, table_of
from airflow_cdc_provider.formats.aws_dms.s3_csv import Q_OPEN_QUOTE
from airflow_cdc_provider.spark.reader import WHOLE_FILE_MAX_BYTES
from reference.records.aws_dms import T0, record, stamp

FMT = "aws-dms"
PAIMON = CONFORMANCE / "paimon" / "aws-dms" / "table" / "schemaevolution"
LICENCE_LINES = 17  # each Paimon file starts with a 17-line /* ... */ ASF licence comment
EMPLOYEE = ("id", "last", "first", "hired", "city")
COLUMNS = {"hr.employee": EMPLOYEE}


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def lines(*rows: str) -> str:
    return "".join(row + "\n" for row in rows)


def drop_nulls(rows: list[dict]) -> list[dict]:
    return sorted(({k: v for k, v in r.items() if v is not None} for r in rows), key=lambda r: r["id"])


def columns_of(spark, metrics: dict, table: str) -> list[str]:
    return spark.read.parquet(metrics["tables"][table]["path"]).columns


# --- the Paimon capture -------------------------------------------------------------------------------


@pytest.mark.corpus
@pytest.mark.parametrize("upto", [1, 2, 3])
def test_paimon_schema_evolution_files_in_order(replay, spark, upto):
    expected = json.loads((PAIMON / "schemaevolution.expected.json").read_text())
    metrics, tables = replay(FMT, [PAIMON / f"aws-dms-data-{i}.txt" for i in range(1, upto + 1)], key="id")
    assert list(tables) == ["test.product"]
    assert drop_nulls(tables["test.product"]) == drop_nulls(expected["steps"][upto - 1]["rows"])
    # The order the messages write the columns; a column a later message adds comes last. The
    # update's BI_ before-image columns are never columns of the snapshot.
    assert (
        columns_of(spark, metrics, "test.product")
        == [
            ["id", "name", "description", "weight"],
            ["id", "name", "description", "weight", "age"],
            ["id", "name", "description", "weight", "age", "address"],
        ][upto - 1]
    )
    # Each file's licence comment is quarantined line by line; its blank line after is a tombstone.
    assert metrics["quarantine"]["reasons"] == {"not JSON": LICENCE_LINES * upto}
    assert metrics["ignored"] == {"tombstone": upto}
    t = metrics["tables"]["test.product"]
    # Every message of the capture has the same timestamp, so none orders before another but by its
    # place in the landing. The rows follow that place; the counts of ops tied at one position are
    # made in an order of their own (README, known limits): file 3's delete of 101, tied with its
    # insert in file 1, may count as a delete of an unknown key.
    assert t["inserts"] + t["updates"] + t["deletes"] + t["deletes_of_unknown_key"] == [2, 4, 8][upto - 1]
    assert metrics["events"]["applied"] == [2, 4, 8][upto - 1]
    assert metrics["rows"] == len(expected["steps"][upto - 1]["rows"])
    assert_events_add_up(metrics)


@pytest.mark.corpus
def test_paimon_file_4_alone_keeps_its_null(replay, spark):
    expected = json.loads((PAIMON / "schemaevolution.expected.json").read_text())["separate_scenario"]
    metrics, tables = replay(FMT, PAIMON / "aws-dms-data-4.txt", key="id")
    assert sorted(tables["test.product"], key=lambda r: r["id"]) == expected["rows"]
    schema = spark.read.parquet(metrics["tables"]["test.product"]["path"]).schema.simpleString()
    assert schema == "struct<id:bigint,name:string,description:string,weight:double>"
    assert metrics["events"]["applied"] == 2
    assert_events_add_up(metrics)


@pytest.mark.corpus
def test_paimon_messages_decode_exactly(spark):
    events = [e for e in decode_events(spark, FMT, PAIMON / "aws-dms-data-3.txt") if e["kind"] == "change"]
    ms = 1730032743210  # 2024-10-27T12:39:03.210671Z
    assert [(e["table"], e["op"], e["event_ms"], e["log_pos"], e["tx_id"], e["line"]) for e in events] == [
        ("test.product", "insert", ms, [1, ms * 1000 + 671], "670014899490", 19),
        ("test.product", "delete", ms, [1, ms * 1000 + 671], "670014899490", 20),
        ("test.product", "update", ms, [1, ms * 1000 + 671], "670014899490", 21),
        ("test.product", "insert", ms, [1, ms * 1000 + 671], "670014899490", 22),
    ]
    insert, delete, update, _ = events
    # JSON numbers keep their digits (3.14 is the exact decimal 3.14 until the snapshot types it).
    assert delete["before"] == {
        "id": 101, "name": "scooter", "description": "Small 2-wheel scooter", "weight": Decimal("3.14"),
    } and delete["after"] is None  # fmt: skip
    assert update["after"] == {
        "id": 105, "name": "hammer", "description": "14oz carpenter's hammer", "weight": Decimal("0.875"),
        "address": "Beijing",
    }  # fmt: skip
    assert update["before"] == {
        "id": 105, "name": "hammer", "description": "14oz carpenter's hammer", "weight": Decimal("0.875"),
        "address": "Shanghai",
    }  # fmt: skip
    assert insert["before"] is None and insert["key_cols"] is None


# --- Kafka / Kinesis JSON ----------------------------------------------------------------------------------


def test_json_every_op_control_records_and_key_changes(spark, replay, tmp_path):
    row = lambda i, name, **extra: {"id": i, "name": name, **extra}  # noqa: E731
    messages = [
        record("create-table", None, ms=T0 - 5000, record_type="control"),
        record("load", row(1, "a"), ms=T0 + 9000),  # a full load sorts before the changes
        record("load", row(2, "b"), ms=T0 + 9000),
        record("insert", row(3, "c"), ms=T0 + 1000),
        record("update", row(1, "a2", BI_id=1, BI_name="a"), ms=T0 + 2000),
        # A key change: the before image names the old key.
        record("update", row(20, "b", BI_id=2, BI_name="b"), ms=T0 + 3000),
        record("delete", row(3, "c"), ms=T0 + 4000),
        record("delete", row(9, "never there"), ms=T0 + 5000),
        record("update", row(8, "new", BI_id=8), ms=T0 + 6000),  # an update of an unknown key
        record("drop-table", None, ms=T0 + 7000, record_type="control"),
        record("insert", row(4, "late"), ms=T0 + 60_000),  # after AS OF
    ]
    path = write(tmp_path / "in" / "topic-0.json", lines(*messages))
    events = decode_events(spark, FMT, path)
    assert [(e["kind"], e["op"], e["reason"]) for e in events] == [
        ("ignored", None, "ddl"),
        ("change", "read", None),
        ("change", "read", None),
        ("change", "insert", None),
        ("change", "update", None),
        ("change", "update", None),
        ("change", "delete", None),
        ("change", "delete", None),
        ("change", "update", None),
        ("ignored", None, "ddl"),
        ("change", "insert", None),
    ]
    assert events[1]["log_pos"] == [0] and events[3]["log_pos"] == [1, (T0 + 1000) * 1000]
    assert events[5]["before"] == {"id": 2, "name": "b"} and events[5]["after"] == {"id": 20, "name": "b"}
    assert events[4]["after"] == {"id": 1, "name": "a2"}  # BI_ columns are never row columns

    metrics, tables = replay(FMT, path, T0 + 30_000, key="id")
    assert sorted(tables["test.product"], key=lambda r: r["id"]) == [
        {"id": 1, "name": "a2"},
        {"id": 8, "name": "new"},
        {"id": 20, "name": "b"},
    ]
    assert metrics["events"] == {
        "read": 11, "applied": 8, "after_as_of": 1, "ignored": 2, "duplicates": 0, "quarantined": 0,
    }  # fmt: skip
    assert metrics["ignored"] == {"ddl": 2}
    t = metrics["tables"]["test.product"]
    assert (t["inserts"], t["updates"], t["deletes"]) == (3, 3, 1)
    assert (t["updates_of_unknown_key"], t["deletes_of_unknown_key"]) == (1, 1)
    assert_events_add_up(metrics)


def test_json_before_image_columns_are_found_however_their_names_are_written(spark, tmp_path):
    # A JSON writer may escape any character of a key: "\u0042I_name" is the column BI_name.
    escaped = record("update", {"id": 2, "name": "b2"}, ms=T0 + 1000).replace(
        '"name": "b2"', '"name": "b2", "\\u0042I_id": 2, "\\u0042I_name": "b"'
    )
    plain = record("update", {"id": 3, "name": "c2", "BI_id": 3, "BI_name": "c"}, ms=T0 + 2000)
    bare = record("insert", {"id": 4, "name": "no before image"}, ms=T0 + 3000)
    events = decode_events(spark, FMT, write(tmp_path / "in" / "topic-0.json", lines(escaped, plain, bare)))
    assert [(e["before"], e["after"]) for e in events] == [
        ({"id": 2, "name": "b"}, {"id": 2, "name": "b2"}),
        ({"id": 3, "name": "c"}, {"id": 3, "name": "c2"}),
        (None, {"id": 4, "name": "no before image"}),
    ]


def test_json_files_out_of_order_and_redelivered(replay, tmp_path):
    landing = tmp_path / "in"
    # Listed first, but holding the later changes; the second file re-delivers one message.
    first = record("update", {"id": 1, "qty": 3}, ms=T0 + 3000)
    write(landing / "a.json", lines(first, record("delete", {"id": 2, "qty": 1}, ms=T0 + 4000)))
    write(
        landing / "b.json",
        lines(
            record("insert", {"id": 1, "qty": 1}, ms=T0 + 1000),
            record("insert", {"id": 2, "qty": 1}, ms=T0 + 1000),
            record("update", {"id": 1, "qty": 2}, ms=T0 + 2000),
            first,  # delivered twice
        ),
    )
    metrics, tables = replay(FMT, landing, key="id")
    assert tables == {"test.product": [{"id": 1, "qty": 3}]}
    assert metrics["events"]["duplicates"] == 1
    assert metrics["tables"]["test.product"]["updates"] == 2
    assert_events_add_up(metrics)


def test_json_records_that_cannot_be_decoded_are_quarantined_with_their_reason(spark, replay, tmp_path):
    bad = [
        ("not JSON at all", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps({"data": {"id": 1}}), "missing op"),
        (record("upsert", {"id": 1}), "unknown op"),
        (record("insert", {"id": 1}, record_type="heartbeat"), "unknown op"),
        (record("insert", {"id": 1}, table=""), "missing table"),
        (record("insert", None), "missing image"),
        (record("delete", None), "key unknown: delete with neither before nor after image"),
        (record("insert", {"id": 1}).replace(stamp(T0), "yesterday"), "type mismatch"),
        (
            json.dumps({"data": "id=1", "metadata": {"operation": "insert", "table-name": "t"}}),
            "row image not an object",
        ),
        (record("insert", {"id": None, "name": "no key"}), "missing key"),
    ]
    good = record("insert", {"id": 7, "name": "ok"})
    text = lines(good, *[line for line, _ in bad]) + '{"data": {"id": 9'  # cut short
    path = write(tmp_path / "in" / "bad.json", text)
    events = decode_events(spark, FMT, path)
    assert [e["reason"] for e in events] == [None] + [
        None if reason == "missing key" else reason for _, reason in bad
    ] + ["truncated"]

    metrics, tables = replay(FMT, path, key="id")
    assert tables == {"test.product": [{"id": 7, "name": "ok"}]}
    reasons = {}
    for _, reason in bad:
        reasons[reason] = reasons.get(reason, 0) + 1
    reasons["truncated"] = 1
    assert metrics["quarantine"]["reasons"] == reasons
    assert metrics["events"]["quarantined"] == len(bad) + 1
    assert_events_add_up(metrics)


# --- S3 target: CSV -----------------------------------------------------------------------------------


def employee(tmp_path: Path) -> Path:
    """A full load (one file without Op, one with IncludeOpForFullLoad's I) and three change files."""
    table = tmp_path / "in" / "hr" / "employee"
    write(
        table / "LOAD00000001.csv",
        lines("101,Smith,Bob,2014-06-04,New York", "102,Jones,Ann,2014-06-05,Boston"),
    )
    write(table / "LOAD00000002.csv", lines("I,103,Lee,Kim,2014-06-06,Austin"))
    # The documented example of Op values, as change files of consecutive seconds.
    write(
        table / "20150101-1000000000.csv",
        lines(
            "I,104,Diaz,Eva,2015-01-01,Denver",
            "U,101,Smith,Bob,2015-10-08,Los Angeles",
            "D,102,Jones,Ann,2014-06-05,Boston",
        ),
    )
    write(
        table / "20150101-1000010000.csv",
        lines(
            "U,101,Smith,Bob,2017-03-13,Dallas",
            "D,999,Nobody,X,2020-01-01,Nowhere",  # a delete of an unknown key
            "U,998,New,Y,2020-01-01,Here",  # an update that creates its row
        ),
    )
    write(table / "20150101-1000030000.csv", lines("D,101,Smith,Bob,2017-03-13,Dallas"))  # after AS OF
    return tmp_path / "in"


CHANGE_1_MS = 1420106400000  # 2015-01-01T10:00:00Z


def test_csv_full_load_and_changes_decode_exactly(spark, tmp_path):
    landing = employee(tmp_path)
    events = decode_events(spark, FMT, landing, table_columns=COLUMNS)
    summary = [(Path(e["file"]).name, e["line"], e["op"], e["event_ms"], e["log_pos"]) for e in events]
    assert summary == [
        ("20150101-1000000000.csv", 1, "insert", CHANGE_1_MS, [1, CHANGE_1_MS * 1000, CHANGE_1_MS, 0]),
        ("20150101-1000000000.csv", 2, "update", CHANGE_1_MS, [1, CHANGE_1_MS * 1000, CHANGE_1_MS, 1]),
        ("20150101-1000000000.csv", 3, "delete", CHANGE_1_MS, [1, CHANGE_1_MS * 1000, CHANGE_1_MS, 2]),
        ("20150101-1000010000.csv", 1, "update", CHANGE_1_MS + 1000, [1, (CHANGE_1_MS + 1000) * 1000, CHANGE_1_MS + 1000, 0]),
        ("20150101-1000010000.csv", 2, "delete", CHANGE_1_MS + 1000, [1, (CHANGE_1_MS + 1000) * 1000, CHANGE_1_MS + 1000, 1]),
        ("20150101-1000010000.csv", 3, "update", CHANGE_1_MS + 1000, [1, (CHANGE_1_MS + 1000) * 1000, CHANGE_1_MS + 1000, 2]),
        ("20150101-1000030000.csv", 1, "delete", CHANGE_1_MS + 3000, [1, (CHANGE_1_MS + 3000) * 1000, CHANGE_1_MS + 3000, 0]),
        ("LOAD00000001.csv", 1, "read", None, [0]),
        ("LOAD00000001.csv", 2, "read", None, [0]),
        ("LOAD00000002.csv", 1, "read", None, [0]),
    ]  # fmt: skip
    assert {e["table"] for e in events} == {"hr.employee"}
    assert events[1]["after"] == {
        "id": "101", "last": "Smith", "first": "Bob", "hired": "2015-10-08", "city": "Los Angeles",
    }  # fmt: skip
    assert events[2]["before"]["id"] == "102" and events[2]["after"] is None
    assert all(e["types"] is None for e in events)  # no definition: values keep their text


def test_csv_replay_counts_and_as_of(replay, spark, tmp_path):
    landing = employee(tmp_path)
    metrics, tables = replay(FMT, landing, CHANGE_1_MS + 2000, key="id", table_columns=COLUMNS)
    assert [(r["id"], r["city"]) for r in sorted(tables["hr.employee"], key=lambda r: r["id"])] == [
        ("101", "Dallas"),
        ("103", "Austin"),
        ("104", "Denver"),
        ("998", "Here"),
    ]
    assert columns_of(spark, metrics, "hr.employee") == list(EMPLOYEE)
    assert metrics["events"] == {
        "read": 10, "applied": 9, "after_as_of": 1, "ignored": 0, "duplicates": 0, "quarantined": 0,
    }  # fmt: skip
    t = metrics["tables"]["hr.employee"]
    assert (t["inserts"], t["updates"], t["deletes"]) == (4, 3, 1)
    assert (t["updates_of_unknown_key"], t["deletes_of_unknown_key"]) == (1, 1)
    assert_events_add_up(metrics)


def test_csv_same_row_twice_in_one_file_is_two_changes_not_a_duplicate(replay, tmp_path):
    table = tmp_path / "in" / "hr" / "employee"
    write(
        table / "20150101-1000000000.csv",
        lines(
            "I,1,A,B,2015-01-01,X",
            "D,1,A,B,2015-01-01,X",
            "I,1,A,B,2015-01-01,X",  # the same text as line 1: inserted again, not re-delivered
        ),
    )
    metrics, tables = replay(FMT, tmp_path / "in", key="id", table_columns=COLUMNS)
    assert [r["id"] for r in tables["hr.employee"]] == ["1"]
    assert metrics["events"]["duplicates"] == 0
    assert_events_add_up(metrics)


def test_csv_timestamp_column_orders_changes_and_loads_come_first(spark, replay, tmp_path):
    table = tmp_path / "in" / "sales" / "orders" / "2024" / "09" / "02"  # DMS date partition folders
    ts = lambda s: stamp(T0 + s * 1000, "%Y-%m-%d %H:%M:%S.%f")  # noqa: E731
    # The load is stamped with its transfer time, after the changes DMS cached during the load.
    write(table / "LOAD00000001.csv", lines(f"{ts(50)},1,10"))
    # The earlier-named file holds the later changes: the timestamp column decides, not the name.
    write(table / "20240902-0000000000.csv", lines(f"U,{ts(30)},1,30", f"U,{ts(31)},2,1"))
    write(table / "20240902-1000000000.csv", lines(f"U,{ts(20)},1,20", f"U,{ts(21)},1,"))
    columns = {"orders": ("dms_ts", "id", "qty")}
    events = decode_events(spark, FMT, tmp_path / "in", table_columns=columns, timestamp_column="dms_ts")
    assert [(e["op"], e["event_ms"], (e["after"] or {}).get("qty")) for e in events] == [
        ("update", T0 + 30_000, "30"),
        ("update", T0 + 31_000, "1"),
        ("update", T0 + 20_000, "20"),
        ("update", T0 + 21_000, None),
        ("read", T0 + 50_000, "10"),
    ]
    assert all("dms_ts" not in e["after"] for e in events)
    assert events[0]["table"] == "sales.orders"
    metrics, tables = replay(
        FMT, tmp_path / "in", T0 + 60_000, key="id", table_columns=columns, timestamp_column="dms_ts"
    )
    assert sorted(tables["sales.orders"], key=lambda r: r["id"]) == [
        {"id": "1", "qty": "30"},
        {"id": "2", "qty": "1"},
    ]
    assert_events_add_up(metrics)


def test_csv_rows_that_cannot_be_decoded_are_quarantined_with_file_and_line(spark, replay, tmp_path):
    landing = tmp_path / "in"
    table = landing / "hr" / "employee"
    write(
        table / "20150101-1000000000.csv",
        lines(
            "I,1,A,B,2015-01-01,X",
            "I,2,A,B,2015-01-01",  # one field short
            "I,3,A,B,2015-01-01,X,extra",  # one too many
            "X,4,A,B,2015-01-01,X",
            ",5,A,B,2015-01-01,X",
            '"I,6",A,B,"quoted, city",X',  # a quoted field holds a comma: one field short
        )
        + "I,7,A,B,2015",  # the last line cut short
    )
    write(table / "20150101-1000010000.csv", "I,8,A,B,2015-01-01,caf\xe9\n".encode("latin-1"))
    write(landing / "hr" / "unknown" / "LOAD00000001.csv", lines("1,2,3"))
    events = decode_events(spark, FMT, landing, table_columns=COLUMNS)
    got = sorted((Path(e["file"]).name, e["file"].split("/")[-2], e["line"], e["reason"]) for e in events)
    width = "CSV row width does not match its column list"
    assert got == [
        ("20150101-1000000000.csv", "employee", 1, None),
        ("20150101-1000000000.csv", "employee", 2, width),
        ("20150101-1000000000.csv", "employee", 3, width),
        ("20150101-1000000000.csv", "employee", 4, "unknown op"),
        ("20150101-1000000000.csv", "employee", 5, "missing op"),
        ("20150101-1000000000.csv", "employee", 6, width),
        ("20150101-1000000000.csv", "employee", 7, "truncated"),
        ("20150101-1000010000.csv", "employee", 1, "not UTF-8"),
        ("LOAD00000001.csv", "unknown", 1, "no column list"),
    ]

    output = tmp_path / "out"
    metrics, tables = replay(FMT, landing, key="id", table_columns=COLUMNS, output=output)
    assert tables == {
        "hr.employee": [{"id": "1", "last": "A", "first": "B", "hired": "2015-01-01", "city": "X"}]
    }
    assert metrics["quarantine"]["reasons"] == {
        width: 3, "unknown op": 1, "missing op": 1, "truncated": 1, "not UTF-8": 1, "no column list": 1,
    }  # fmt: skip
    quarantined = [
        json.loads(x) for p in (output / "_quarantine").glob("part-*") for x in p.read_text().splitlines()
    ]
    widths = sorted(
        (Path(q["file"]).name, q["line"], q["record"]) for q in quarantined if q["reason"] == width
    )
    assert widths == [
        ("20150101-1000000000.csv", 2, "I,2,A,B,2015-01-01"),
        ("20150101-1000000000.csv", 3, "I,3,A,B,2015-01-01,X,extra"),
        ("20150101-1000000000.csv", 6, '"I,6",A,B,"quoted, city",X'),
    ]
    assert_events_add_up(metrics)


def employee_row(i: str, last: str, first: str, city: str, hired: str = "2015-01-01") -> dict:
    return {"id": i, "last": last, "first": first, "hired": hired, "city": city}


def multi_line_landing(tmp_path: Path) -> Path:
    """Change files whose quoted values hold line breaks (as DMS writes them), and a load file with
    none. Each row's first line is noted beside it."""
    table = tmp_path / "in" / "hr" / "employee"
    write(
        table / "20150101-1000000000.csv",
        lines(
            "I,1,A,B,2015-01-01,X",  # line 1
            'I,2,A,B,2015-01-01,"line1',  # line 2: two lines, in the last column
            'line2"',
            'I,3,"Mc""Q""',  # line 4: three lines (one empty), "" and the delimiter inside
            "",
            'uote, Jr",B,2015-01-01,Y',
            'I,4,A,"a, b",2015-01-01,"x',  # line 7: three lines in the last column
            "y",
            'z"',
            'U,1,"p',  # line 10: two values over lines, one line closing the first and opening the next
            'q","r',
            's",2015-01-02,Z',
            "D,3,x,y,2015-01-01,Y",  # line 13
            'I,5,"two',  # line 14: one field short
            'lines",B,2015-01-01',
            "I,6,A,B,2015-01-01,W",  # line 16
            'I,7,A,B,2015-01-01,"never',  # line 17: the file ends inside the value
            "closed",
        ),
    )
    # Windows line ends: the line break inside the value is read as the reader's line break, \n.
    write(
        table / "20150101-1000010000.csv", 'I,8,A,B,2015-01-01,"crlf\r\nvalue"\r\nI,10,A,B,2015-01-01,V\r\n'
    )
    write(table / "LOAD00000001.csv", lines("9,A,B,2014-01-01,V"))
    return tmp_path / "in"


def test_csv_values_over_several_lines_decode_at_their_first_line(spark, tmp_path):
    events = decode_events(spark, FMT, multi_line_landing(tmp_path), table_columns=COLUMNS)
    got = [(Path(e["file"]).name, e["line"], e["file_pos"], e["op"], e["reason"]) for e in events]
    # Changes are ordered by their place in the file: the first line's.
    assert all(e["log_pos"][-1] == e["file_pos"] for e in events if e["log_pos"] != [0])
    width = "CSV row width does not match its column list"
    assert got == [
        ("20150101-1000000000.csv", 1, 0, "insert", None),
        ("20150101-1000000000.csv", 2, 1, "insert", None),
        ("20150101-1000000000.csv", 4, 3, "insert", None),
        ("20150101-1000000000.csv", 7, 6, "insert", None),
        ("20150101-1000000000.csv", 10, 9, "update", None),
        ("20150101-1000000000.csv", 13, 12, "delete", None),
        ("20150101-1000000000.csv", 14, 13, None, width),
        ("20150101-1000000000.csv", 16, 15, "insert", None),
        ("20150101-1000000000.csv", 17, 16, None, Q_OPEN_QUOTE),
        ("20150101-1000010000.csv", 1, 0, "insert", None),
        ("20150101-1000010000.csv", 3, 2, "insert", None),
        ("LOAD00000001.csv", 1, 0, "read", None),
    ]
    inserted = {e["after"]["id"]: e["after"] for e in events if e["op"] == "insert"}
    assert inserted["2"] == employee_row("2", "A", "B", "line1\nline2")
    assert inserted["3"] == employee_row("3", 'Mc"Q"\n\nuote, Jr', "B", "Y")
    assert inserted["4"] == employee_row("4", "A", "a, b", "x\ny\nz")
    assert inserted["8"] == employee_row("8", "A", "B", "crlf\nvalue")
    update = next(e for e in events if e["op"] == "update")
    assert update["after"] == {"id": "1", "last": "p\nq", "first": "r\ns", "hired": "2015-01-02", "city": "Z"}
    # The quarantined rows keep their text as landed, lines and all.
    assert [e["raw"] for e in events if e["kind"] == "quarantined"] == [
        'I,5,"two\nlines",B,2015-01-01',
        'I,7,A,B,2015-01-01,"never\nclosed',
    ]


def test_csv_values_over_several_lines_replay_with_their_first_line(spark, replay, tmp_path):
    output = tmp_path / "out"
    metrics, tables = replay(
        FMT, multi_line_landing(tmp_path), key="id", table_columns=COLUMNS, with_metadata=True, output=output
    )
    rows = sorted(tables["hr.employee"], key=lambda r: int(r["id"]))
    assert [{c: r[c] for c in EMPLOYEE} for r in rows] == [
        {"id": "1", "last": "p\nq", "first": "r\ns", "hired": "2015-01-02", "city": "Z"},
        {"id": "2", "last": "A", "first": "B", "hired": "2015-01-01", "city": "line1\nline2"},
        {"id": "4", "last": "A", "first": "a, b", "hired": "2015-01-01", "city": "x\ny\nz"},
        {"id": "6", "last": "A", "first": "B", "hired": "2015-01-01", "city": "W"},
        {"id": "8", "last": "A", "first": "B", "hired": "2015-01-01", "city": "crlf\nvalue"},
        {"id": "9", "last": "A", "first": "B", "hired": "2014-01-01", "city": "V"},
        {"id": "10", "last": "A", "first": "B", "hired": "2015-01-01", "city": "V"},
    ]
    assert [(r["id"], Path(r["_cdc_file"]).name, r["_cdc_line"]) for r in rows] == [
        ("1", "20150101-1000000000.csv", 10),
        ("2", "20150101-1000000000.csv", 2),
        ("4", "20150101-1000000000.csv", 7),
        ("6", "20150101-1000000000.csv", 16),
        ("8", "20150101-1000010000.csv", 1),
        ("9", "LOAD00000001.csv", 1),
        ("10", "20150101-1000010000.csv", 3),
    ]
    assert metrics["events"] == {
        "read": 12, "applied": 10, "after_as_of": 0, "ignored": 0, "duplicates": 0, "quarantined": 2,
    }  # fmt: skip
    t = metrics["tables"]["hr.employee"]
    assert (t["rows"], t["inserts"], t["updates"], t["deletes"]) == (7, 8, 1, 1)
    assert (t["updates_of_unknown_key"], t["deletes_of_unknown_key"]) == (0, 0)
    width = "CSV row width does not match its column list"
    assert metrics["quarantine"]["reasons"] == {width: 1, Q_OPEN_QUOTE: 1}
    quarantined = sorted(
        (Path(q["file"]).name, q["line"], q["reason"], q["record"])
        for p in (output / "_quarantine").glob("part-*")
        for q in map(json.loads, p.read_text().splitlines())
    )
    assert quarantined == [
        ("20150101-1000000000.csv", 14, width, 'I,5,"two\nlines",B,2015-01-01'),
        ("20150101-1000000000.csv", 17, Q_OPEN_QUOTE, 'I,7,A,B,2015-01-01,"never\nclosed'),
    ]
    assert_events_add_up(metrics)


def test_csv_values_over_several_lines_in_a_file_read_in_splits(replay, tmp_path):
    # Over WHOLE_FILE_MAX_BYTES: read by Spark's line reader, lines found afterwards by position.
    table = tmp_path / "in" / "hr" / "employee"
    filler = [f"I,{i},A,B,2015-01-01,{'X' * 250}" for i in range(100, 100 + 4_500)]
    tail = ['I,1,A,B,2015-01-01,"line1', 'line2"', 'I,2,"two', 'lines",B,2015-01-01', "I,3,A,B,2015-01-01,Y"]
    path = write(table / "20150101-1000000000.csv", lines(*filler, *tail))
    assert path.stat().st_size > WHOLE_FILE_MAX_BYTES
    output = tmp_path / "out"
    metrics, tables = replay(FMT, tmp_path / "in", key="id", table_columns=COLUMNS, output=output)
    rows = {r["id"]: r["city"] for r in tables["hr.employee"]}
    assert len(rows) == 4_502 and (rows["1"], rows["3"]) == ("line1\nline2", "Y")
    assert metrics["events"]["read"] == 4_503 and metrics["events"]["quarantined"] == 1
    quarantined = [
        (q["line"], q["record"])
        for p in (output / "_quarantine").glob("part-*")
        for q in map(json.loads, p.read_text().splitlines())
    ]
    assert quarantined == [(4_503, 'I,2,"two\nlines",B,2015-01-01')]
    assert_events_add_up(metrics)


DEFINITION = {
    "TableCount": "1",
    "Tables": [
        {
            "TableName": "employee",
            "TablePath": "hr/employee/",
            "TableOwner": "hr",
            "TableColumns": [
                {"ColumnName": "id", "ColumnType": "INT4", "ColumnNullable": "false", "ColumnIsPk": "true"},
                {"ColumnName": "name", "ColumnType": "STRING", "ColumnLength": "20"},
                {
                    "ColumnName": "salary",
                    "ColumnType": "NUMERIC",
                    "ColumnPrecision": "10",
                    "ColumnScale": "2",
                },
                {"ColumnName": "hired", "ColumnType": "DATE"},
                {"ColumnName": "seen", "ColumnType": "DATETIME"},
                {"ColumnName": "active", "ColumnType": "BOOLEAN"},
            ],
            "TableColumnsTotal": "6",
        }
    ],
}


def test_table_definition_gives_names_types_and_key(spark, replay, tmp_path):
    landing = tmp_path / "in"
    write(landing / "dms_table_definition.json", json.dumps(DEFINITION, indent=2))
    table = landing / "hr" / "employee"
    write(
        table / "LOAD00000001.csv.gz",
        gzip.compress(lines("1,Ann,1000.50,2014-06-04,2024-09-02 10:00:00.123456,true").encode()),
    )
    write(
        table / "20240902-1000000000.csv",
        lines(
            'U,1,"Ann ""the boss""",1200.00,2014-06-04,2024-09-02 11:00:00.000000,1',
            "I,2,Bo,abc,2014-06-04,,false",  # a salary that is no number
            "I,3,Cy,,,,",
        ),
    )
    metrics, tables = replay(FMT, landing)  # no --key: ColumnIsPk names it
    assert sorted(tables["hr.employee"], key=lambda r: r["id"]) == [
        {
            "id": 1,
            "name": 'Ann "the boss"',
            "salary": Decimal("1200.00"),
            "hired": datetime(2014, 6, 4).date(),
            "seen": datetime(2024, 9, 2, 11, 0),
            "active": True,
        },
        {"id": 3, "name": "Cy", "salary": None, "hired": None, "seen": None, "active": None},
    ]
    types = {
        f.name: f.dataType.simpleString()
        for f in spark.read.parquet(metrics["tables"]["hr.employee"]["path"]).schema
    }
    assert types == {
        "id": "int", "name": "string", "salary": "decimal(10,2)", "hired": "date", "seen": "timestamp", "active": "boolean",
    }  # fmt: skip
    assert metrics["quarantine"]["reasons"] == {"type mismatch": 1}
    # The definition file is listed and read, but holds no records.
    assert metrics["files"]["read"] == 3 and metrics["events"]["read"] == 4
    assert_events_add_up(metrics)

    events = decode_events(spark, FMT, landing)
    assert {tuple(e["key_cols"]) for e in events} == {("id",)}
    # --columns wins over the definition's names (its types are for its own names); --key over its key.
    renamed = ("a", "b", "c", "d", "e", "f")
    events = decode_events(spark, FMT, landing, key_columns=("b",), table_columns={"employee": renamed})
    assert {e["key_cols"] is None for e in events} == {True}
    assert events[0]["after"] == {"a": "1", "b": 'Ann "the boss"', "c": "1200.00", "d": "2014-06-04",
                                  "e": "2024-09-02 11:00:00.000000", "f": "1"}  # fmt: skip


def test_the_column_options_reach_the_decoder_from_the_command_line(spark, tmp_path):
    from airflow_cdc_provider.contract.args import SnapshotArgs
    from airflow_cdc_provider.replay.runs.snapshot import run_snapshot
    from airflow_cdc_provider.replay.spec import SnapshotSpec

    landing = employee(tmp_path)

    def run(output: str, columns: str, *extra: str, as_of: int = CHANGE_1_MS + 2000) -> dict:
        argv = ["--format", FMT, "--input", str(landing), "--as-of", str(as_of)]
        argv += ["--output", str(tmp_path / output), "--key", "id", "--columns", columns, *extra]
        spec = SnapshotSpec.each_from_args(SnapshotArgs.from_argv(argv))[0]
        assert spec.decode_options.table_columns == {"employee": tuple(columns.split("=")[1].split(","))}
        return run_snapshot(spark, spec)

    columns = "employee=" + ",".join(EMPLOYEE)
    metrics = run("full", columns, "--keep-state")
    assert metrics["tables"]["hr.employee"]["rows"] == 4 and metrics["quarantine"]["records"] == 0
    # The next day starts from that state: only the file with an event after its AS OF is read again.
    base = str(tmp_path / "full")
    metrics = run("next", columns, "--base", base, as_of=CHANGE_1_MS + 5000)
    assert metrics["incremental"]["applied"] is True
    assert metrics["tables"]["hr.employee"]["rows"] == 3  # 101 deleted
    assert metrics["events"]["applied"] == 1
    # A run whose --columns differ cannot start from that state: it rebuilds in full.
    metrics = run("other", "employee=id,last,first,hired,town", "--base", base, as_of=CHANGE_1_MS + 5000)
    assert metrics["incremental"]["applied"] is False
    assert metrics["incremental"]["reason"] == "--columns or --timestamp-column differs from the base's"
    assert metrics["tables"]["hr.employee"]["rows"] == 3


# --- S3 target: Parquet ---------------------------------------------------------------------------------


def test_parquet_load_and_changes_with_a_timestamp_column(spark, replay, tmp_path):
    table = tmp_path / "in" / "shop" / "items"
    table.mkdir(parents=True)
    pq.write_table(
        pa.table(
            {
                "id": pa.array([1, 2], pa.int32()),
                "price": pa.array([Decimal("1.50"), Decimal("2.00")], pa.decimal128(10, 2)),
            }
        ),
        table / "LOAD00000001.parquet",
    )
    pq.write_table(
        pa.table(
            {
                "Op": ["U", "D", "I", "X"],
                "dms_ts": [
                    stamp(T0 + 2000, "%Y-%m-%d %H:%M:%S.%f"),
                    stamp(T0 + 3000, "%Y-%m-%d %H:%M:%S.%f"),
                    stamp(T0 + 1000, "%Y-%m-%d %H:%M:%S.%f"),
                    stamp(T0, "%Y-%m-%d %H:%M:%S.%f"),
                ],
                "id": pa.array([1, 2, 3, 4], pa.int32()),
                "price": pa.array(
                    [Decimal("1.75"), Decimal("2.00"), Decimal("9.99"), None], pa.decimal128(10, 2)
                ),
            }
        ),
        table / "20240902-1000000000.parquet",
    )
    write(table / "20240902-1000010000.parquet", b"PAR1 this is not a parquet file")
    events = decode_events(spark, FMT, tmp_path / "in", timestamp_column="dms_ts")
    assert [(Path(e["file"]).name, e["file_pos"], e["op"], e["reason"], e["event_ms"]) for e in events] == [
        ("20240902-1000000000.parquet", 0, "update", None, T0 + 2000),
        ("20240902-1000000000.parquet", 1, "delete", None, T0 + 3000),
        ("20240902-1000000000.parquet", 2, "insert", None, T0 + 1000),
        ("20240902-1000000000.parquet", 3, None, "unknown op", T0),
        ("20240902-1000010000.parquet", 0, None, "bad Parquet", T0 + 1000),
        ("LOAD00000001.parquet", 0, "read", None, None),
        ("LOAD00000001.parquet", 1, "read", None, None),
    ]
    assert events[0]["types"] == {"id": "int", "price": "decimal(10,2)"}
    metrics, tables = replay(FMT, tmp_path / "in", key="id", timestamp_column="dms_ts")
    assert sorted(tables["shop.items"], key=lambda r: r["id"]) == [
        {"id": 1, "price": Decimal("1.75")},
        {"id": 3, "price": Decimal("9.99")},
    ]
    assert metrics["quarantine"]["reasons"] == {"unknown op": 1, "bad Parquet": 1}
    assert_events_add_up(metrics)


# --- small helpers ------------------------------------------------------------------------------------------


def test_table_and_file_time_from_the_path():
    assert [
        table_of(p)
        for p in (
            "s3a://bucket/folder/hr/employee/LOAD00000001.csv",
            "file:/lake/dms/hr/employee/2024/09/02/20240902-1134010000.csv",
            "file:/lake/dms/hr/employee/dt=2024-09-02/x.parquet",
            "s3a://bucket/LOAD00000001.csv",
        )
    ] == ["hr.employee", "hr.employee", "hr.employee", None]
    assert file_time_ms("s3a://b/hr/employee/20141029-1134010000.csv") == 1414582441000
    assert file_time_ms("/x/20141029-113401123.csv.gz") == 1414582441123
    assert file_time_ms("/x/LOAD00000001.csv") is None

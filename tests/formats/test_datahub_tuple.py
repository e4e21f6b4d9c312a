"""datahub-tuple: the seed's TUPLE example, JSON/CSV/Parquet landings, update pairs, malformed records."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import assert_events_add_up

FMT = "datahub-tuple"

# --- seed 003, "TUPLE", the example table copied verbatim (its column order and values) -------------

SEED_COLUMNS = ["_sequence_id_", "_operation_type_", "_excute_time_", "_before_image_", "_after_image_"]
SEED_ROWS = [
    ["1649991610688000000", "I", "1649991726000", "N", "Y"],
    ["1649991610688000001", "U", "1649991756000", "Y", "N"],
    ["1649991610688000001", "U", "1649991756000", "N", "Y"],
    ["1649991610688000002", "D", "1649991774000", "Y", "N"],
]

META = [
    "_sequence_id_",
    "_operation_type_",
    "_excute_time_",
    "_source_table_",
    "_before_image_",
    "_after_image_",
]


def decode(spark, path: Path, **options) -> list[dict]:
    """Canonical events of ``path`` in landing order, images as plain Python values."""
    from tests.conftest import decode_events

    return decode_events(spark, FMT, path, **options)


def pick(events: list[dict], *fields: str) -> list[dict]:
    return [{f: e[f] for f in fields} for e in events]


def write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def write_jsonl(path: Path, records: list) -> Path:
    return write_text(path, "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return write_text(path, buf.getvalue())


def write_parquet(path: Path, columns: dict[str, tuple[pa.DataType, list]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({name: pa.array(values, type=t) for name, (t, values) in columns.items()})
    pq.write_table(table, str(path))
    return path


# --- the seed's example ----------------------------------------------------------------------------


def test_seed_example_decodes_exactly(spark, tmp_path):
    # The seed's table has no _source_table_ and no business columns: the table comes from --table.
    path = write_csv(tmp_path / "seed" / "tuple.csv", SEED_COLUMNS, SEED_ROWS)
    events = decode(spark, path, table="demo.orders")
    assert pick(events, "table", "kind", "op", "reason", "event_ms", "log_pos", "sub_pos", "line") == [
        {
            "table": "demo.orders",
            "kind": "change",
            "op": "insert",
            "reason": None,
            "event_ms": 1649991726000,
            "log_pos": [1649991610688000000],
            "sub_pos": 0,
            "line": 2,
        },
        {
            "table": "demo.orders",
            "kind": "ignored",
            "op": None,
            "reason": "update before image",
            "event_ms": 1649991756000,
            "log_pos": [1649991610688000001],
            "sub_pos": 0,
            "line": 3,
        },
        {
            "table": "demo.orders",
            "kind": "change",
            "op": "update",
            "reason": None,
            "event_ms": 1649991756000,
            "log_pos": [1649991610688000001],
            "sub_pos": 0,
            "line": 4,
        },
        {
            "table": "demo.orders",
            "kind": "change",
            "op": "delete",
            "reason": None,
            "event_ms": 1649991774000,
            "log_pos": [1649991610688000002],
            "sub_pos": 0,
            "line": 5,
        },
    ]
    insert, before_half, update, delete = events
    # No business columns: images carry nothing; the update's before image comes from its pair.
    assert (insert["before"], insert["after"]) == (None, {})
    assert (before_half["before"], before_half["after"]) == (None, None)
    assert (update["before"], update["after"], update["partial"]) == ({}, {}, False)
    assert (delete["before"], delete["after"]) == ({}, None)
    assert all(e["key_cols"] is None and e["types"] is None for e in events)
    assert insert["raw"] == ",".join(SEED_ROWS[0]) and insert["file"].endswith("/seed/tuple.csv")


def seed_with_columns() -> list[dict]:
    """The seed's four records with a source table and business columns, as DataWorks lands them."""
    values = [(1, "joe"), (1, "joe"), (1, "jim"), (1, "jim")]
    return [
        {
            **dict(zip(SEED_COLUMNS, row)),
            "_excute_time_": int(row[2]),
            "_source_table_": "demo.orders",
            "id": id_,
            "name": name,
        }
        for row, (id_, name) in zip(SEED_ROWS, values)
    ]


@pytest.mark.parametrize(
    ("as_of", "rows", "applied", "after_as_of"),
    [
        (1649991760000, [{"id": 1, "name": "jim"}], 2, 1),  # after the update, before the delete
        ("2100-01-01T00:00:00Z", [], 3, 0),
    ],
)
def test_seed_example_replays(replay, tmp_path, as_of, rows, applied, after_as_of):
    path = write_jsonl(tmp_path / "seed" / "tuple.json", seed_with_columns())
    metrics, tables = replay(FMT, path, as_of, key="id")
    assert tables == {"demo.orders": rows}
    assert metrics["events"] == {
        "read": 4,
        "applied": applied,
        "after_as_of": after_as_of,
        "ignored": 1,
        "duplicates": 0,
        "quarantined": 0,
    }
    assert metrics["ignored"] == {"update before image": 1}
    assert_events_add_up(metrics)


# --- one change stream landed three ways -------------------------------------------------------------

# id 1 inserted, updated in place, deleted; id 2 inserted, then its key changes to 3 (the update's two
# halves land in different files); id 4 inserted with a null name. Times in ms.
STREAM = [
    # seq, op, time, before, after, id, name, amount
    ["1000", "I", 1700000001000, "N", "Y", 1, "apple", "10.50"],
    ["1001", "I", 1700000002000, "N", "Y", 2, "pear", "20.00"],
    ["1002", "U", 1700000003000, "Y", "N", 1, "apple", "10.50"],
    ["1002", "U", 1700000003000, "N", "Y", 1, "apple, green", "11.25"],
    ["1003", "U", 1700000004000, "Y", "N", 2, "pear", "20.00"],
    # --- second file ---
    ["1003", "U", 1700000004000, "N", "Y", 3, "pear", "20.00"],
    ["1004", "I", 1700000005000, "N", "Y", 4, None, "0.00"],
    ["1005", "D", 1700000006000, "Y", "N", 1, "apple, green", "11.25"],
]
FIRST_FILE = 5


def stream_records(table: str) -> list[dict]:
    out = []
    for seq, op, ms, b, a, id_, name, amount in STREAM:
        out.append(
            {
                "_sequence_id_": seq,
                "_operation_type_": op,
                "_excute_time_": ms,
                "_source_table_": table,
                "_before_image_": b,
                "_after_image_": a,
                "id": id_,
                "name": name,
                "amount": float(amount),
            }
        )
    return out


def land_json(d: Path, table: str) -> None:
    records = stream_records(table)
    write_jsonl(d / "part-0.json", records[:FIRST_FILE])
    write_jsonl(d / "part-1.jsonl", records[FIRST_FILE:])


def land_csv(d: Path, table: str) -> None:
    header = META + ["id", "name", "amount"]
    rows = [[seq, op, ms, table, b, a, id_, name, amount] for seq, op, ms, b, a, id_, name, amount in STREAM]
    write_csv(d / "part-0.csv", header, rows[:FIRST_FILE])
    write_csv(d / "part-1.csv", header, rows[FIRST_FILE:])


def land_parquet(d: Path, table: str) -> None:
    def columns(rows):
        return {
            "_sequence_id_": (pa.string(), [r[0] for r in rows]),
            "_operation_type_": (pa.string(), [r[1] for r in rows]),
            "_excute_time_": (pa.int64(), [r[2] for r in rows]),
            "_source_table_": (pa.string(), [table] * len(rows)),
            "_before_image_": (pa.string(), [r[3] for r in rows]),
            "_after_image_": (pa.string(), [r[4] for r in rows]),
            "id": (pa.int32(), [r[5] for r in rows]),
            "name": (pa.string(), [r[6] for r in rows]),
            "amount": (pa.decimal128(10, 2), [Decimal(r[7]) for r in rows]),
        }

    write_parquet(d / "part-0.parquet", columns(STREAM[:FIRST_FILE]))
    write_parquet(d / "part-1.parquet", columns(STREAM[FIRST_FILE:]))


def test_json_csv_and_parquet_landings_replay_the_same_stream(spark, replay, tmp_path):
    land = tmp_path / "land"
    land_json(land / "json", "shop.orders_json")
    land_csv(land / "csv", "shop.orders_csv")
    land_parquet(land / "parquet", "shop.orders_parquet")

    # Types: JSON values keep their JSON type, Parquet declares its column types, CSV is text.
    events = [e for e in decode(spark, land) if e["op"] == "update"]
    assert [(e["table"], e["types"]) for e in events] == [
        ("shop.orders_csv", None),
        ("shop.orders_csv", None),
        ("shop.orders_json", None),
        ("shop.orders_json", None),
        ("shop.orders_parquet", {"id": "int", "name": "string", "amount": "decimal(10,2)"}),
        ("shop.orders_parquet", {"id": "int", "name": "string", "amount": "decimal(10,2)"}),
    ]
    by_table = {e["table"]: e for e in events if e["log_pos"] == [1003]}
    # The key-changing update carries its pair's before image, across files.
    assert by_table["shop.orders_json"]["before"] == {"id": 2, "name": "pear", "amount": 20.0}
    assert by_table["shop.orders_json"]["after"] == {"id": 3, "name": "pear", "amount": 20.0}
    assert by_table["shop.orders_csv"]["before"] == {"id": "2", "name": "pear", "amount": "20.00"}
    assert by_table["shop.orders_parquet"]["before"] == {"id": 2, "name": "pear", "amount": Decimal("20.00")}
    parquet_files = {
        e["file"].rsplit("/", 1)[1]: e["file_pos"] for e in events if e["table"] == "shop.orders_parquet"
    }
    assert parquet_files == {"part-0.parquet": 3, "part-1.parquet": 0}  # row index inside each file

    metrics, tables = replay(FMT, land, key="id")
    assert tables == {  # rows sorted by their JSON text, so id 4 (amount 0) comes first
        "shop.orders_csv": [
            {"id": "4", "name": None, "amount": "0.00"},
            {"id": "3", "name": "pear", "amount": "20.00"},
        ],
        "shop.orders_json": [
            {"id": 4, "name": None, "amount": 0.0},
            {"id": 3, "name": "pear", "amount": 20.0},
        ],
        "shop.orders_parquet": [
            {"id": 4, "name": None, "amount": Decimal("0.00")},
            {"id": 3, "name": "pear", "amount": Decimal("20.00")},
        ],
    }
    assert metrics["events"] == {
        "read": 24,
        "applied": 18,
        "after_as_of": 0,
        "ignored": 6,
        "duplicates": 0,
        "quarantined": 0,
    }
    for table in tables:
        t = metrics["tables"][table]
        assert (t["rows"], t["inserts"], t["updates"], t["deletes"]) == (2, 3, 2, 1)
        assert t["last_event_ms"] == 1700000006000
        # TUPLE's own column order (JSON keys, CSV header, Parquet schema), not by name.
        assert spark.read.parquet(t["path"]).columns == ["id", "name", "amount"]
    assert_events_add_up(metrics)


def test_csv_quoting_and_nulls(spark, tmp_path):
    text = (
        "\ufeff" + ",".join(META) + ",id,note,empty\r\n"
        '7,I,1700000001000,db.t,N,Y,1,"comma, ""quoted"" text","" \r\n'
        '8,I,1700000001000,db.t,N,Y,2,,""\r\n'
    )
    events = decode(spark, write_text(tmp_path / "q.csv", text))
    assert [e["after"] for e in events] == [
        {"id": "1", "note": 'comma, "quoted" text', "empty": '"" '},  # a quote not closing the field is text
        {"id": "2", "note": None, "empty": ""},  # unquoted empty is null, quoted empty is ""
    ]
    assert [e["line"] for e in events] == [2, 3]


def test_parquet_schema_drift_across_files_is_widened(spark, replay, tmp_path):
    d = tmp_path / "pq"
    ts = pa.timestamp("us", tz="UTC")
    write_parquet(
        d / "a.parquet",
        {
            "_sequence_id_": (pa.int64(), [1]),
            "_operation_type_": (pa.string(), ["I"]),
            "_excute_time_": (ts, [datetime(2024, 1, 1, tzinfo=timezone.utc)]),
            "_source_table_": (pa.string(), ["db.t"]),
            "_before_image_": (pa.string(), ["N"]),
            "_after_image_": (pa.string(), ["Y"]),
            "id": (pa.int32(), [1]),
            "qty": (pa.int32(), [5]),
        },
    )
    write_parquet(
        d / "b.parquet",
        {
            "_sequence_id_": (pa.int64(), [2]),
            "_operation_type_": (pa.string(), ["I"]),
            "_excute_time_": (ts, [datetime(2024, 1, 2, tzinfo=timezone.utc)]),
            "_source_table_": (pa.string(), ["db.t"]),
            "_before_image_": (pa.string(), ["N"]),
            "_after_image_": (pa.string(), ["Y"]),
            "id": (pa.int32(), [2]),
            "qty": (pa.int64(), [2**40]),
            "note": (pa.string(), ["later column"]),
        },
    )
    events = decode(spark, d)
    assert pick(events, "event_ms", "log_pos", "types") == [
        {"event_ms": 1704067200000, "log_pos": [1], "types": {"id": "int", "qty": "int"}},
        {
            "event_ms": 1704153600000,
            "log_pos": [2],
            "types": {"id": "int", "qty": "bigint", "note": "string"},
        },
    ]
    # Each file keeps its own columns: the first file's row does not carry `note` at all.
    assert [e["after"] for e in events] == [
        {"id": 1, "qty": 5},
        {"id": 2, "qty": 2**40, "note": "later column"},
    ]

    metrics, tables = replay(FMT, d, key="id")
    assert tables == {
        "db.t": [{"id": 1, "qty": 5, "note": None}, {"id": 2, "qty": 2**40, "note": "later column"}]
    }
    assert_events_add_up(metrics)


# --- malformed records -------------------------------------------------------------------------------


def test_malformed_records_are_quarantined_with_their_reason(spark, replay, tmp_path):
    good = {
        "_sequence_id_": "10",
        "_operation_type_": "I",
        "_excute_time_": 1700000000000,
        "_source_table_": "db.t",
        "_before_image_": "N",
        "_after_image_": "Y",
        "id": 1,
        "v": "ok",
    }
    d = tmp_path / "bad"
    write_jsonl(
        d / "a.json",
        [
            good,
            {**good, "_operation_type_": None, "id": 2},  # missing op
            {**good, "_operation_type_": "X", "id": 3},  # unknown op
            {**good, "_sequence_id_": "12abc", "id": 4},  # sequence id not a number
            {**good, "_excute_time_": "yesterday", "id": 5},  # event time unreadable
            {**good, "_source_table_": "", "id": 6},  # no table, and no --table
            {
                **good,
                "_operation_type_": "U",
                "_before_image_": "N",
                "_after_image_": "N",
                "id": 7,
            },  # which half?
            "{not json",
            "[1, 2]",
            "",  # Kafka tombstone
            {
                **good,
                "_sequence_id_": "11",
                "_operation_type_": "u",
                "_excute_time_": "2023-11-14T22:13:21Z",
                "_before_image_": "n",
                "_after_image_": "y",
                "id": 1,
                "v": "updated",
            },  # lower case and ISO time
        ],
    )
    write_text(
        d / "b.csv",
        ",".join(META + ["id", "v"]) + "\n"
        "20,I,1700000000000,db.c,N,Y,8,x\n"
        "21,I,1700000000000,db.c,N,Y,9,x,extra\n"  # more fields than the header
        "22,I,1700000000000,db.c,N",
    )  # cut off: last line, unterminated
    events = decode(spark, d)
    assert pick(events, "kind", "reason", "line") == [
        {"kind": "change", "reason": None, "line": 1},
        {"kind": "quarantined", "reason": "missing op", "line": 2},
        {"kind": "quarantined", "reason": "unknown op", "line": 3},
        {"kind": "quarantined", "reason": "type mismatch", "line": 4},
        {"kind": "quarantined", "reason": "type mismatch", "line": 5},
        {"kind": "quarantined", "reason": "missing table", "line": 6},
        {"kind": "quarantined", "reason": "missing image", "line": 7},
        {"kind": "quarantined", "reason": "not JSON", "line": 8},
        {"kind": "quarantined", "reason": "not a JSON object", "line": 9},
        {"kind": "ignored", "reason": "tombstone", "line": 10},
        {"kind": "change", "reason": None, "line": 11},
        {"kind": "change", "reason": None, "line": 2},
        {"kind": "quarantined", "reason": "CSV record does not match header", "line": 3},
        {"kind": "quarantined", "reason": "truncated", "line": 4},
    ]
    assert events[10]["op"] == "update" and events[10]["event_ms"] == 1700000001000
    assert events[10]["before"] is None  # no before half landed: the engine upserts

    metrics, tables = replay(FMT, d, key="id")
    assert tables == {"db.c": [{"id": "8", "v": "x"}], "db.t": [{"id": 1, "v": "updated"}]}
    assert metrics["events"] == {
        "read": 14,
        "applied": 3,
        "after_as_of": 0,
        "ignored": 1,
        "duplicates": 0,
        "quarantined": 10,
    }
    assert metrics["quarantine"]["reasons"] == {
        "CSV record does not match header": 1,
        "missing image": 1,
        "missing op": 1,
        "missing table": 1,
        "not JSON": 1,
        "not a JSON object": 1,
        "truncated": 1,
        "type mismatch": 2,
        "unknown op": 1,
    }
    assert_events_add_up(metrics)


# --- small helpers --------------------------------------------------------------------------------------


def test_landing_kind_by_extension():
    from airflow_cdc_provider.formats.datahub.tuple_topic import is_metadata_column, landing_kind

    assert [
        landing_kind(p)
        for p in (
            "s3a://b/t/part-0.json",
            "file:/x/a.jsonl.gz",
            "/x/a.txt.bz2",
            "/x/a.CSV",
            "/x/a.csv.gz",
            "/x/part-00000-abc.snappy.parquet",
            "/x/no_extension",
        )
    ] == ["json", "json", "json", "csv", "csv", "parquet", "json"]
    assert [is_metadata_column(n) for n in ("_sequence_id_", "_id", "id_", "_", "__", "name")] == [
        True,
        False,
        False,
        False,
        False,
        False,
    ]


def test_event_time_forms(spark):
    from airflow_cdc_provider.formats.datahub.tuple_topic import event_ms_from_text
    from airflow_cdc_provider.spark import sqlexpr as E

    texts = ["1649991726000", "1649991726000123", "2022-04-15 02:42:06", " ", None, "soon"]
    ms, bad = event_ms_from_text(E.col("t"))
    rows = (
        spark.createDataFrame([(t,) for t in texts], "t string")
        .select(*E.columns(ms.alias("ms"), bad.alias("bad")))
        .collect()
    )
    assert [(r["ms"], r["bad"]) for r in rows] == [
        (1649991726000, False),
        (1649991726000, False),
        (1649990526000, False),
        (None, False),
        (None, False),
        (None, True),
    ]

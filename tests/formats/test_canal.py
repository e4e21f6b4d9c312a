"""canal-json: seed samples, the Flink and Paimon conformance files, malformed records, drift."""

from __future__ import annotations

import json
import struct
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from tests.conftest import CONFORMANCE, assert_events_add_up

from reference.records.canal import msg

FMT = "canal-json"

# --- seed 002, "Canal JSON", copied verbatim -------------------------------------------------------

SEED_PRE_2022_DELETE = """{
    "old": [
        {
            "shipping_type": "aaa"
        }
    ], 
    "database": "dbname", 
    "es": 1600161894000, 
    "id": 58, 
    "isDdl": false, 
    "mysqlType": {
        "id": "bigint(20)", 
        "shipping_type": "varchar(50)"
    }, 
    "pkNames": [
        "id"
    ], 
    "sql": "", 
    "sqlType": {
        "id": -5, 
        "shipping_type": 12
    }, 
    "table": "tablename", 
    "ts": 1600161894771, 
    "type": "DELETE"
}
"""

SEED_DELETE = """{
    "data": [
        {
            "id": "500000287", 
            "shipping_type": null
        }
    ], 
    "database": "dbname", 
    "es": 1600161894000, 
    "id": 58, 
    "isDdl": false, 
    "mysqlType": {
        "id": "bigint(20)", 
        "shipping_type": "varchar(50)"
    }, 
    "pkNames": [
        "id"
    ], 
    "sql": "", 
    "sqlType": {
        "id": -5, 
        "shipping_type": 12
    }, 
    "table": "tablename", 
    "ts": 1600161894771, 
    "type": "DELETE"
}
"""

SEED_DDL = """{  
    "database": "dbname",    The name of the source database.
    "es": 1600161894000,    The time when the data is written to the binary logs of the source database.
    "id": 58,      The offsets of DTS cache.
    "isDdl": true,       Indicates that the operation is a DDL operation.
    "sql": "eg: create xxx",      The DDL statements recorded in the binary logs.
    "table": "tablename",       The name of the table that is synchronized.
    "ts": 1600161894771,      The time when the data is written to the destination database by using DTS.
    "type": "DDL"                 
}"""

# The seed's DDL sample with its annotations taken out (the annotated text is not JSON).
SEED_DDL_CLEAN = (
    '{"database": "dbname", "es": 1600161894000, "id": 58, "isDdl": true, "sql": "eg: create xxx", '
    '"table": "tablename", "ts": 1600161894771, "type": "DDL"}'
)

TYPES_ID = {"id": "bigint(20)", "shipping_type": "varchar(50)"}


def f32(text: str) -> float:
    return struct.unpack("<f", struct.pack("<f", float(text)))[0]


def decode(spark, path: Path, **options) -> list[dict]:
    """Canonical events of ``path`` in landing order, images as plain Python values."""
    from tests.conftest import decode_events

    return decode_events(spark, FMT, path, **options)


def by_key(rows: list[dict], *cols: str) -> list[dict]:
    return sorted(rows, key=lambda r: tuple(r[c] for c in cols))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --- seed samples -----------------------------------------------------------------------------------


def test_seed_samples_decode_exactly(spark, tmp_path):
    d = tmp_path / "seed"
    write(d / "1_pre2022_delete.json", SEED_PRE_2022_DELETE)
    write(d / "2_delete.json", SEED_DELETE)
    write(d / "3_ddl_annotated.json", SEED_DDL)
    write(d / "4_ddl.json", SEED_DDL_CLEAN + "\n")
    events = decode(spark, d)
    common = {
        "table": "dbname.tablename",
        "event_ms": 1600161894000,
        "log_pos": [1600161894000, 58],
        "sub_pos": 0,
    }
    assert [
        {k: e[k] for k in ("table", "kind", "op", "reason", "event_ms", "log_pos", "sub_pos")} for e in events
    ] == [
        {**common, "kind": "change", "op": "delete", "reason": None},
        {**common, "kind": "change", "op": "delete", "reason": None},
        {
            "table": None,
            "kind": "quarantined",
            "op": None,
            "reason": "not JSON",
            "event_ms": None,
            "log_pos": None,
            "sub_pos": 0,
        },
        {**common, "kind": "ignored", "op": None, "reason": "ddl"},
    ]
    pre2022, delete, annotated, ddl = events
    # Pre-2022 layout: the DELETE's row is in `old` (the seed's row carries no key value).
    assert pre2022["before"] == {"shipping_type": "aaa"} and pre2022["after"] is None
    assert pre2022["key_cols"] == ["id"]
    assert pre2022["types"] == {"id": "bigint", "shipping_type": "string"}
    assert delete["before"] == {"id": 500000287, "shipping_type": None} and delete["after"] is None
    assert annotated["raw"] == SEED_DDL
    assert ddl["types"] is None and ddl["raw"] == SEED_DDL_CLEAN


def test_seed_samples_replay(replay, tmp_path):
    d = tmp_path / "seed"
    # The row the seed's DELETE removes, inserted first (full row), and a second row that stays.
    insert = msg(
        "INSERT",
        [{"id": "500000287", "shipping_type": "express"}, {"id": "500000288", "shipping_type": None}],
        table="tablename",
        db="dbname",
        es=1600161893000,
        id_=57,
        mysql=TYPES_ID,
    )
    write(d / "0_insert.json", insert + "\n")
    write(d / "1_pre2022_delete.json", SEED_PRE_2022_DELETE)
    write(d / "2_delete.json", SEED_DELETE)
    write(d / "3_ddl_annotated.json", SEED_DDL)
    metrics, tables = replay(FMT, d)
    assert tables == {"dbname.tablename": [{"id": 500000288, "shipping_type": None}]}
    assert metrics["events"] == {
        "read": 5,
        "applied": 3,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 2,
    }
    # The seed's pre-2022 DELETE names no value of its key column `id`.
    assert metrics["quarantine"]["reasons"] == {"missing key": 1, "not JSON": 1}
    t = metrics["tables"]["dbname.tablename"]
    assert (t["inserts"], t["deletes"], t["rows"]) == (2, 1, 1)
    assert_events_add_up(metrics)


# --- conformance corpus -----------------------------------------------------------------------------

FLINK_TYPES = {"id": int, "name": str, "description": str, "weight": f32}


def typed_rows(raw_rows: list[dict], casts: dict) -> list[dict]:
    return [{k: None if v is None else casts[k](v) for k, v in r.items()} for r in raw_rows]


@pytest.mark.corpus
def test_flink_canal_data(replay, spark):
    path = CONFORMANCE / "flink" / "canal-data.txt"
    expected = json.loads((CONFORMANCE / "flink" / "canal-data.expected.json").read_text())
    metrics, tables = replay(FMT, path)
    assert list(tables) == ["inventory.products2"]
    # mysqlType's order, the source table's.
    columns = spark.read.parquet(metrics["tables"]["inventory.products2"]["path"]).columns
    assert columns == ["id", "name", "description", "weight"]
    assert by_key(tables["inventory.products2"], "id") == by_key(
        typed_rows(expected["rows"], FLINK_TYPES), "id"
    )
    # 9 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 2 + 2 rows in 10 row messages, and one DDL message.
    assert metrics["events"] == {
        "read": 21,
        "applied": 20,
        "after_as_of": 0,
        "ignored": 1,
        "duplicates": 0,
        "quarantined": 0,
    }
    assert metrics["ignored"] == {"ddl": 1}
    t = metrics["tables"]["inventory.products2"]
    assert (t["rows"], t["inserts"], t["updates"], t["deletes"]) == (8, 11, 6, 3)
    assert t["last_event_ms"] == 1589374013000
    assert_events_add_up(metrics)


@pytest.mark.corpus
def test_flink_canal_data_filter_table(replay):
    path = CONFORMANCE / "flink" / "canal-data-filter-table.txt"
    expected = json.loads((CONFORMANCE / "flink" / "canal-data-filter-table.expected.json").read_text())
    metrics, tables = replay(FMT, path)
    assert sorted(tables) == ["mydb.orders", "mydb.product"]
    assert by_key(tables["mydb.product"], "id") == by_key(typed_rows(expected["rows"], FLINK_TYPES), "id")
    orders = expected["other_tables_not_test_asserted"]["mydb.orders"]["rows"]
    order_types = {
        "order_number": int,
        "order_date": date.fromisoformat,
        "purchaser": int,
        "quantity": int,
        "product_id": int,
    }
    assert by_key(tables["mydb.orders"], "order_number") == by_key(
        typed_rows(orders, order_types), "order_number"
    )
    # mydb.project declares `id` as int(11) but holds "A101"...: the whole 9-row message is quarantined
    # (the corpus lists its raw strings because Flink's test filters that table out).
    assert metrics["quarantine"]["reasons"] == {"type mismatch": 1}
    assert metrics["ignored"] == {"ddl": 2}
    assert metrics["events"] == {
        "read": 29,
        "applied": 26,
        "after_as_of": 0,
        "ignored": 2,
        "duplicates": 0,
        "quarantined": 1,
    }
    assert_events_add_up(metrics)


PAIMON_DIR = CONFORMANCE / "paimon" / "canal" / "table" / "schemaevolution"
LICENCE_LINES = 17  # each Paimon file starts with a 17-line /* ... */ ASF licence comment


def _paimon_casts(v5_bits: int) -> dict:
    return {
        "pt": int,
        "_id": int,
        "v1": str,
        "v2": int,
        "v3": Decimal,
        "v4": lambda s: s.encode("latin-1"),
        "v5": f32 if v5_bits == 32 else float,
    }


@pytest.mark.corpus
@pytest.mark.parametrize("upto", [1, 2, 3, 4, 5])
def test_paimon_schema_evolution(replay, upto):
    expected = json.loads((PAIMON_DIR / "schemaevolution.expected.json").read_text())
    inputs = [PAIMON_DIR / f"canal-data-{i}.txt" for i in range(1, upto + 1)]
    metrics, tables = replay(FMT, inputs)
    assert sorted(tables) == ["paimon_sync_table.schema_evolution_1", "paimon_sync_table.schema_evolution_2"]
    # Paimon merges both source tables into one target keyed (pt, _id); their _id values do not collide.
    got = [r for t in tables.values() for r in t]
    # v5 is FLOAT until file 5 widens it to DOUBLE.
    casts = _paimon_casts(64 if upto == 5 else 32)
    want = typed_rows(expected["steps"][upto - 1]["rows"], casts)
    drop_nulls = lambda rows: by_key([{k: v for k, v in r.items() if v is not None} for r in rows], "_id")  # noqa: E731
    assert drop_nulls(got) == drop_nulls(want)
    columns = {name: sorted(rows[0]) if rows else [] for name, rows in tables.items()}
    evolved = {
        1: ["_id", "pt", "v1"],
        2: ["_id", "pt", "v1", "v2"],
        3: ["_id", "pt", "v1", "v2"],
        4: ["_id", "pt", "v1", "v2", "v3", "v4", "v5"],
        5: ["_id", "pt", "v1", "v2", "v3", "v4", "v5"],
    }[upto]
    assert set(map(tuple, columns.values())) == {tuple(evolved)}
    assert metrics["quarantine"]["reasons"] == {"not JSON": LICENCE_LINES * upto}
    assert_events_add_up(metrics)


# --- behaviour --------------------------------------------------------------------------------------


def test_multi_row_messages_key_change_init_truncate_layouts_and_duplicates(spark, replay, tmp_path):
    rows3 = [{"id": "1", "name": "a"}, {"id": "2", "name": "b"}, {"id": "3", "name": "c"}]
    insert = msg("INSERT", rows3, es=1000, id_=1)
    layouts = [
        msg(
            "INSERT",
            [
                {"id": "1", "shipping_type": "a"},
                {"id": "2", "shipping_type": "b"},
                {"id": "3", "shipping_type": None},
            ],
            table="tablename",
            db="dbname",
            es=1,
            id_=1,
            mysql=TYPES_ID,
        ),
        # Pre-2022: data null, the deleted row in old.
        msg(
            "DELETE",
            None,
            old=[{"id": "1", "shipping_type": "a"}],
            table="tablename",
            db="dbname",
            es=2,
            id_=2,
            mysql=TYPES_ID,
        ),
        # Post-2022: data holds the row, old null.
        msg(
            "DELETE",
            [{"id": "2", "shipping_type": "b"}],
            table="tablename",
            db="dbname",
            es=3,
            id_=3,
            mysql=TYPES_ID,
        ),
    ]
    lines = layouts + [
        msg("INIT", [{"id": "9", "name": "full load"}], es=900, id_=0),
        insert,
        insert,  # delivered twice (at least once): three exact duplicates
        # One UPDATE moving key 1 to 10 and renaming 2: old holds only the changed columns.
        msg(
            "UPDATE",
            [{"id": "10", "name": "a"}, {"id": "2", "name": "bb"}],
            old=[{"id": "1"}, {"name": "b"}],
            es=2000,
            id_=2,
        ),
        msg("DELETE", [{"id": "3", "name": "c"}, {"id": "4", "name": "never there"}], es=3000, id_=3),
        msg("INSERT", [{"id": "5", "name": "e"}], table="gone", es=1000, id_=4),
        json.dumps(
            {
                "data": None,
                "database": "db",
                "es": 4000,
                "id": 5,
                "isDdl": True,
                "sql": "TRUNCATE TABLE gone",
                "table": "gone",
                "type": "TRUNCATE",
            }
        ),
    ]
    path = write(tmp_path / "in" / "a.json", "\n".join(lines) + "\n")
    events = decode(spark, path)
    update = [e for e in events if e["op"] == "update"]
    # An update's before image is its `old` row, the columns the change replaced.
    assert [(e["sub_pos"], e["before"], e["after"]) for e in update] == [
        (0, {"id": 1}, {"id": 10, "name": "a"}),
        (1, {"name": "b"}, {"id": 2, "name": "bb"}),
    ]
    assert [(e["op"], e["sub_pos"], e["before"]) for e in events[3:5]] == [
        ("delete", 0, {"id": 1, "shipping_type": "a"}),
        ("delete", 0, {"id": 2, "shipping_type": "b"}),
    ]
    assert [(e["op"], e["sub_pos"]) for e in events[5:] if e["op"] != "update"] == [
        ("read", 0),
        ("insert", 0),
        ("insert", 1),
        ("insert", 2),
        ("insert", 0),
        ("insert", 1),
        ("insert", 2),
        ("delete", 0),
        ("delete", 1),
        ("insert", 0),
        ("truncate", 0),
    ]
    assert all(e["raw"] == lines[6] for e in update)

    metrics, tables = replay(FMT, path)
    assert sorted(tables) == ["db.gone", "db.t", "dbname.tablename"] and tables["db.gone"] == []
    assert tables["dbname.tablename"] == [{"id": 3, "shipping_type": None}]
    assert by_key(tables["db.t"], "id") == [
        {"id": 2, "name": "bb"},
        {"id": 9, "name": "full load"},
        {"id": 10, "name": "a"},
    ]
    assert metrics["events"] == {
        "read": 18,
        "applied": 15,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 3,
        "quarantined": 0,
    }
    t = metrics["tables"]["db.t"]
    assert (t["inserts"], t["updates"], t["deletes"], t["deletes_of_unknown_key"]) == (4, 2, 1, 1)
    assert metrics["tables"]["db.gone"]["truncates"] == 1
    assert_events_add_up(metrics)


def test_malformed_records_are_quarantined_with_their_reason(spark, replay, tmp_path):
    good = msg("INSERT", [{"id": "1", "name": "ok"}])
    lines = [
        (good, None),
        (
            json.dumps({"data": [{"id": "2"}], "database": "db", "table": "t", "isDdl": False, "es": 1}),
            "missing op",
        ),
        (msg("UPSERT", [{"id": "3", "name": "x"}]), "unknown op"),
        (msg("INSERT", ["abc"]), "row image not an object"),
        (msg("INSERT", {"id": "4", "name": "x"}), "row image not an object"),
        (msg("INSERT", [{"id": "5", "name": "x"}, 7]), "row image not an object"),
        (msg("UPDATE", [{"id": "6", "name": "x"}], old=["y"]), "row image not an object"),
        (msg("INSERT", [{"id": "abc", "name": "x"}]), "type mismatch"),
        (msg("INSERT", [{"id": "7", "name": "x"}], es="yesterday"), "type mismatch"),
        (msg("INSERT", None), "missing image"),
        (msg("INSERT", []), "missing image"),
        (msg("DELETE", None), "key unknown: delete with neither before nor after image"),
        (msg("INSERT", [{"id": "8", "name": "x"}], table=None, db=None), "missing table"),
        ("this is not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
    ]
    text = "\n".join(line for line, _ in lines) + '\n{"data":[{"id":"9"'  # last line cut short
    path = write(tmp_path / "in" / "bad.json", text)
    events = decode(spark, path)
    assert [(e["kind"], e["reason"]) for e in events] == [("change", None)] + [
        ("quarantined", reason) for _, reason in lines[1:]
    ] + [("quarantined", "truncated")]
    assert [e["raw"] for e in events[1:-1]] == [line for line, _ in lines[1:]]

    metrics, tables = replay(FMT, path)
    assert tables == {"db.t": [{"id": 1, "name": "ok"}]}
    assert metrics["quarantine"]["reasons"] == {
        "key unknown: delete with neither before nor after image": 1,
        "missing image": 2,
        "missing op": 1,
        "missing table": 1,
        "not JSON": 1,
        "not a JSON object": 1,
        "row image not an object": 4,
        "truncated": 1,
        "type mismatch": 2,
        "unknown op": 1,
    }
    assert metrics["events"]["quarantined"] == 15
    assert_events_add_up(metrics)


def test_schema_drift_column_added_later_and_widening(spark, replay, tmp_path):
    v1 = {"id": "int(11)", "name": "varchar(20)", "n": "int"}
    v2 = {
        "id": "int(11)",
        "name": "varchar(20)",
        "n": "bigint",
        "price": "decimal(10,2)",
        "blob": "varbinary(8)",
        "f": "float",
    }
    add = json.dumps(
        {
            "data": None,
            "database": "db",
            "es": 1500,
            "id": 2,
            "isDdl": True,
            "table": "t",
            "type": "ALTER",
            "sql": "ALTER TABLE t ADD COLUMN price DECIMAL(10,2), ADD `blob` VARBINARY(8), ADD INDEX ix (n)",
        }
    )
    lines = [
        msg("INSERT", [{"id": "1", "name": "a", "n": "5"}], mysql=v1, es=1000, id_=1),
        add,
        msg(
            "INSERT",
            [{"id": "2", "name": "b", "n": "70000000000", "price": "12.30", "blob": "ab\u00ff", "f": "1.5"}],
            mysql=v2,
            es=2000,
            id_=3,
        ),
        msg(
            "INSERT",
            [{"id": "3", "name": "c", "n": "1", "price": None, "blob": "\u20ac", "f": None}],
            mysql=v2,
            es=3000,
            id_=4,
        ),
    ]
    path = write(tmp_path / "in" / "a.json", "\n".join(lines) + "\n")
    ddl = decode(spark, path)[1]
    assert (ddl["kind"], ddl["reason"], ddl["table"]) == ("ignored", "ddl", "db.t")
    assert ddl["types"] == {"price": "decimal(10,2)", "blob": "binary"}

    metrics, tables = replay(FMT, path)
    assert by_key(tables["db.t"], "id") == [
        {"id": 1, "name": "a", "n": 5, "price": None, "blob": None, "f": None},
        {
            "id": 2,
            "name": "b",
            "n": 70000000000,
            "price": Decimal("12.30"),
            "blob": bytearray(b"ab\xff"),
            "f": 1.5,
        },
        # A binary value that is not one-char-per-byte text is taken as UTF-8.
        {"id": 3, "name": "c", "n": 1, "price": None, "blob": bytearray("\u20ac".encode()), "f": None},
    ]
    assert_events_add_up(metrics)


def test_type_change_that_loses_data_stops_the_job(replay, tmp_path):
    from airflow_cdc_provider.replay.schemas import SchemaDriftError

    first = write(
        tmp_path / "in" / "a.json",
        msg("INSERT", [{"id": "1", "name": "5"}], mysql={"id": "int", "name": "int"}) + "\n",
    )
    write(
        tmp_path / "in" / "b.json",
        msg("INSERT", [{"id": "2", "name": "x"}], mysql={"id": "int", "name": "varchar(3)"}, es=2000, id_=2)
        + "\n",
    )
    with pytest.raises(SchemaDriftError) as info:
        replay(FMT, first.parent)
    message = str(info.value)
    assert (
        "db.t" in message
        and "name" in message
        and "int" in message
        and "string" in message
        and "b.json" in message
    )


def test_mysql_and_jdbc_type_names(spark):

    from airflow_cdc_provider.formats.mysql.declared_types import jdbc_spark_type, mysql_spark_type
    from airflow_cdc_provider.spark import sqlexpr as E

    cases = {
        "INTEGER": "int",
        "int(11)": "int",
        "int(10) unsigned": "bigint",
        "bigint(20)": "bigint",
        "bigint(20) unsigned": "decimal(20,0)",
        "tinyint(1)": "tinyint",
        "tinyint(3) unsigned": "smallint",
        "smallint(6)": "smallint",
        "mediumint(8)": "int",
        "NUMERIC(8,3)": "decimal(8,3)",
        "decimal(65,30)": "decimal(38,30)",
        "decimal": "decimal(10,0)",
        "FLOAT": "float",
        "float(7,4)": "float",
        "float(53)": "double",
        "DOUBLE": "double",
        "double precision": "double",
        "bit(1)": "boolean",
        "bit(8)": "bigint",
        "VARCHAR(255)": "string",
        "text": "string",
        "enum('a','b')": "string",
        "json": "string",
        "VARBINARY(10)": "binary",
        "longblob": "binary",
        "DATE": "date",
        "datetime(3)": "timestamp",
        "timestamp": "timestamp",
        "year(4)": "int",
        "geometry": None,
    }
    jdbc = {
        "-5": "bigint",
        "4": "int",
        "12": "string",
        "7": "float",
        "8": "double",
        "3": "decimal(38,10)",
        "91": "date",
        "93": "timestamp",
        "2004": "binary",
        "-3": "binary",
        "-7": "boolean",
        "1111": "string",
    }
    df = spark.createDataFrame([(k, None) for k in cases] + [(None, k) for k in jdbc], "m string, j string")
    got = df.select(
        "m",
        "j",
        *E.columns(mysql_spark_type(E.col("m")).alias("mt"), jdbc_spark_type(E.col("j")).alias("jt")),
    ).collect()
    assert {r["m"]: r["mt"] for r in got if r["m"] is not None} == cases
    assert {r["j"]: r["jt"] for r in got if r["j"] is not None} == jdbc


def _ddl(sql: str, *, es: int, id_: int) -> str:
    return json.dumps(
        {
            "data": None,
            "database": "db",
            "es": es,
            "id": id_,
            "isDdl": True,
            "table": "t",
            "type": "ALTER",
            "sql": sql,
        }
    )


def test_ddl_adds_and_drops_columns_as_of_its_position(spark, replay, tmp_path):
    v1 = {"id": "int(11)", "name": "varchar(20)", "note": "varchar(20)"}
    v2 = {"id": "int(11)", "name": "varchar(20)"}
    lines = [
        msg(
            "INSERT",
            [{"id": "1", "name": "a", "note": "n1"}, {"id": "2", "name": "b", "note": "n2"}],
            mysql=v1,
            es=1000,
            id_=1,
        ),
        # Added and never set: the column still belongs to later snapshots, typed by the DDL.
        _ddl("ALTER TABLE t ADD COLUMN score INT", es=2000, id_=2),
        _ddl("ALTER TABLE `t` DROP COLUMN `note`", es=3000, id_=3),
        msg("INSERT", [{"id": "3", "name": "c"}], mysql=v2, es=4000, id_=4),
    ]
    path = write(tmp_path / "in" / "a.json", "\n".join(lines) + "\n")
    drop = decode(spark, path)[3]
    assert (drop["kind"], drop["reason"], drop["before"], drop["types"]) == (
        "ignored",
        "ddl",
        {"note": None},
        None,
    )

    _, before_add = replay(FMT, path, as_of=1500)
    assert by_key(before_add["db.t"], "id") == [
        {"id": 1, "name": "a", "note": "n1"},
        {"id": 2, "name": "b", "note": "n2"},
    ]
    _, before_drop = replay(FMT, path, as_of=2500)
    assert by_key(before_drop["db.t"], "id") == [
        {"id": 1, "name": "a", "note": "n1", "score": None},
        {"id": 2, "name": "b", "note": "n2", "score": None},
    ]
    metrics, after = replay(FMT, path)
    assert by_key(after["db.t"], "id") == [
        {"id": 1, "name": "a", "score": None},
        {"id": 2, "name": "b", "score": None},
        {"id": 3, "name": "c", "score": None},
    ]
    assert metrics["ignored"] == {"ddl": 2}
    assert_events_add_up(metrics)


def test_a_column_added_back_after_a_drop_starts_empty(replay, tmp_path):
    v1 = {"id": "int(11)", "note": "varchar(20)"}
    lines = [
        msg("INSERT", [{"id": "1", "note": "old"}], mysql=v1, es=1000, id_=1),
        _ddl("ALTER TABLE t DROP note", es=2000, id_=2),
        _ddl("ALTER TABLE t ADD note VARCHAR(20)", es=3000, id_=3),
        msg("INSERT", [{"id": "2", "note": "new"}], mysql=v1, es=4000, id_=4),
    ]
    metrics, tables = replay(FMT, write(tmp_path / "in" / "a.json", "\n".join(lines) + "\n"))
    assert by_key(tables["db.t"], "id") == [{"id": 1, "note": None}, {"id": 2, "note": "new"}]
    assert_events_add_up(metrics)


# --- untyped values keep their JSON type -------------------------------------------------------------


def _untyped_message(rows: list[str], op: str = "INSERT", old: str = "null") -> str:
    # Written by hand: the JSON numbers must reach the decoder exactly as a producer writes them.
    return (
        f'{{"data":[{",".join(rows)}],"old":{old},"type":"{op}","database":"shop",'
        '"table":"items","pkNames":["id"],"es":1697788899000,"id":2}'
    )


def test_untyped_json_numbers_keep_their_type_and_strings_their_text(spark, replay, tmp_path):
    path = write(
        tmp_path / "untyped.json",
        "\n".join(
            [
                _untyped_message(
                    [
                        '{"id":1,"price":1.0,"qty":2,"ok":true,"label":"1.0","mixed":"abc","note":null}',
                        '{"id":2,"price":3.14,"qty":-7,"ok":false,"label":"007","mixed":1.0,"note":"x"}',
                    ]
                ),
                _untyped_message(
                    ['{"id":3,"price":2.50,"qty":0,"ok":true,"label":"","mixed":2.5,"note":"y"}'],
                ),
            ]
        )
        + "\n",
    )
    events = decode(spark, path)
    assert [e["after"] for e in events] == [
        {"id": 1, "price": 1.0, "qty": 2, "ok": True, "label": "1.0", "mixed": "abc", "note": None},
        {"id": 2, "price": 3.14, "qty": -7, "ok": False, "label": "007", "mixed": 1.0, "note": "x"},
        {"id": 3, "price": 2.5, "qty": 0, "ok": True, "label": "", "mixed": 2.5, "note": "y"},
    ]
    assert [type(e["after"]["price"]) for e in events] == [float, float, float]

    metrics, tables = replay(FMT, path)
    assert tables == {
        "shop.items": [
            {"id": 1, "price": 1.0, "qty": 2, "ok": True, "label": "1.0", "mixed": "abc", "note": None},
            {"id": 2, "price": 3.14, "qty": -7, "ok": False, "label": "007", "mixed": "1.0", "note": "x"},
            {"id": 3, "price": 2.5, "qty": 0, "ok": True, "label": "", "mixed": "2.5", "note": "y"},
        ]
    }
    types = {
        f.name: f.dataType.simpleString()
        for f in spark.read.parquet(metrics["tables"]["shop.items"]["path"]).schema
    }
    assert types == {
        "id": "bigint",
        "price": "double",
        "qty": "bigint",
        "ok": "boolean",
        "label": "string",
        "mixed": "string",
        "note": "string",
    }


def test_an_update_of_untyped_values_keeps_the_unchanged_ones(replay, tmp_path):
    path = write(
        tmp_path / "untyped_update.json",
        "\n".join(
            [
                _untyped_message(['{"id":1,"price":1.0,"qty":2}']),
                _untyped_message(['{"id":1,"price":1.5,"qty":2}'], "UPDATE", '[{"price":1.0}]'),
            ]
        )
        + "\n",
    )
    metrics, tables = replay(FMT, path)
    assert tables == {"shop.items": [{"id": 1, "price": 1.5, "qty": 2}]}
    assert metrics["events"]["applied"] == 2
    assert_events_add_up(metrics)


# --- column order: the source table's ----------------------------------------------------------------


def after_columns(spark, path: Path) -> list[list[str]]:
    """The after image's columns in map order, per event (collecting a map to Python loses its order)."""
    from pyspark.sql import functions as F

    from airflow_cdc_provider.formats import DecodeOptions, get_decoder
    from airflow_cdc_provider.spark.reader import list_landed_files

    events = get_decoder(FMT).decode(spark, list_landed_files(spark, [str(path)]), DecodeOptions())
    ordered = events.orderBy("file", "file_pos", "sub_pos").select(F.map_keys("after").alias("cols"))
    return [list(r["cols"]) for r in ordered.collect()]


def test_columns_keep_the_order_the_messages_write_them(spark, replay, tmp_path):
    declared = {
        "data": [{"zeta": "1", "id": "10", "amount": "2.50", "Name": "a"}],
        "old": None,
        "type": "INSERT",
        "database": "shop",
        "table": "typed",
        "pkNames": ["id"],
        "es": 1697788899000,
        "id": 1,
        # mysqlType declares the table's order; the row writes its values in another one.
        "mysqlType": {"id": "int(11)", "Name": "varchar(20)", "zeta": "int(11)", "amount": "decimal(10,2)"},
    }
    path = write(
        tmp_path / "order.json",
        "\n".join(
            [
                _untyped_message(['{"zeta":1,"id":1,"b":"x","a":2.5}']),
                # A later row adds a column at the end and leaves one out.
                _untyped_message(['{"zeta":2,"id":2,"a":3.5,"late":true}']),
                json.dumps(declared),
            ]
        )
        + "\n",
    )
    assert after_columns(spark, path) == [
        ["zeta", "id", "b", "a"],
        ["zeta", "id", "a", "late"],
        ["zeta", "id", "amount", "Name"],
    ]
    metrics, tables = replay(FMT, path)

    def columns(table):
        return spark.read.parquet(metrics["tables"][table]["path"]).columns

    assert columns("shop.items") == ["zeta", "id", "b", "a", "late"]
    assert columns("shop.typed") == ["id", "Name", "zeta", "amount"]
    assert tables["shop.items"] == [
        {"zeta": 1, "id": 1, "b": "x", "a": 2.5, "late": None},
        {"zeta": 2, "id": 2, "b": None, "a": 3.5, "late": True},
    ]


def test_rows_in_another_order_than_mysqltype_and_a_column_named_twice(spark, tmp_path):
    """Rows whose columns are not mysqlType's, in its order, are typed by looking each type up."""
    from airflow_cdc_provider.formats import DecodeOptions, get_decoder
    from airflow_cdc_provider.spark.reader import list_landed_files

    twice = msg("INSERT", [{"id": "8", "name": "y"}], es=2000, id_=2).replace(
        '"id": "8"', '"id": "8", "id": "9"'
    )
    lines = [
        msg("INSERT", [{"name": "x", "id": "7"}], es=1000, id_=1),
        twice,
        msg("INSERT", [{"name": "z", "id": "abc"}], es=3000, id_=3),
        msg("UPDATE", [{"id": "7", "name": "x2"}], old=[{"name": "x", "id": "seven"}], es=4000, id_=4),
    ]
    path = write(tmp_path / "in" / "a.json", "\n".join(lines) + "\n")
    events = get_decoder(FMT).decode(spark, list_landed_files(spark, [str(path)]), DecodeOptions())
    got = events.orderBy("file_pos").selectExpr("kind", "reason", "to_json(after) AS after").collect()
    assert [tuple(r) for r in got] == [
        ("change", None, '{"name":"x","id":7}'),
        ("change", None, '{"id":8,"id":9,"name":"y"}'),
        ("quarantined", "type mismatch", None),
        ("quarantined", "type mismatch", None),
    ]


# --- typing specialised on sampled declarations -----------------------------------------------------

WIDE_TYPES = {
    "id": "bigint(20) unsigned",
    "qty": "int(11)",
    "small": "tinyint(3) unsigned",
    "price": "decimal(10,2)",
    "ratio": "float",
    "weight": "double",
    "flag": "bit(1)",
    "born": "date",
    "seen": "datetime(3)",
    "photo": "varbinary(16)",
    "note": "varchar(20)",
}
WIDE_ROW = {
    "id": "18446744073709551615",
    "qty": "-7",
    "small": "255",
    "price": "12.50",
    "ratio": "0.1",
    "weight": "1e3",
    "flag": "1",
    "born": "2024-02-29",
    "seen": "2024-09-01 10:00:00.123",
    "photo": "\u00ff\u0000a",
    "note": "é ü",
}


def _declaration_cases() -> list[str]:
    """Messages of every shape the specialised typing takes or leaves to the general path."""
    wide = {"mysql": WIDE_TYPES}
    return [
        msg("INSERT", [WIDE_ROW], id_=1, **wide),
        msg("UPDATE", [{**WIDE_ROW, "qty": "8"}], old=[{"qty": "-7", "note": None}], id_=2, **wide),
        msg("UPDATE", [{**WIDE_ROW, "qty": "x"}], old=[{"qty": "8"}], id_=3, **wide),  # fails to convert
        msg("UPDATE", [{**WIDE_ROW, "born": "2024-02-30"}], old=[{"born": "bad"}], id_=4, **wide),
        msg("UPDATE", [WIDE_ROW], old=[{"other": "1"}], id_=5, **wide),  # old names an undeclared column
        msg("UPDATE", [WIDE_ROW], old=[None], id_=6, **wide),
        msg("UPDATE", [WIDE_ROW], old=[], id_=7, **wide),
        msg("DELETE", [{**WIDE_ROW, "price": None}], id_=8, **wide),
        msg("INSERT", [WIDE_ROW, {**WIDE_ROW, "id": "2"}], id_=9, **wide),  # two rows
        msg("INSERT", [{k: WIDE_ROW[k] for k in reversed(WIDE_TYPES)}], id_=10, **wide),  # other order
        msg("INSERT", [{**WIDE_ROW, "extra": "1"}], id_=11, **wide),  # a column nobody declares
        msg("INSERT", [{"id": "3", "name": "n"}], id_=12),
        msg("INSERT", [{"id": "4", "name": "n"}], id_=13, sqlType={"id": "-5", "name": "12"}),
        msg("INSERT", [{"id": "5", "name": "n"}], id_=14, mysql={}, sqlType={"id": "4", "name": "12"}),
        msg("INSERT", [None], id_=15),
        msg("DELETE", None, id_=16, old=[{"id": "6", "name": "n"}]),  # the pre-2022 DTS layout
    ]


def test_specialised_typing_gives_what_the_general_path_gives(spark, tmp_path, monkeypatch):
    from airflow_cdc_provider.formats.events import Q_IMAGE_NOT_OBJECT, Q_TYPE_MISMATCH
    from airflow_cdc_provider.formats.mysql import canal
    from airflow_cdc_provider.spark.reader import list_landed_files

    path = write(tmp_path / "l" / "part-0.json", "\n".join(_declaration_cases()) + "\n")
    sampled = canal._signatures(spark, list_landed_files(spark, [str(path.parent)]))
    assert [dict(s.mysql or ()) for s in sampled] == [
        WIDE_TYPES,
        {"id": "int(11)", "name": "varchar(20)"},
        {"id": "int(11)", "name": "varchar(20)"},
        {},
    ]
    assert sampled[0].types == (
        "decimal(20,0)", "int", "smallint", "decimal(10,2)", "float", "double", "boolean", "date", "timestamp",
        "binary", "string",
    )  # fmt: skip
    specialised = decode(spark, path.parent)
    monkeypatch.setattr(canal, "_signatures", lambda spark, files: [])
    general = decode(spark, path.parent)
    assert specialised == general
    assert [e["reason"] for e in general if e["kind"] != "change"] == [
        Q_TYPE_MISMATCH,
        Q_TYPE_MISMATCH,
        Q_IMAGE_NOT_OBJECT,
    ]

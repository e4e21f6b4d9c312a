"""shareplex-json: seed samples, partial images, key changes, rowid keys, truncate, pairs, malformed records."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import assert_events_add_up

from reference.records.shareplex import rec

FMT = "shareplex-json"

# --- seed 002, "Shareplex JSON", copied verbatim ---------------------------------------------------

SEED_INSERT = """{
        "meta": {
            "time": "2017-06-16T14:24:34", 
            "userid": 84,                                    
            "op": "ins",                                   
              "scn": "14589063118712",                  
              "rowid": "AAATGpAAIAAItcIAAA",      
            "trans": "7.0.411499",                 
            "seq": 1,                                          
            "size": 11,                                         
            "table": "CL_BIZ1.MIO_LOG",       
              "idx": "1/11",                                       
            "posttime": "2017-06-16T14:33:52"
        },
        "data": {
            "MIO_LOG_ID": "32539737"
         }
    }
"""

SEED_UPDATE = """{
        "meta": {
            "time": "2017-06-16T15:38:13",
            "userid": 84,
            "op": "upd",                             
            "table": "CL_BIZ1.MIO_LOG"
            ...
        },
        "data": {                                          
            "CNTR_NO": "1171201606"
        },
        "key": {                                            
            "MIO_LOG_ID": "32537893",
            "PLNMIO_REC_ID": "31557806",
            "POL_CODE": null,
            "CNTR_TYPE": null,
            "CNTR_NO": "1171201606syui26"
        }
    }
"""

SEED_DELETE = """{
        "meta": {
            "time": "2017-06-16T15:51:35",
            "userid": 84,
            "op": "del",                      
         },
        "data": {                                    
            "MIO_LOG_ID": "32539739",
            "PLNMIO_REC_ID": "31557806",
            "POL_CODE": null,
            "CNTR_TYPE": null,
            "CG_NO": null
         }
    }
"""

# The same samples made JSON: the update's elided "..." and the delete's trailing comma removed.
SEED_UPDATE_JSON = SEED_UPDATE.replace('"CL_BIZ1.MIO_LOG"\n            ...\n', '"CL_BIZ1.MIO_LOG"\n')
SEED_DELETE_JSON = SEED_DELETE.replace('"op": "del",                      \n', '"op": "del"\n')

TABLE = "CL_BIZ1.MIO_LOG"
T_INSERT = 1497623074000  # 2017-06-16T14:24:34Z
T_UPDATE = 1497627493000  # 2017-06-16T15:38:13Z
T_DELETE = 1497628295000  # 2017-06-16T15:51:35Z
TRANS_7_0_411499 = (7 << 48) + 411499


def decode(spark, path: Path, **options) -> list[dict]:
    """Canonical events of ``path`` in landing order, images as plain Python values."""
    from tests.conftest import decode_events

    return decode_events(spark, FMT, path, **options)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def by(rows: list[dict], col: str) -> list[dict]:
    return sorted(rows, key=lambda r: str(r[col]))


# --- seed samples -----------------------------------------------------------------------------------


def test_seed_samples_decode_exactly(spark, tmp_path):
    d = tmp_path / "seed"
    write(d / "1_insert.json", SEED_INSERT)
    write(d / "2_update.json", SEED_UPDATE)
    write(d / "3_delete.json", SEED_DELETE)
    write(d / "4_update.json", SEED_UPDATE_JSON)
    write(d / "5_delete.json", SEED_DELETE_JSON)
    insert, update_verbatim, delete_verbatim, update, delete = decode(spark, d)
    assert {
        k: insert[k]
        for k in (
            "table",
            "kind",
            "op",
            "reason",
            "event_ms",
            "log_pos",
            "sub_pos",
            "tx_id",
            "tx_end",
            "before",
            "after",
            "partial",
            "key_cols",
            "types",
            "line",
            "raw",
        )
    } == {
        "table": TABLE,
        "kind": "change",
        "op": "insert",
        "reason": None,
        "event_ms": T_INSERT,
        "log_pos": [14589063118712, TRANS_7_0_411499, 1],
        "sub_pos": 0,
        "tx_id": "7.0.411499",
        "tx_end": False,
        "before": None,
        # meta.rowid is no column of the source table: not in the rows unless --key or --with-metadata.
        "after": {"MIO_LOG_ID": "32539737"},
        "partial": False,
        "key_cols": None,
        "types": None,
        "line": 1,
        "raw": SEED_INSERT,
    }
    # As printed in the seed, the update (elided "...") and the delete (trailing comma) are not JSON.
    assert [(e["kind"], e["reason"], e["raw"]) for e in (update_verbatim, delete_verbatim)] == [
        ("quarantined", "not JSON", SEED_UPDATE),
        ("quarantined", "not JSON", SEED_DELETE),
    ]
    old = {
        "MIO_LOG_ID": "32537893",
        "PLNMIO_REC_ID": "31557806",
        "POL_CODE": None,
        "CNTR_TYPE": None,
        "CNTR_NO": "1171201606syui26",
    }
    assert (update["kind"], update["op"], update["event_ms"], update["log_pos"], update["partial"]) == (
        "change",
        "update",
        T_UPDATE,
        None,
        True,
    )
    assert update["before"] == old
    assert update["after"] == {**old, "CNTR_NO": "1171201606"}
    # The delete names no table.
    assert (delete["kind"], delete["reason"], delete["event_ms"]) == (
        "quarantined",
        "missing table",
        T_DELETE,
    )


def test_seed_samples_replay(replay, tmp_path):
    d = tmp_path / "seed"
    for name, text in [
        ("1_insert", SEED_INSERT),
        ("2_update", SEED_UPDATE),
        ("3_delete", SEED_DELETE),
        ("4_update", SEED_UPDATE_JSON),
        ("5_delete", SEED_DELETE_JSON),
    ]:
        write(d / f"{name}.json", text)
    # --table names the table of records that do not say theirs (the seed's delete).
    metrics, tables = replay(FMT, d, key="MIO_LOG_ID", table=TABLE)
    row = {
        "MIO_LOG_ID": None,
        "PLNMIO_REC_ID": None,
        "POL_CODE": None,
        "CNTR_TYPE": None,
        "CNTR_NO": None,
    }
    assert by(tables[TABLE], "MIO_LOG_ID") == [
        # The update names a row never inserted here: its key and data create it.
        {**row, "MIO_LOG_ID": "32537893", "PLNMIO_REC_ID": "31557806", "CNTR_NO": "1171201606"},
        {**row, "MIO_LOG_ID": "32539737"},
    ]
    assert metrics["events"] == {
        "read": 5,
        "applied": 3,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 2,
    }
    t = metrics["tables"][TABLE]
    assert (t["inserts"], t["updates"], t["updates_of_unknown_key"], t["deletes_of_unknown_key"]) == (
        1,
        1,
        1,
        1,
    )
    assert t["last_event_ms"] == T_DELETE
    assert_events_add_up(metrics)


# --- behaviour --------------------------------------------------------------------------------------


def test_partial_updates_truncate_order_and_drift(replay, tmp_path):
    lines = [
        # S.PARTIAL: updates carry only the changed columns; the rest keep their value.
        rec("ins", {"ID": "1", "A": "a", "B": "b"}, table="S.PARTIAL", scn=10, seq=1),
        rec("upd", {"B": "b2"}, {"ID": "1", "B": "b"}, table="S.PARTIAL", scn=11, seq=1),
        rec("upd", {"A": None}, {"ID": "1"}, table="S.PARTIAL", scn=12, seq=1),
        # S.TRUNC: everything before the truncate is gone.
        rec("ins", {"ID": "1"}, table="S.TRUNC", scn=10, seq=3),
        rec("ins", {"ID": "2"}, table="S.TRUNC", scn=10, seq=4),
        rec("truncate", table="S.TRUNC", scn=20, seq=1),
        rec("ins", {"ID": "3"}, table="S.TRUNC", scn=21, seq=1),
        # S.DRIFT: a column that appears later is null where never set.
        rec("ins", {"ID": "1", "A": "x"}, table="S.DRIFT", scn=10, seq=5),
        rec("ins", {"ID": "2", "A": "y", "NEW_COL": 7}, table="S.DRIFT", scn=30, seq=1),
        # S.ORDER: the position (scn) orders, not the place in the file.
        rec("upd", {"A": "late"}, {"ID": "1"}, table="S.ORDER", scn=50, seq=1),
        rec("upd", {"A": "early"}, {"ID": "1"}, table="S.ORDER", scn=40, seq=1),
        rec("ins", {"ID": "1", "A": "first", "B": "kept"}, table="S.ORDER", scn=30, seq=1),
    ]
    metrics, tables = replay(FMT, write(tmp_path / "in" / "a.json", "\n".join(lines) + "\n"), key="ID")
    assert tables == {
        "S.DRIFT": [{"ID": "1", "A": "x", "NEW_COL": None}, {"ID": "2", "A": "y", "NEW_COL": 7}],
        "S.ORDER": [{"ID": "1", "A": "late", "B": "kept"}],
        "S.PARTIAL": [{"ID": "1", "A": None, "B": "b2"}],
        "S.TRUNC": [{"ID": "3"}],
    }
    assert metrics["events"] == {
        "read": 12,
        "applied": 12,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 0,
    }
    assert metrics["tables"]["S.TRUNC"]["truncates"] == 1
    assert_events_add_up(metrics)


def test_key_change_in_a_partial_update_keeps_the_other_columns(replay, tmp_path):
    lines = [
        rec("ins", {"ID": "1", "A": "a"}, table="S.MOVE", scn=10),
        rec("upd", {"ID": "2"}, {"ID": "1"}, table="S.MOVE", scn=11),
    ]
    metrics, tables = replay(FMT, write(tmp_path / "in" / "a.json", "\n".join(lines) + "\n"), key="ID")
    assert tables == {"S.MOVE": [{"ID": "2", "A": "a"}]}
    assert_events_add_up(metrics)


def test_rowid_as_key(spark, replay, tmp_path):
    lines = [
        rec("ins", {"NAME": "a", "QTY": 1}, table="S.NOKEY", rowid="AAAR1", scn=1),
        rec("ins", {"NAME": "a", "QTY": 1}, table="S.NOKEY", rowid="AAAR2", scn=2),
        rec("upd", {"QTY": 5}, {"NAME": "a", "QTY": 1}, table="S.NOKEY", rowid="AAAR2", scn=3),
        rec("del", {"NAME": "a", "QTY": 1}, table="S.NOKEY", rowid="AAAR1", scn=4),
    ]
    path = write(tmp_path / "in" / "a.json", "\n".join(lines) + "\n")
    update = decode(spark, path, key_columns=("rowid",))[2]
    assert update["before"] == {"NAME": "a", "QTY": 1, "rowid": "AAAR2"}
    assert update["after"] == {"NAME": "a", "QTY": 5, "rowid": "AAAR2"}
    metrics, tables = replay(FMT, path, key="rowid")
    assert tables == {"S.NOKEY": [{"NAME": "a", "QTY": 5, "rowid": "AAAR2"}]}
    assert_events_add_up(metrics)


def test_rowid_is_a_column_only_when_the_key_or_with_metadata_asks_for_it(spark, replay, tmp_path):
    lines = [
        rec("ins", {"ID": "1", "NAME": "a"}, table="S.KEYED", rowid="AAAK1", scn=1),
        rec("upd", {"NAME": "b"}, {"ID": "1"}, table="S.KEYED", rowid="AAAK1", scn=2),
        rec("ins", {"NAME": "x", "QTY": 1}, table="S.NOKEY", rowid="AAAR1", scn=3),
        rec("upd", {"QTY": 2}, {"NAME": "x"}, table="S.NOKEY", rowid="AAAR1", scn=4),
        # A delete that names its row only by rowid.
        rec("del", table="S.KEYED", rowid="AAAK1", scn=5),
    ]
    path = write(tmp_path / "in" / "a.json", "\n".join(lines) + "\n")
    assert [e["after"] for e in decode(spark, path, key_columns=("ID",))] == [
        {"ID": "1", "NAME": "a"},
        {"ID": "1", "NAME": "b"},
        {"NAME": "x", "QTY": 1},
        {"NAME": "x", "QTY": 2},
        None,
    ]

    # --key ID: no rowid anywhere, and the rowid-only delete cannot name its row.
    metrics, tables = replay(FMT, path, key="ID", tables=["S.KEYED"])
    assert tables == {"S.KEYED": [{"ID": "1", "NAME": "b"}]}
    assert metrics["quarantine"]["reasons"] == {"key unknown: delete with neither before nor after image": 1}
    assert_events_add_up(metrics)

    # --key ID plus --key S.NOKEY=rowid: only the table keyed by rowid carries it.
    metrics, tables = replay(FMT, path, key=["ID", "S.NOKEY=rowid"])
    assert tables == {
        "S.KEYED": [{"ID": "1", "NAME": "b"}],
        "S.NOKEY": [{"NAME": "x", "QTY": 2, "rowid": "AAAR1"}],
    }
    assert metrics["events"]["quarantined"] == 1
    # --key rowid: every table carries it, and the rowid-only delete names its row.
    metrics, tables = replay(FMT, path, key="rowid")
    assert tables == {"S.KEYED": [], "S.NOKEY": [{"NAME": "x", "QTY": 2, "rowid": "AAAR1"}]}
    assert metrics["events"]["quarantined"] == 0
    assert_events_add_up(metrics)

    # --with-metadata: rowid is source metadata the rows then carry (the key is still ID).
    metrics, tables = replay(FMT, path, key="ID", tables=["S.KEYED"], with_metadata=True)
    keyed = spark.read.parquet(metrics["tables"]["S.KEYED"]["path"])
    assert keyed.columns == [
        "ID", "NAME", "rowid", "_cdc_op", "_cdc_event_ts", "_cdc_position", "_cdc_file", "_cdc_line",
    ]  # fmt: skip
    assert [{k: r[k] for k in ("ID", "NAME", "rowid", "_cdc_op")} for r in tables["S.KEYED"]] == [
        {"ID": "1", "NAME": "b", "rowid": "AAAK1", "_cdc_op": "update"}
    ]
    assert metrics["events"]["quarantined"] == 1


def test_update_before_and_after_pairs(spark, replay, tmp_path):
    lines = [
        rec("ins", {"ID": "1", "NAME": "a", "CITY": "x"}, scn=1, trans="1.0.1", seq=1),
        rec("ins", {"ID": "5", "NAME": "e", "CITY": "y"}, scn=1, trans="1.0.1", seq=2),
        # A key change as a pair: the AFTER record alone does not say which row it replaces.
        rec("UPDATE BEFORE", {"ID": "1", "NAME": "a", "CITY": "x"}, scn=2, trans="2.0.7", seq=1, size=4),
        rec("UPDATE AFTER", {"ID": "2", "NAME": "b"}, scn=2, trans="2.0.7", seq=2, size=4),
        # A pair whose AFTER carries only the changed column.
        rec("update_before", {"ID": "5", "NAME": "e"}, scn=2, trans="2.0.7", seq=3, size=4),
        rec("update_after", {"NAME": "ee"}, scn=2, trans="2.0.7", seq=4, size=4),
    ]
    path = write(tmp_path / "in" / "a.json", "\n".join(lines) + "\n")
    events = decode(spark, path)
    assert [(e["kind"], e["op"], e["reason"], e["tx_end"]) for e in events] == [
        ("change", "insert", None, None),
        ("change", "insert", None, None),
        ("ignored", None, "update before image", False),
        ("change", "update", None, False),
        ("ignored", None, "update before image", False),
        ("change", "update", None, True),
    ]
    assert (events[3]["before"], events[3]["after"]) == (
        {"ID": "1", "NAME": "a", "CITY": "x"},
        {"ID": "2", "NAME": "b", "CITY": "x"},
    )
    assert (events[5]["before"], events[5]["after"]) == ({"ID": "5", "NAME": "e"}, {"ID": "5", "NAME": "ee"})

    metrics, tables = replay(FMT, path, key="ID")
    assert tables == {"S.T": [{"ID": "2", "NAME": "b", "CITY": "x"}, {"ID": "5", "NAME": "ee", "CITY": "y"}]}
    assert metrics["ignored"] == {"update before image": 2}
    assert metrics["events"] == {
        "read": 6,
        "applied": 4,
        "after_as_of": 0,
        "ignored": 2,
        "duplicates": 0,
        "quarantined": 0,
    }
    assert_events_add_up(metrics)


def test_drop_column_and_position_fields(spark, tmp_path):
    lines = [
        rec("DROP COLUMN", {"OLD_COL": None}, scn=7, trans="12345", seq=3, size=3),
        # Epoch seconds as time, idx instead of seq/size, a trans that is not a number.
        rec("ins", {"ID": "1"}, time="1718000000", scn="8", trans="tx-a", seq=None, idx="2/2"),
        rec("ins", {"ID": "2"}, time="2024-06-10T06:13:20+02:00", scn=None),
    ]
    drop, ins, no_scn = decode(spark, write(tmp_path / "in" / "a.json", "\n".join(lines) + "\n"))
    assert (drop["kind"], drop["reason"], drop["table"], drop["before"], drop["after"]) == (
        "ignored",
        "ddl",
        "S.T",
        {"OLD_COL": None},
        None,
    )
    assert (drop["log_pos"], drop["tx_id"], drop["tx_end"]) == ([7, 12345, 3], "12345", True)
    assert (ins["event_ms"], ins["log_pos"], ins["tx_end"]) == (1718000000000, [8, None, 2], True)
    assert (no_scn["event_ms"], no_scn["log_pos"]) == (1718000000000 - 7200000, None)


def test_malformed_records_are_quarantined_with_their_reason(spark, replay, tmp_path):
    lines = [
        (rec("ins", {"ID": "1"}), None),
        (json.dumps({"meta": {"table": "S.T", "scn": 1}, "data": {"ID": "2"}}), "missing op"),
        (json.dumps({"data": {"ID": "2"}}), "missing op"),
        (rec("merge", {"ID": "3"}), "unknown op"),
        (rec("ins", [{"ID": "4"}]), "row image not an object"),
        (rec("upd", {"ID": "5"}, "k"), "row image not an object"),
        (rec("ins", {"ID": "6"}, time="yesterday"), "type mismatch"),
        (rec("ins", {"ID": "7"}, table=None), "missing table"),
        (rec("ins"), "missing image"),
        (rec("upd", key={"ID": "1"}), "missing image"),
        (rec("del"), "key unknown: delete with neither before nor after image"),
        (json.dumps({"meta": "ins", "data": {"ID": "8"}}), "type mismatch"),
        ("{not json", "not JSON"),
        ('"just a string"', "not a JSON object"),
    ]
    path = write(tmp_path / "in" / "bad.json", "\n".join(line for line, _ in lines) + "\n")
    events = decode(spark, path)
    assert [(e["kind"], e["reason"]) for e in events] == [("change", None)] + [
        ("quarantined", reason) for _, reason in lines[1:]
    ]
    metrics, tables = replay(FMT, path, key="ID")
    assert tables == {"S.T": [{"ID": "1"}]}
    assert metrics["quarantine"]["reasons"] == {
        "key unknown: delete with neither before nor after image": 1,
        "missing image": 2,
        "missing op": 2,
        "missing table": 1,
        "not JSON": 1,
        "not a JSON object": 1,
        "row image not an object": 2,
        "type mismatch": 2,
        "unknown op": 1,
    }
    assert_events_add_up(metrics)


def test_drop_column_removes_the_column_from_later_snapshots(replay, tmp_path):
    lines = [
        rec("ins", {"ID": "1", "NAME": "a", "OLD_COL": "x"}, scn=1),
        rec("ins", {"ID": "2", "NAME": "b", "OLD_COL": "y"}, scn=2),
        rec("DROP COLUMN", {"OLD_COL": None}, scn=3, time="2024-01-01T00:00:03"),
        # A partial update after the drop keeps the row's other columns, without the dropped one.
        rec("upd", {"NAME": "bb"}, {"ID": "2"}, scn=4, time="2024-01-01T00:00:04"),
    ]
    path = write(tmp_path / "in" / "a.json", "\n".join(lines) + "\n")
    _, before = replay(FMT, path, as_of="2024-01-01T00:00:02Z", key="ID")
    assert by(before["S.T"], "ID") == [
        {"ID": "1", "NAME": "a", "OLD_COL": "x"},
        {"ID": "2", "NAME": "b", "OLD_COL": "y"},
    ]
    metrics, after = replay(FMT, path, key="ID")
    assert by(after["S.T"], "ID") == [{"ID": "1", "NAME": "a"}, {"ID": "2", "NAME": "bb"}]
    assert metrics["ignored"] == {"ddl": 1}
    assert_events_add_up(metrics)


def test_key_change_carries_the_row_as_it_stood_just_before_the_move(replay, tmp_path):
    lines = [
        rec("ins", {"ID": "1", "A": "a", "B": "b", "C": "c"}, table="S.MOVE", scn=10),
        rec("upd", {"B": "b2"}, {"ID": "1"}, table="S.MOVE", scn=11),
        rec("upd", {"ID": "2", "A": "a3"}, {"ID": "1"}, table="S.MOVE", scn=12),
        rec("upd", {"B": "b4"}, {"ID": "2"}, table="S.MOVE", scn=13),
        # The old key is used again afterwards: a new row, unrelated to the moved one.
        rec("ins", {"ID": "1", "A": "new", "B": "new", "C": "new"}, table="S.MOVE", scn=14),
    ]
    path = write(tmp_path / "in" / "a.json", "\n".join(lines) + "\n")
    metrics, tables = replay(FMT, path, key="ID")
    assert by(tables["S.MOVE"], "ID") == [
        {"ID": "1", "A": "new", "B": "new", "C": "new"},
        {"ID": "2", "A": "a3", "B": "b4", "C": "c"},
    ]
    assert metrics["tables"]["S.MOVE"]["inserts"] == 2 and metrics["tables"]["S.MOVE"]["updates"] == 3
    assert_events_add_up(metrics)


def test_columns_keep_the_order_the_records_write_them(spark, replay, tmp_path):
    lines = [
        rec("ins", {"ZCODE": "z", "ID": "1", "AMOUNT": 5}, scn=1),
        # A partial update: key is the old row, data the changed columns; a new column comes last.
        rec("upd", {"NOTE": "n", "AMOUNT": 6}, {"ZCODE": "z", "ID": "1", "AMOUNT": 5}, scn=2),
        rec("ins", {"ZCODE": "y", "ID": "2", "AMOUNT": 7}, scn=3),
    ]
    path = write(tmp_path / "in" / "a.json", "\n".join(lines) + "\n")
    metrics, tables = replay(FMT, path, key="ID")
    assert spark.read.parquet(metrics["tables"]["S.T"]["path"]).columns == ["ZCODE", "ID", "AMOUNT", "NOTE"]
    assert tables == {
        "S.T": [
            {"ZCODE": "z", "ID": "1", "AMOUNT": 6, "NOTE": "n"},
            {"ZCODE": "y", "ID": "2", "AMOUNT": 7, "NOTE": None},
        ]
    }

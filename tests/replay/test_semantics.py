"""The replay semantics of docs/design.md ("Replay semantics"), through the real engine and the Debezium decoder."""

from __future__ import annotations

import json

import pytest

from tests.conftest import assert_events_add_up, write_jsonl

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def dbz(op, row_id, ts, *, before=None, pos=None, table="shop", **values):
    """A bare Debezium envelope (MySQL source) for table db.<table>."""
    image = {"id": row_id, **values}
    source = {"db": "db", "table": table, "ts_ms": ts}
    if pos is not None:
        source.update(file="mysql-bin.000001", pos=pos, row=0)
    return {
        "op": op,
        "ts_ms": ts + 5,
        "before": before if before is not None else (image if op == "d" else None),
        "after": None if op == "d" else image,
        "source": source,
    }


def dbz_truncate(ts, *, table="shop"):
    """A Debezium truncate of db.<table>."""
    return {
        "op": "t",
        "ts_ms": ts + 5,
        "before": None,
        "after": None,
        "source": {"db": "db", "table": table, "ts_ms": ts},
    }


def test_order_is_by_position_never_by_file_names(replay, tmp_path):
    # File names sort against time: the newest change lands in the first-listed file.
    write_jsonl(tmp_path / "in" / "a.json", [dbz("u", 1, T0 + 3000, name="third")])
    write_jsonl(tmp_path / "in" / "b.json", [dbz("u", 1, T0 + 2000, name="second")])
    write_jsonl(tmp_path / "in" / "c.json", [dbz("c", 1, T0 + 1000, name="first")])
    metrics, tables = replay("debezium-json", tmp_path / "in", key="id")
    assert tables == {"db.shop": [{"id": 1, "name": "third"}]}
    t = metrics["tables"]["db.shop"]
    assert (t["inserts"], t["updates"], t["updates_of_unknown_key"], t["last_event_ms"]) == (
        1,
        2,
        0,
        T0 + 3000,
    )


def test_log_position_wins_over_event_time(replay, tmp_path):
    write_jsonl(
        tmp_path / "in" / "a.json",
        [
            dbz("c", 1, T0, pos=100, name="at 100"),
            dbz("u", 1, T0 - 50, pos=300, name="at 300, clock behind"),
            dbz("u", 1, T0 + 50, pos=200, name="at 200"),
        ],
    )
    _, tables = replay("debezium-json", tmp_path / "in", key="id")
    assert tables == {"db.shop": [{"id": 1, "name": "at 300, clock behind"}]}


def test_equal_timestamps_are_broken_by_position_in_the_file(replay, tmp_path):
    write_jsonl(
        tmp_path / "in" / "a.json",
        [
            dbz("c", 1, T0, name="one"),
            dbz("u", 1, T0, name="two"),
            dbz("u", 1, T0, name="three"),
            dbz("c", 2, T0, name="x"),
            dbz("d", 2, T0, name="x"),
        ],
    )
    metrics, tables = replay("debezium-json", tmp_path / "in", key="id")
    assert tables == {"db.shop": [{"id": 1, "name": "three"}]}
    assert metrics["tables"]["db.shop"]["deletes"] == 1


def test_exact_duplicates_apply_once_and_are_counted(replay, tmp_path):
    insert = dbz("c", 1, T0, pos=10, name="a")
    update = dbz("u", 1, T0 + 1, pos=20, name="b")
    write_jsonl(tmp_path / "in" / "part-0.json", [insert, update])
    write_jsonl(tmp_path / "in" / "part-1.json", [insert, update])  # at-least-once redelivery
    metrics, tables = replay("debezium-json", tmp_path / "in", key="id")
    assert tables == {"db.shop": [{"id": 1, "name": "b"}]}
    assert metrics["events"] == {
        "read": 4,
        "applied": 2,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 2,
        "quarantined": 0,
    }
    t = metrics["tables"]["db.shop"]
    assert (t["inserts"], t["updates"]) == (1, 1)


def test_key_changing_update_moves_the_row(replay, tmp_path):
    write_jsonl(
        tmp_path / "in" / "a.json",
        [
            dbz("c", 1, T0, name="a"),
            dbz("c", 5, T0, name="other"),
            dbz("u", 2, T0 + 1, before={"id": 1, "name": "a"}, name="a moved"),
        ],
    )
    metrics, tables = replay("debezium-json", tmp_path / "in", key="id")
    assert tables == {"db.shop": [{"id": 2, "name": "a moved"}, {"id": 5, "name": "other"}]}
    t = metrics["tables"]["db.shop"]
    assert (t["rows"], t["inserts"], t["updates"], t["deletes"]) == (2, 2, 1, 0)
    assert_events_add_up(metrics)


def test_delete_of_an_unknown_key_changes_nothing_and_is_counted(replay, tmp_path):
    write_jsonl(tmp_path / "in" / "a.json", [dbz("c", 1, T0, name="a"), dbz("d", 9, T0 + 1, name="ghost")])
    metrics, tables = replay("debezium-json", tmp_path / "in", key="id")
    assert tables == {"db.shop": [{"id": 1, "name": "a"}]}
    t = metrics["tables"]["db.shop"]
    assert (t["deletes"], t["deletes_of_unknown_key"]) == (0, 1)
    assert metrics["events"]["applied"] == 2


def test_events_after_as_of_are_counted_not_applied(replay, tmp_path):
    write_jsonl(
        tmp_path / "in" / "a.json",
        [
            dbz("c", 1, T0, name="before"),
            dbz("u", 1, T0 + 60_000, name="after"),
            dbz("c", 2, T0 + 60_000, name="later row"),
        ],
    )
    as_of = "2023-11-14T22:13:50+00:00"  # T0 + 30 s
    metrics, tables = replay("debezium-json", tmp_path / "in", as_of=as_of, key="id")
    assert tables == {"db.shop": [{"id": 1, "name": "before"}]}
    assert metrics["events"] == {
        "read": 3,
        "applied": 1,
        "after_as_of": 2,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 0,
    }
    assert (metrics["as_of"], metrics["as_of_ms"]) == ("2023-11-14T22:13:50+00:00", T0 + 30_000)


def test_as_of_equal_to_the_event_time_includes_it(replay, tmp_path):
    write_jsonl(tmp_path / "in" / "a.json", [dbz("c", 1, T0, name="a")])
    metrics, tables = replay("debezium-json", tmp_path / "in", as_of=str(T0), key="id")
    assert tables == {"db.shop": [{"id": 1, "name": "a"}]}
    metrics, tables = replay("debezium-json", tmp_path / "in", as_of=str(T0 - 1), key="id")
    assert tables == {"db.shop": []}
    assert metrics["events"]["after_as_of"] == 1


def test_truncate_empties_the_table_from_that_point(replay, tmp_path):
    truncate = dbz_truncate(T0 + 2000)
    write_jsonl(
        tmp_path / "in" / "a.json",
        [
            dbz("c", 1, T0, name="a"),
            dbz("c", 2, T0 + 1000, name="b"),
            truncate,
            dbz("c", 3, T0 + 3000, name="c"),
        ],
    )
    metrics, tables = replay("debezium-json", tmp_path / "in", key="id")
    assert tables == {"db.shop": [{"id": 3, "name": "c"}]}
    assert metrics["tables"]["db.shop"]["truncates"] == 1
    assert metrics["events"]["applied"] == 4
    assert_events_add_up(metrics)


def test_counts_after_a_truncate_see_an_empty_table(replay, tmp_path):
    # A key's count depends on the events before it in position order and on the table's
    # truncates in between: after the truncate, key 1's delete finds no row and key 2's update
    # creates its row again; the redelivered update is a duplicate, not a second update.
    truncate = {
        "op": "t",
        "ts_ms": T0 + 2005,
        "before": None,
        "after": None,
        "source": {
            "db": "db",
            "table": "shop",
            "ts_ms": T0 + 2000,
            "file": "mysql-bin.000001",
            "pos": 3,
            "row": 0,
        },
    }
    update = dbz("u", 2, T0 + 4000, pos=5, before={"id": 2, "name": "b"}, name="b2")
    write_jsonl(
        tmp_path / "in" / "a.json",
        [
            dbz("c", 1, T0, pos=1, name="a"),
            dbz("c", 2, T0 + 1000, pos=2, name="b"),
            truncate,
            dbz("d", 1, T0 + 3000, pos=4, name="a"),
            update,
            update,
            dbz("d", 3, T0 + 5000, pos=6, name="x"),
            dbz("c", 1, T0 + 6000, pos=7, name="a2"),
            dbz("d", 1, T0 + 7000, pos=8, name="a2"),
        ],
    )
    metrics, tables = replay("debezium-json", tmp_path / "in", key="id")
    assert tables == {"db.shop": [{"id": 2, "name": "b2"}]}
    t = metrics["tables"]["db.shop"]
    assert (t["inserts"], t["updates"], t["deletes"], t["truncates"]) == (3, 1, 1, 1)
    assert (t["updates_of_unknown_key"], t["deletes_of_unknown_key"]) == (1, 2)
    assert metrics["events"] == {
        "read": 9,
        "applied": 8,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 1,
        "quarantined": 0,
    }
    assert_events_add_up(metrics)


def test_tables_are_kept_apart_and_can_be_selected(replay, tmp_path):
    write_jsonl(
        tmp_path / "in" / "a.json", [dbz("c", 1, T0, name="s"), dbz("c", 1, T0, table="users", name="u")]
    )
    metrics, tables = replay("debezium-json", tmp_path / "in", key="id")
    assert tables == {"db.shop": [{"id": 1, "name": "s"}], "db.users": [{"id": 1, "name": "u"}]}
    metrics, tables = replay("debezium-json", tmp_path / "in", key="id", tables=["users"])
    assert tables == {"db.users": [{"id": 1, "name": "u"}]}
    assert metrics["ignored"] == {"table not selected": 1}
    assert_events_add_up(metrics)


def test_with_metadata_columns(replay, tmp_path):
    write_jsonl(
        tmp_path / "in" / "a.json", [dbz("c", 1, T0, pos=7, name="a"), dbz("u", 1, T0 + 1, pos=8, name="b")]
    )
    _, tables = replay("debezium-json", tmp_path / "in", key="id", with_metadata=True)
    (row,) = tables["db.shop"]
    assert (row["_cdc_op"], row["_cdc_position"]) == ("update", "1:8:0")
    assert row["_cdc_event_ts"].isoformat() == "2023-11-14T22:13:20.001000"


def test_bad_lines_are_quarantined_never_fatal(replay, tmp_path):
    path = write_jsonl(
        tmp_path / "in" / "a.json",
        [
            "/* licence header */",
            dbz("c", 1, T0, name="a"),
            "",  # Kafka tombstone (null value)
            "null",
            "   ",  # blank: not a record
            "[1, 2]",
            '{"op": "u", "after": "not an object", "source": {"db": "db", "table": "shop", "ts_ms": 1}}',
            '{"op": "x", "after": {"id": 1}, "source": {"db": "db", "table": "shop", "ts_ms": 1}}',
            '{"after": {"id": 1}, "source": {"db": "db", "table": "shop", "ts_ms": 1}}',
        ],
    )
    with open(path, "a") as f:
        f.write('{"op": "c", "after": {"id": 2')  # truncated last line (no newline)
    metrics, tables = replay("debezium-json", tmp_path / "in", key="id")
    assert tables == {"db.shop": [{"id": 1, "name": "a"}]}
    assert metrics["ignored"] == {"tombstone": 2}
    assert metrics["quarantine"]["reasons"] == {
        "missing op": 1,
        "not JSON": 1,
        "not a JSON object": 1,
        "row image not an object": 1,
        "truncated": 1,
        "unknown op": 1,
    }
    assert metrics["events"] == {
        "read": 9,
        "applied": 1,
        "after_as_of": 0,
        "ignored": 2,
        "duplicates": 0,
        "quarantined": 6,
    }
    rows = [
        json.loads(line)
        for p in (tmp_path / "out1" / "_quarantine").glob("part-*")
        for line in p.read_text().splitlines()
    ]
    assert [(r["line"], r["reason"]) for r in rows] == [
        (1, "not JSON"),
        (6, "not a JSON object"),
        (7, "row image not an object"),
        (8, "unknown op"),
        (9, "missing op"),
        (10, "truncated"),
    ]
    assert rows[0]["record"] == "/* licence header */"


def test_on_error_fail_names_file_line_and_reason(replay, tmp_path):
    from airflow_cdc_provider.replay.errors import QuarantineError

    write_jsonl(tmp_path / "in" / "a.json", [dbz("c", 1, T0, name="a"), "garbage"])
    with pytest.raises(QuarantineError) as err:
        replay("debezium-json", tmp_path / "in", key="id", on_error="fail")
    assert str(err.value) == (
        f"cannot decode file:{tmp_path}/in/a.json line 2: not JSON "
        "(--on-error fail; rerun with --on-error quarantine to set such records aside)"
    )
    assert not (tmp_path / "out1").exists()


def test_missing_key_names_the_table(replay, tmp_path):
    from airflow_cdc_provider.replay.errors import MissingKeyError

    write_jsonl(tmp_path / "in" / "a.json", [dbz("c", 1, T0, name="a")])
    with pytest.raises(MissingKeyError) as err:
        replay("debezium-json", tmp_path / "in")
    assert str(err.value).startswith("no key for table(s) db.shop: ")


def test_null_key_values_are_quarantined(replay, tmp_path):
    write_jsonl(tmp_path / "in" / "a.json", [dbz("c", None, T0, name="no id"), dbz("c", 1, T0, name="a")])
    metrics, tables = replay("debezium-json", tmp_path / "in", key="id")
    assert tables == {"db.shop": [{"id": 1, "name": "a"}]}
    assert metrics["quarantine"]["reasons"] == {"missing key": 1}
    assert_events_add_up(metrics)


def test_a_null_part_of_a_composite_key_is_quarantined(replay, tmp_path):
    write_jsonl(
        tmp_path / "in" / "a.json",
        [
            dbz("c", 1, T0, region=None, name="no region"),
            dbz("c", None, T0, region="eu", name="no id"),
            dbz("c", 1, T0, region="eu", name="a"),
        ],
    )
    metrics, tables = replay("debezium-json", tmp_path / "in", key="id,region")
    assert tables == {"db.shop": [{"id": 1, "region": "eu", "name": "a"}]}
    assert metrics["quarantine"]["reasons"] == {"missing key": 2}
    assert_events_add_up(metrics)


def test_gzip_landing_and_per_table_keys(replay, tmp_path):
    import gzip

    (tmp_path / "in").mkdir()
    with gzip.open(tmp_path / "in" / "a.json.gz", "wt") as f:
        f.write(json.dumps(dbz("c", 1, T0, table="orders", name="a")) + "\n")
        f.write(
            json.dumps(
                {
                    "op": "c",
                    "ts_ms": T0,
                    "before": None,
                    "after": {"sku": "x", "qty": 2},
                    "source": {"db": "db", "table": "stock", "ts_ms": T0},
                }
            )
            + "\n"
        )
    metrics, tables = replay("debezium-json", tmp_path / "in", key=["id", "db.stock=sku"])
    assert tables == {"db.orders": [{"id": 1, "name": "a"}], "db.stock": [{"sku": "x", "qty": 2}]}

"""ogg-json: the Flink conformance capture, every op, trail-position order, partial updates, truncate, quarantine."""

from __future__ import annotations

import json

import pytest

from tests.conftest import CONFORMANCE, assert_events_add_up, decode_events, write_jsonl

from reference.records.ogg import rec

FMT = "ogg-json"
T = 1_725_264_000_000  # T_TEXT in epoch ms (op_ts is UTC)


def at(seconds: int) -> str:
    """op_ts ``seconds`` after T_TEXT."""
    return f"2024-09-02 08:00:{seconds:02d}.000000"


def by_id(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: r["id"])


# --- conformance corpus -----------------------------------------------------------------------------


@pytest.mark.corpus
def test_flink_ogg_data(replay, spark):
    path = CONFORMANCE / "flink" / "ogg-data.txt"
    expected = json.loads((CONFORMANCE / "flink" / "ogg-data.expected.json").read_text())
    metrics, tables = replay(FMT, path)
    assert list(tables) == ["OGG.TBL_TEST"]
    # The raw JSON values of the last record applied (106's weight is the integer 1, read as a double).
    assert by_id(tables["OGG.TBL_TEST"]) == by_id(expected["rows"])
    assert spark.read.parquet(metrics["tables"]["OGG.TBL_TEST"]["path"]).columns == [
        "id",
        "name",
        "description",
        "weight",
    ]
    assert metrics["rows"] == expected["row_count"] == 10
    t = metrics["tables"]["OGG.TBL_TEST"]
    assert (t["inserts"], t["updates"], t["deletes"], t["updates_of_unknown_key"]) == (11, 4, 1, 0)
    assert metrics["events"] == {
        "read": 16,
        "applied": 16,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 0,
    }
    # op_ts is not monotonic in the capture (pos 156 at 17:32:20.327, pos 157 at 17:32:10.904).
    assert t["last_event_ms"] == 1589391144455
    assert_events_add_up(metrics)


@pytest.mark.corpus
def test_flink_ogg_data_orders_by_pos_not_by_line_or_op_ts(replay, tmp_path):
    lines = (CONFORMANCE / "flink" / "ogg-data.txt").read_text().splitlines()
    expected = json.loads((CONFORMANCE / "flink" / "ogg-data.expected.json").read_text())
    write_jsonl(tmp_path / "in" / "a.json", lines[::-1][:8])
    write_jsonl(tmp_path / "in" / "b.json", lines[::-1][8:])
    metrics, tables = replay(FMT, tmp_path / "in")
    assert by_id(tables["OGG.TBL_TEST"]) == by_id(expected["rows"])
    assert metrics["tables"]["OGG.TBL_TEST"]["updates_of_unknown_key"] == 0
    assert_events_add_up(metrics)


# --- decoding ---------------------------------------------------------------------------------------


def test_every_op_decodes_exactly(spark, tmp_path):
    row = {"id": 1, "name": "a", "qty": 2}
    lines = [
        rec("I", after=row, pos=10, xid="tx1", txind="B"),
        rec("U", before=row, after={**row, "qty": 3}, pos=11, op_ts=at(1), xid="tx1", txind="E"),
        # Compressed update: only the key and the changed column.
        rec("U", before={"id": 1}, after={"id": 1, "name": "b"}, pos=12, op_ts=at(2)),
        rec("U", after={"id": 1, "qty": 4}, pos=13, op_ts=at(3)),  # no before image: partial too
        rec("D", before={**row, "name": "b", "qty": 4}, pos=14, op_ts=at(4)),
        rec("T", pk=None, pos="123456789012345678901234567890", op_ts="2024-09-02T10:00:05.250+02:00"),
        rec("delete", before=row, pos=16, op_ts=at(6)),
    ]
    events = decode_events(spark, FMT, write_jsonl(tmp_path / "in" / "a.json", lines))
    got = [
        (e["table"], e["kind"], e["op"], e["event_ms"], e["log_pos"], e["partial"], e["tx_id"], e["tx_end"])
        for e in events
    ]
    assert got == [
        ("OGG.T", "change", "insert", T, [0, 10], False, "tx1", False),
        ("OGG.T", "change", "update", T + 1000, [0, 11], False, "tx1", True),
        ("OGG.T", "change", "update", T + 2000, [0, 12], True, None, None),
        ("OGG.T", "change", "update", T + 3000, [0, 13], True, None, None),
        ("OGG.T", "change", "delete", T + 4000, [0, 14], False, None, None),
        ("OGG.T", "change", "truncate", T + 5250, [123456789012, 345678901234567890], False, None, None),
        ("OGG.T", "change", "delete", T + 6000, [0, 16], False, None, None),
    ]
    insert, update, compressed, no_before, delete = events[:5]
    assert (insert["before"], insert["after"], insert["key_cols"]) == (None, row, ["id"])
    assert (update["before"], update["after"]) == (row, {**row, "qty": 3})
    assert (compressed["before"], compressed["after"]) == ({"id": 1}, {"id": 1, "name": "b"})
    assert (no_before["before"], no_before["after"]) == (None, {"id": 1, "qty": 4})
    assert (delete["before"], delete["after"]) == ({"id": 1, "name": "b", "qty": 4}, None)


# --- replay -----------------------------------------------------------------------------------------


def test_partial_updates_key_change_truncate_duplicates_and_unknown_keys(replay, tmp_path):
    first = [
        rec("I", after={"id": 1, "name": "a", "qty": 1}, pos=1, op_ts=at(1)),
        rec("I", after={"id": 2, "name": "b", "qty": 2}, pos=2, op_ts=at(2)),
        rec("I", after={"id": 5, "name": "x", "qty": 5}, table="OGG.OTHER", pos=3, op_ts=at(3)),
    ]
    later = [
        # Compressed update: name changes, qty keeps its value.
        rec("U", before={"id": 1}, after={"id": 1, "name": "aa"}, pos=4, op_ts=at(4)),
        # The key changes 2 -> 20, carrying only the key and one column: the rest comes from row 2.
        rec("U", before={"id": 2}, after={"id": 20, "qty": 22}, pos=5, op_ts=at(5)),
        rec("D", before={"id": 9}, pos=6, op_ts=at(6)),  # never there
        rec("U", before={"id": 8}, after={"id": 8, "name": "new"}, pos=7, op_ts=at(7)),  # creates the row
        rec("T", table="OGG.OTHER", pk=None, pos=8, op_ts=at(8)),
        rec("I", after={"id": 3, "name": "late", "qty": 3}, pos=9, op_ts=at(50)),  # after AS OF
    ]
    # The later records land in the file that sorts first, and one is delivered twice.
    write_jsonl(tmp_path / "in" / "a.json", later + later[:1])
    write_jsonl(tmp_path / "in" / "b.json", first)
    metrics, tables = replay(FMT, tmp_path / "in", as_of=T + 30_000)
    assert by_id(tables["OGG.T"]) == [
        {"id": 1, "name": "aa", "qty": 1},
        {"id": 8, "name": "new", "qty": None},
        {"id": 20, "name": "b", "qty": 22},
    ]
    assert tables["OGG.OTHER"] == []
    assert metrics["events"] == {
        "read": 10,
        "applied": 8,
        "after_as_of": 1,
        "ignored": 0,
        "duplicates": 1,
        "quarantined": 0,
    }
    t = metrics["tables"]["OGG.T"]
    assert {
        k: t[k] for k in ("inserts", "updates", "deletes", "updates_of_unknown_key", "deletes_of_unknown_key")
    } == {
        "inserts": 2,
        "updates": 3,
        "deletes": 0,
        "updates_of_unknown_key": 1,
        "deletes_of_unknown_key": 1,
    }
    assert metrics["tables"]["OGG.OTHER"]["truncates"] == 1
    assert_events_add_up(metrics)


def test_key_from_option_when_records_name_none(replay, tmp_path):
    lines = [
        rec("I", after={"k": 1, "v": "a"}, pk=None, pos=1),
        rec("U", before={"k": 1, "v": "a"}, after={"k": 1, "v": "b"}, pk=None, pos=2),
    ]
    metrics, tables = replay(FMT, write_jsonl(tmp_path / "in" / "a.json", lines), key="k")
    assert tables == {"OGG.T": [{"k": 1, "v": "b"}]}
    assert_events_add_up(metrics)


def test_malformed_records_are_quarantined_with_their_reason(spark, replay, tmp_path):
    lines = [
        (rec("I", after={"id": 1, "name": "ok"}), None),
        (rec(None, after={"id": 2}), "missing op"),
        (rec("X", after={"id": 3}), "unknown op"),
        (rec("I", after={"id": 4}, table=None), "missing table"),
        (rec("I", after={"id": 4}, table="  "), "missing table"),
        (rec("I", after={"id": 5}, op_ts="13/05/2020 15:40"), "type mismatch"),
        (rec("I"), "missing image"),
        (rec("U", before={"id": 6}), "missing image"),
        (rec("D"), "key unknown: delete with neither before nor after image"),
        (rec("I", after=[1, 2]), "row image not an object"),
        (rec("U", before="x", after={"id": 7}), "row image not an object"),
        (rec("I", after={"name": "no key"}), "missing key"),
        ("[1, 2]", "not a JSON object"),
        ("not json", "not JSON"),
    ]
    path = tmp_path / "in" / "bad.json"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(line for line, _ in lines) + '\n{"op_type": "I", "after": {"id": 9')
    events = decode_events(spark, FMT, path)
    assert [(e["kind"], e["reason"]) for e in events] == [
        ("change", None),
        *[("quarantined", r) if r != "missing key" else ("change", None) for _, r in lines[1:]],
        ("quarantined", "truncated"),
    ]
    metrics, tables = replay(FMT, path)
    assert tables == {"OGG.T": [{"id": 1, "name": "ok"}]}
    assert metrics["quarantine"]["reasons"] == {
        "missing op": 1,
        "unknown op": 1,
        "missing table": 2,
        "type mismatch": 1,
        "missing image": 2,
        "key unknown: delete with neither before nor after image": 1,
        "row image not an object": 2,
        "missing key": 1,
        "not a JSON object": 1,
        "not JSON": 1,
        "truncated": 1,
    }
    assert metrics["events"]["read"] == 15 and metrics["events"]["quarantined"] == 14
    # A pos that is not digits orders the record by op_ts, counted; it is no error.
    unreadable = write_jsonl(
        tmp_path / "in2" / "a.json", [rec("I", after={"id": 1, "name": "x"}, pos="12:34")]
    )
    metrics, tables = replay(FMT, unreadable)
    assert tables == {"OGG.T": [{"id": 1, "name": "x"}]}
    assert metrics["ordering"] == {"unreadable_log_position": 1}
    assert_events_add_up(metrics)


# --- missing-column flags (includeIsMissingFields) --------------------------------------------------


def flagged(*present: str, **values) -> dict:
    """An image as the formatter writes it with its missing-column flags on: every column of
    ``values`` with ``COL_isMissing`` beside it, false for the columns named in ``present``.

    A missing column's value is written as given (``None`` writes a null); ``...`` leaves it out.
    """
    image = {}
    for name, value in values.items():
        if value is not ...:
            image[name] = value
        image[f"{name}_isMissing"] = name not in present
    return image


def by_id_upper(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: r["ID"])


def flagged_lines() -> list[str]:
    """Inserts, a full and two compressed updates, and a delete, flags on throughout."""
    pk = ("ID",)
    return [
        rec("I", after=flagged("ID", "NOTE", "QTY", ID=1, NOTE="a", QTY=None), pk=pk, pos=1, op_ts=at(1)),
        rec("I", after=flagged("ID", "NOTE", "QTY", ID=2, NOTE="b", QTY=5), pk=pk, pos=2, op_ts=at(2)),
        # Full update: NOTE keeps its value, so the after image carries an unchanged column.
        rec(
            "U",
            before=flagged("ID", "NOTE", "QTY", ID=1, NOTE="a", QTY=None),
            after=flagged("ID", "NOTE", "QTY", ID=1, NOTE="a", QTY=7),
            pk=pk,
            pos=3,
            op_ts=at(3),
        ),
        # Compressed update, the missing columns written as nulls beside their true flags.
        rec(
            "U",
            before=flagged("ID", ID=2, NOTE=None, QTY=None),
            after=flagged("ID", "QTY", ID=2, NOTE=None, QTY=6),
            pk=pk,
            pos=4,
            op_ts=at(4),
        ),
        # Compressed update, the missing columns left out; QTY is present and set to null.
        rec(
            "U",
            before=flagged("ID", ID=1, NOTE=..., QTY=...),
            after=flagged("ID", "QTY", ID=1, NOTE=..., QTY=None),
            pk=pk,
            pos=5,
            op_ts=at(5),
        ),
        rec("I", after=flagged("ID", "NOTE", "QTY", ID=3, NOTE="c", QTY=1), pk=pk, pos=6, op_ts=at(6)),
        # A delete logging only the key.
        rec("D", before=flagged("ID", ID=3, NOTE=None, QTY=...), pk=pk, pos=7, op_ts=at(7)),
    ]


def test_missing_column_flags_decode_to_images_without_them(spark, tmp_path):
    events = decode_events(spark, FMT, write_jsonl(tmp_path / "in" / "a.json", flagged_lines()))
    got = [(e["op"], e["before"], e["after"], e["partial"]) for e in events]
    assert got == [
        ("insert", None, {"ID": 1, "NOTE": "a", "QTY": None}, False),
        ("insert", None, {"ID": 2, "NOTE": "b", "QTY": 5}, False),
        ("update", {"ID": 1, "NOTE": "a", "QTY": None}, {"ID": 1, "NOTE": "a", "QTY": 7}, False),
        ("update", {"ID": 2}, {"ID": 2, "QTY": 6}, True),
        ("update", {"ID": 1}, {"ID": 1, "QTY": None}, True),
        ("insert", None, {"ID": 3, "NOTE": "c", "QTY": 1}, False),
        ("delete", {"ID": 3}, None, False),
    ]


def test_missing_column_flags_never_reach_the_snapshot(replay, spark, tmp_path):
    metrics, tables = replay(FMT, write_jsonl(tmp_path / "in" / "a.json", flagged_lines()))
    # Row 2 keeps NOTE through the compressed update (its null there is a missing column); row 1
    # keeps NOTE and takes the null its QTY was set to.
    assert by_id_upper(tables["OGG.T"]) == [
        {"ID": 1, "NOTE": "a", "QTY": None},
        {"ID": 2, "NOTE": "b", "QTY": 6},
    ]
    # The source's columns and no flag (in the order the rows the fold writes give them).
    assert sorted(spark.read.parquet(metrics["tables"]["OGG.T"]["path"]).columns) == ["ID", "NOTE", "QTY"]
    assert metrics["events"] == {
        "read": 7,
        "applied": 7,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 0,
    }
    t = metrics["tables"]["OGG.T"]
    assert {k: t[k] for k in ("rows", "inserts", "updates", "deletes", "updates_of_unknown_key")} == {
        "rows": 2,
        "inserts": 3,
        "updates": 3,
        "deletes": 1,
        "updates_of_unknown_key": 0,
    }
    assert_events_add_up(metrics)


def test_only_boolean_companions_are_missing_column_flags(spark, tmp_path):
    lines = [
        # Flags on, and a source column named DONE_isMissing: its own flag makes it a column.
        rec("I", after=flagged("ID", "DONE_isMissing", ID=1, DONE_isMissing=True), pk=("ID",), pos=1),
        # Flags off: a boolean X_isMissing without X (false) and a text one are columns.
        rec(
            "I",
            after={"ID": 2, "LATE_isMissing": False, "CODE": "x", "CODE_isMissing": "yes"},
            pk=("ID",),
            pos=2,
        ),
        # A flag that is true although its column carries a value: the column is still absent.
        rec("U", after={"ID": 3, "NOTE": "stale", "NOTE_isMissing": True}, pk=("ID",), pos=3),
    ]
    events = decode_events(spark, FMT, write_jsonl(tmp_path / "in" / "a.json", lines))
    assert [(e["after"], e["partial"]) for e in events] == [
        ({"ID": 1, "DONE_isMissing": True}, False),
        ({"ID": 2, "LATE_isMissing": False, "CODE": "x", "CODE_isMissing": "yes"}, False),
        ({"ID": 3}, True),
    ]

"""--whole-transactions: a transaction applies whole or not at all, by the time of its last event."""

from __future__ import annotations

import pytest

from tests.conftest import assert_events_add_up, write_jsonl
from tests.replay.test_semantics import T0, dbz, dbz_truncate

from airflow_cdc_provider.replay.spec import spec_from_keywords
from reference.records.datahub_blob import message as blob
from reference.records.maxwell import T as MAXWELL_T
from reference.records.maxwell import rec as maxwell
from reference.records.shareplex import rec as shareplex


def by_id(tables: dict) -> dict:
    return {name: sorted(rows, key=lambda r: r["id"]) for name, rows in tables.items()}


def in_tx(record: dict, tx: str, order: int) -> dict:
    return {**record, "transaction": {"id": tx, "total_order": order, "data_collection_order": order}}


def transfer_landing(path):
    """Account 1 pays account 2 in one transaction whose two changes are two seconds apart."""
    return write_jsonl(
        path,
        [
            dbz("c", 1, T0, balance=100),
            dbz("c", 2, T0, balance=0),
            in_tx(dbz("u", 1, T0 + 1000, balance=70), "tx-9", 1),
            in_tx(dbz("u", 2, T0 + 3000, balance=30), "tx-9", 2),
            dbz("c", 3, T0 + 2000, balance=5),  # no transaction: applies by its own time
        ],
    )


def test_a_transaction_across_as_of_is_held_back_whole_and_counted(replay, tmp_path):
    landing = transfer_landing(tmp_path / "in" / "a.json")
    as_of = T0 + 2000

    _, halves = replay("debezium-json", landing, as_of=as_of, key="id")
    assert by_id(halves) == {
        "db.shop": [{"id": 1, "balance": 70}, {"id": 2, "balance": 0}, {"id": 3, "balance": 5}]
    }

    metrics, tables = replay("debezium-json", landing, as_of=as_of, key="id", whole_transactions=True)
    assert by_id(tables) == {
        "db.shop": [{"id": 1, "balance": 100}, {"id": 2, "balance": 0}, {"id": 3, "balance": 5}]
    }
    assert metrics["transactions"] == {"whole": True, "held_back": 1, "events_held_back": 1}
    assert metrics["events"] == {
        "read": 5,
        "applied": 3,
        "after_as_of": 2,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 0,
    }
    assert metrics["tables"]["db.shop"]["last_event_ms"] == T0 + 2000


def test_a_transaction_applies_whole_at_the_time_of_its_last_event(replay, tmp_path):
    landing = transfer_landing(tmp_path / "in" / "a.json")
    metrics, tables = replay("debezium-json", landing, as_of=T0 + 3000, key="id", whole_transactions=True)
    assert by_id(tables) == {
        "db.shop": [{"id": 1, "balance": 70}, {"id": 2, "balance": 30}, {"id": 3, "balance": 5}]
    }
    assert metrics["transactions"] == {"whole": True, "held_back": 0, "events_held_back": 0}
    assert_events_add_up(metrics)


def test_a_truncate_applies_with_its_transaction(replay, tmp_path):
    # The truncate and the reload of the table are one transaction; AS OF falls between them.
    truncate = dbz_truncate(T0 + 1000)
    landing = write_jsonl(
        tmp_path / "in" / "a.json",
        [
            dbz("c", 1, T0, balance=100),
            in_tx(truncate, "tx-5", 1),
            in_tx(dbz("c", 2, T0 + 3000, balance=7), "tx-5", 2),
        ],
    )
    _, emptied = replay("debezium-json", landing, as_of=T0 + 2000, key="id")
    assert emptied == {"db.shop": []}

    metrics, tables = replay("debezium-json", landing, as_of=T0 + 2000, key="id", whole_transactions=True)
    assert tables == {"db.shop": [{"id": 1, "balance": 100}]}
    assert metrics["tables"]["db.shop"]["truncates"] == 0
    assert metrics["transactions"] == {"whole": True, "held_back": 1, "events_held_back": 1}

    metrics, tables = replay("debezium-json", landing, as_of=T0 + 3000, key="id", whole_transactions=True)
    assert tables == {"db.shop": [{"id": 2, "balance": 7}]}
    assert metrics["tables"]["db.shop"]["truncates"] == 1
    assert_events_add_up(metrics)


def test_without_the_option_the_metrics_have_no_transactions_block(replay, tmp_path):
    metrics, _ = replay("debezium-json", transfer_landing(tmp_path / "in" / "a.json"), key="id")
    assert "transactions" not in metrics


def test_a_transaction_whose_commit_has_not_landed_is_held_back_at_any_as_of(replay, tmp_path):
    # Maxwell marks a transaction's last row with "commit": xid 8's has not landed yet.
    landing = write_jsonl(
        tmp_path / "in" / "a.json",
        [
            maxwell("insert", {"id": 1, "name": "a"}, xid=7, xoffset=0),
            maxwell("insert", {"id": 2, "name": "b"}, xid=7, commit=True),
            maxwell("update", {"id": 1, "name": "aa"}, old={"name": "a"}, xid=8, xoffset=0, ts=MAXWELL_T + 1),
            maxwell("delete", {"id": 2, "name": "b"}, xid=8, xoffset=1, ts=MAXWELL_T + 1),
        ],
    )
    metrics, tables = replay("maxwell-json", landing, whole_transactions=True)
    assert by_id(tables) == {"db.t": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]}
    assert metrics["transactions"] == {"whole": True, "held_back": 1, "events_held_back": 2}
    assert (metrics["events"]["applied"], metrics["events"]["after_as_of"]) == (2, 2)
    assert_events_add_up(metrics)


def test_shareplex_sequence_marks_the_last_change_of_a_transaction(replay, tmp_path):
    # Transaction 2.0.7 has two changes (size 2); only the first has landed.
    landing = write_jsonl(
        tmp_path / "in" / "a.json",
        [
            shareplex("ins", {"ID": "1", "NAME": "a"}, scn=1, trans="1.0.1", seq=1, size=2),
            shareplex("ins", {"ID": "2", "NAME": "b"}, scn=1, trans="1.0.1", seq=2, size=2),
            shareplex("upd", {"NAME": "aa"}, {"ID": "1"}, scn=2, trans="2.0.7", seq=1, size=2),
        ],
    )
    metrics, tables = replay("shareplex-json", landing, key="ID", whole_transactions=True)
    assert tables == {"S.T": [{"ID": "1", "NAME": "a"}, {"ID": "2", "NAME": "b"}]}
    assert metrics["transactions"] == {"whole": True, "held_back": 1, "events_held_back": 1}
    assert_events_add_up(metrics)


def test_datahub_blob_transactions_come_from_their_begin_and_end_markers(replay, tmp_path):
    t = 1_700_000_000_000

    def row(op, seq, second, **images):
        return blob(op, seq=seq, event_ms=t + second * 1000, **images)

    landing = write_jsonl(
        tmp_path / "in" / "a.json",
        [
            row("INSERT", 1, 0, after={"id": 1, "name": "a"}),
            row("TRANSACTION_BEGIN", 2, 1),
            row("UPDATE", 3, 1, before={"id": 1, "name": "a"}, after={"id": 1, "name": "b"}),
            row("INSERT", 4, 3, after={"id": 2, "name": "c"}),
            row("TRANSACTION_END", 5, 3),
            row("INSERT", 6, 4, after={"id": 3, "name": "alone"}),  # between transactions
            row("TRANSACTION_BEGIN", 7, 5),
            row("INSERT", 8, 5, after={"id": 4, "name": "never"}),  # its END has not landed
        ],
    )

    def names(tables: dict) -> list:
        return [r["name"] for r in by_id(tables)["db.t"]]

    _, halves = replay("datahub-blob", landing, as_of=t + 2000)
    assert names(halves) == ["b"]
    metrics, tables = replay("datahub-blob", landing, as_of=t + 2000, whole_transactions=True)
    assert names(tables) == ["a"]
    assert metrics["transactions"] == {"whole": True, "held_back": 1, "events_held_back": 1}
    metrics, tables = replay("datahub-blob", landing, as_of=t + 9000, whole_transactions=True)
    assert names(tables) == ["b", "c", "alone"]
    assert metrics["transactions"] == {"whole": True, "held_back": 1, "events_held_back": 1}
    assert metrics["ignored"] == {"transaction marker": 3}
    assert_events_add_up(metrics)


def test_a_format_without_transaction_ids_refuses_the_option(tmp_path):
    with pytest.raises(ValueError) as raised:
        spec_from_keywords(
            source_format="canal-json", inputs=[str(tmp_path)], as_of=0, output="/o", whole_transactions=True
        )
    assert str(raised.value) == (
        "--whole-transactions: canal-json records carry no transaction ids, so its transactions cannot "
        "be told apart; drop the option, or use a format that carries them: aws-dms, cdl-json, "
        "datahub-blob, debezium-avro, debezium-json, debezium-mongodb, dts-avro, maxwell-json, ogg-json, "
        "qlik-json, shareplex-json"
    )


def test_whole_transactions_refuse_an_incremental_run(tmp_path):
    with pytest.raises(ValueError, match="cannot be combined with --base or --keep-state"):
        spec_from_keywords(
            source_format="debezium-json",
            inputs=[str(tmp_path)],
            as_of=0,
            output="/o",
            keep_state=True,
            whole_transactions=True,
        )

"""``cdc-replay history``: the versions of every row, and the property that ties them to snapshots.

The property: for every instant T up to ``--until``, the versions with
``_cdc_valid_from <= T < _cdc_valid_to`` (null: open) are exactly the rows of ``snapshot --as-of T``.
It is checked on every format's generated histories (with every injected fault) at many instants
against the plain Python fold, and on hand-made landings against real snapshot runs where the
rules get subtle: key changes, truncates, partial images, times running backwards, transactions.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_events_add_up, rows_of, write_jsonl
from tests.reliability.test_accounting import assert_accounted
from tests.replay.test_semantics import T0, dbz, dbz_truncate
from tests.replay.test_whole_transactions import transfer_landing

from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.replay.runs.history import run_history
from airflow_cdc_provider.replay.runs.snapshot import run_snapshot
from airflow_cdc_provider.replay.spec import SnapshotSpec
from reference.histories import (
    DELETE,
    ENCODERS,
    FILE_ENCODERS,
    UPDATE,
    Change,
    before_images,
    fold_history,
    land,
    random_history,
)
from reference.histories import T0 as HISTORY_T0
from reference.records.shareplex import rec as shareplex_rec

VERSION_COLUMNS = ("_cdc_valid_from", "_cdc_valid_to", "_cdc_op", "_cdc_position")


def _spec(fmt: str, landing: Path, output: Path, until: int | str, **options) -> SnapshotSpec:
    args = SnapshotArgs.build(
        source_format=fmt, input_paths=str(landing), output_path=str(output), as_of=until, **options
    )
    return SnapshotSpec.each_from_args(args)[0]


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.replace(tzinfo=timezone.utc).timestamp() * 1000)


def versions_of(spark, path: str) -> list[dict]:
    """A history table's rows, validity as epoch ms (the test session runs in UTC)."""
    rows = rows_of(spark, path)
    for row in rows:
        row["_cdc_valid_from"], row["_cdc_valid_to"] = _ms(row["_cdc_valid_from"]), _ms(row["_cdc_valid_to"])
    return rows


def at(versions: list[dict], t_ms: int) -> list[dict]:
    """The versions valid at ``t_ms``, as snapshot rows (sorted as ``rows_of`` sorts them)."""
    rows = [
        {k: v for k, v in r.items() if k not in VERSION_COLUMNS}
        for r in versions
        if r["_cdc_valid_from"] <= t_ms and (r["_cdc_valid_to"] is None or t_ms < r["_cdc_valid_to"])
    ]
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


@pytest.mark.parametrize("fmt", sorted(ENCODERS))
def test_history_selects_the_snapshot_of_every_instant(fmt, spark, tmp_path):
    rng = random.Random(f"history-{fmt}")
    landing = tmp_path / "in"
    landing.mkdir()
    until = HISTORY_T0 + 13_000  # after every change of a history (at most 12, one per second)
    histories = {f"h{i}": _partial_where_possible(fmt, random_history(rng)) for i in range(2)}
    expected = {h: land(ENCODERS[fmt], landing, h, changes, until, rng) for h, changes in histories.items()}
    keys = ",".join(ENCODERS[fmt].key)
    metrics = run_history(spark, _spec(fmt, landing, tmp_path / "history", until, key_columns=keys))
    assert_events_add_up(metrics)
    encoder = ENCODERS[fmt]
    current = {}
    for history, changes in histories.items():
        table = encoder.table(history)
        versions = versions_of(spark, metrics["tables"][table]["path"])
        # Every applied insert or update (of a known key or not) writes one version; deletes write none.
        assert metrics["tables"][table]["versions"] == len(versions) == sum(c.op != DELETE for c in changes)
        for t_ms in range(HISTORY_T0 - 500, until + 1, 250):
            rows, _ = fold_history(encoder, changes, t_ms)
            assert at(versions, t_ms) == rows, (table, t_ms)
        current[table] = at(versions, until)
        assert metrics["tables"][table]["rows"] == len(current[table])
    assert metrics["versions"] == sum(info["versions"] for info in metrics["tables"].values())
    # Counts, quarantine and rows at --until are those of the snapshot at --until.
    assert_accounted(metrics, current, tmp_path / "history", fmt, expected)


def test_history_of_avro_containers_selects_the_snapshot_of_every_instant(spark, tmp_path):
    """debezium-avro lands binary containers (no line faults): clean histories, one container each."""
    encoder = FILE_ENCODERS["debezium-avro"]
    rng = random.Random("history-debezium-avro")
    landing = tmp_path / "in"
    landing.mkdir()
    histories = {f"h{i}": random_history(rng) for i in range(2)}
    for history, changes in histories.items():
        lines = [
            line.text
            for change, before in zip(changes, before_images(changes))
            for line in encoder.write(history, change, before)
        ]
        (landing / f"{history}.avro").write_bytes(encoder.container(lines))
    until = HISTORY_T0 + 13_000
    metrics = run_history(spark, _spec("debezium-avro", landing, tmp_path / "h", until, key_columns="id"))
    assert_events_add_up(metrics)
    for history, changes in histories.items():
        versions = versions_of(spark, metrics["tables"][encoder.table(history)]["path"])
        for t_ms in range(HISTORY_T0 - 500, until + 1, 250):
            assert at(versions, t_ms) == fold_history(encoder, changes, t_ms)[0], (history, t_ms)


def _partial_where_possible(fmt: str, changes: list[Change]) -> list[Change]:
    """Formats with partial images get them for every update of a row that exists: the merge is tested."""
    if not ENCODERS[fmt].partial_images:
        return changes
    live: set[int] = set()
    out = []
    for c in changes:
        out.append(replace(c, partial=c.op == UPDATE and c.key in live))
        if c.op == DELETE:
            live.discard(c.key)
        else:
            live.add(c.key)
    return out


def test_versions_carry_their_change_and_position(spark, tmp_path):
    landing = tmp_path / "in"
    write_jsonl(
        landing / "a.json",
        [
            dbz("c", 1, T0, pos=100, name="ann"),
            dbz("u", 1, T0 + 1000, pos=200, before={"id": 1, "name": "ann"}, name="bea"),
            dbz("c", 2, T0 + 1000, pos=250, name="bob"),
            dbz("u", 3, T0 + 2000, pos=300, before={"id": 1, "name": "bea"}, name="bea"),  # key 1 -> 3
            dbz("d", 2, T0 + 3000, pos=400, name="bob"),
            dbz("c", 2, T0 + 5000, pos=500, name="bo"),
            dbz("u", 2, T0 + 9000, pos=600, name="late"),  # after --until
        ],
    )
    write_jsonl(landing / "b.json", [dbz("c", 2, T0 + 1000, pos=250, name="bob")])  # a re-delivery
    until = T0 + 6000
    metrics = run_history(spark, _spec("debezium-json", landing, tmp_path / "h", until, key_columns="id"))
    versions = versions_of(spark, metrics["tables"]["db.shop"]["path"])
    table = [(r["id"], r["name"], r["_cdc_valid_from"], r["_cdc_valid_to"], r["_cdc_op"]) for r in versions]
    assert sorted(table, key=lambda v: (v[2], v[0])) == [
        (1, "ann", T0, T0 + 1000, "insert"),
        (1, "bea", T0 + 1000, T0 + 2000, "update"),
        (2, "bob", T0 + 1000, T0 + 3000, "insert"),
        (3, "bea", T0 + 2000, None, "update"),
        (2, "bo", T0 + 5000, None, "insert"),
    ]
    assert {r["_cdc_position"] for r in versions} == {f"1:{p}:0" for p in (100, 200, 250, 300, 500)}
    assert (metrics["rows"], metrics["versions"], metrics["events"]["duplicates"]) == (2, 5, 1)
    assert list(versions_of(spark, metrics["tables"]["db.shop"]["path"])[0]) == [
        "id",
        "name",
        *VERSION_COLUMNS,
    ]
    # Before the first change, at and between the changes' times, and after --until's last change.
    instants = [T0 - 1, T0 + 1500, T0 + 2000, T0 + 5500]
    _assert_snapshots_match(spark, tmp_path, landing, versions, instants)


def _assert_snapshots_match(
    spark,
    tmp_path: Path,
    landing: Path,
    versions: list[dict],
    instants,
    fmt="debezium-json",
    key="id",
    **options,
):
    """The versions valid at each instant are the rows of a real snapshot run as of it."""
    for t_ms in instants:
        spec = _spec(fmt, landing, tmp_path / f"snap-{t_ms}", t_ms, key_columns=key, **options)
        metrics = run_snapshot(spark, spec)
        rows = [rows_of(spark, info["path"]) for info in metrics["tables"].values()]
        assert at(versions, t_ms) == (rows[0] if rows else []), t_ms


def test_event_times_running_backwards(spark, tmp_path):
    """A change whose time is later than the change after it is overridden from the earlier time on."""
    landing = tmp_path / "in"
    write_jsonl(
        landing / "a.json",
        [
            dbz("c", 1, T0, pos=100, name="ann"),
            dbz("u", 1, T0 + 4000, pos=200, name="four"),  # its time runs ahead of the next change's
            dbz("u", 1, T0 + 2000, pos=300, name="two"),
            dbz("u", 1, T0 + 6000, pos=400, name="six"),
        ],
    )
    metrics = run_history(spark, _spec("debezium-json", landing, tmp_path / "h", T0 + 9000, key_columns="id"))
    versions = versions_of(spark, metrics["tables"]["db.shop"]["path"])
    assert sorted((r["_cdc_valid_from"], r["_cdc_valid_to"], r["name"]) for r in versions) == [
        (T0, T0 + 2000, "ann"),
        (T0 + 2000, T0 + 6000, "two"),
        (T0 + 6000, None, "six"),
    ]
    instants = [T0 + 1999, T0 + 4000, T0 + 6000]
    _assert_snapshots_match(spark, tmp_path, landing, versions, instants)


def test_a_truncate_ends_every_current_version(spark, tmp_path):
    landing = tmp_path / "in"
    write_jsonl(
        landing / "a.json",
        [
            dbz("c", 1, T0, name="ann"),
            dbz("c", 2, T0 + 1000, name="bob"),
            dbz_truncate(T0 + 2000),
            dbz("c", 2, T0 + 3000, name="bo"),
        ],
    )
    metrics = run_history(spark, _spec("debezium-json", landing, tmp_path / "h", T0 + 5000, key_columns="id"))
    versions = versions_of(spark, metrics["tables"]["db.shop"]["path"])
    assert sorted((r["_cdc_valid_from"], r["_cdc_valid_to"], r["id"], r["name"]) for r in versions) == [
        (T0, T0 + 2000, 1, "ann"),
        (T0 + 1000, T0 + 2000, 2, "bob"),
        (T0 + 3000, None, 2, "bo"),
    ]
    assert (metrics["rows"], metrics["versions"], metrics["tables"]["db.shop"]["truncates"]) == (1, 3, 1)
    _assert_snapshots_match(spark, tmp_path, landing, versions, [T0 + 1000, T0 + 2000, T0 + 3000])


def test_a_partial_key_change_carries_the_row_into_the_new_keys_versions(spark, tmp_path):
    """Shareplex: partial updates merge into full rows; a key change carries the row as it stood."""

    def at_second(op, data, key=None, *, scn):
        return shareplex_rec(op, data, key, table="S.MOVE", scn=scn, time=f"2024-01-01T00:00:{scn:02d}")

    landing = tmp_path / "in"
    landing.mkdir()
    lines = [
        at_second("ins", {"ID": "1", "A": "a", "B": "b", "C": "c"}, scn=10),
        at_second("upd", {"B": "b2"}, {"ID": "1"}, scn=11),
        at_second("upd", {"ID": "2", "A": "a3"}, {"ID": "1"}, scn=12),  # key 1 -> 2, A changes
        at_second("upd", {"B": "b4"}, {"ID": "2"}, scn=13),
        at_second("ins", {"ID": "1", "A": "new", "B": "new", "C": "new"}, scn=14),
    ]
    (landing / "a.json").write_text("\n".join(lines) + "\n")
    t = 1_704_067_200_000  # 2024-01-01T00:00:00Z
    metrics = run_history(
        spark, _spec("shareplex-json", landing, tmp_path / "h", t + 20_000, key_columns="ID")
    )
    versions = versions_of(spark, metrics["tables"]["S.MOVE"]["path"])
    assert sorted((r["_cdc_valid_from"] - t, r["ID"], r["A"], r["B"], r["C"]) for r in versions) == [
        (10_000, "1", "a", "b", "c"),
        (11_000, "1", "a", "b2", "c"),
        (12_000, "2", "a3", "b2", "c"),
        (13_000, "2", "a3", "b4", "c"),
        (14_000, "1", "new", "new", "new"),
    ]
    instants = [t + s * 1000 for s in (11, 12, 14)]
    _assert_snapshots_match(spark, tmp_path, landing, versions, instants, fmt="shareplex-json", key="ID")


def test_whole_transactions_start_their_versions_when_the_transaction_ends(spark, tmp_path):
    """--whole-transactions: a transaction's versions start at its last event's time, together."""
    landing = transfer_landing(tmp_path / "in" / "a.json").parent
    until = T0 + 5000
    metrics = run_history(
        spark,
        _spec(
            "debezium-json",
            landing,
            tmp_path / "h",
            until,
            key_columns="id",
            whole_transactions=True,
            with_metadata=True,
        ),
    )
    versions = versions_of(spark, metrics["tables"]["db.shop"]["path"])
    # --with-metadata: the change's own time beside the time its transaction made it visible.
    first_leg = [r for r in versions if r["balance"] == 70]
    assert [(r["_cdc_valid_from"], _ms(r.pop("_cdc_event_ts"))) for r in first_leg] == [
        (T0 + 3000, T0 + 1000)
    ]
    for r in versions:
        for name in ("_cdc_event_ts", "_cdc_file", "_cdc_line"):
            r.pop(name, None)
    assert sorted((r["_cdc_valid_from"], r["_cdc_valid_to"], r["id"], r["balance"]) for r in versions) == [
        (T0, T0 + 3000, 1, 100),
        (T0, T0 + 3000, 2, 0),
        (T0 + 2000, None, 3, 5),
        (T0 + 3000, None, 1, 70),
        (T0 + 3000, None, 2, 30),
    ]
    assert metrics["transactions"] == {"whole": True, "held_back": 0, "events_held_back": 0}
    instants = [T0 + 2000, T0 + 3000]
    _assert_snapshots_match(spark, tmp_path, landing, versions, instants, whole_transactions=True)


def test_the_command_line_writes_a_history(spark, tmp_path, capsys):
    from airflow_cdc_provider.jobs.cli import EXIT_OK, EXIT_USAGE, main
    from airflow_cdc_provider.sample_data import SAMPLE_LANDING

    expected = json.loads((REPO / "airflow_cdc_provider" / "sample_data" / "expected.json").read_text())
    output = tmp_path / "history"
    argv = ["history", "--format", "debezium-json", "--input", str(SAMPLE_LANDING), "--key", "id"]
    assert main([*argv, "--until", expected["as_of"], "--output", str(output)]) == EXIT_OK
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((output / "_cdc_metrics.json").read_text())
    # The sample's snapshot at --until: its rows are the current versions, its counts the same.
    assert (printed["rows"], printed["events"]) == (expected["rows"], expected["events"])
    import pyarrow.parquet as pq

    def key(row: dict) -> str:
        return json.dumps(row, sort_keys=True, default=str)

    for name, rows in expected["snapshot"].items():
        versions = pq.read_table(output / name).to_pylist()
        assert printed["tables"][name]["versions"] == len(versions) > len(rows)
        current = [
            {k: v for k, v in r.items() if k not in VERSION_COLUMNS}
            for r in versions
            if r["_cdc_valid_to"] is None
        ]
        assert sorted(current, key=key) == sorted(rows, key=key), name
    with pytest.raises(SystemExit) as refused:
        main([*argv, "--until", "2024-09-02T00:00:00Z", "--output", str(output), "--keep-state"])
    assert refused.value.code == EXIT_USAGE


def test_versions_of_a_split_read_file_name_their_line_where_no_log_position(spark, tmp_path, monkeypatch):
    """A large file is read in splits: a version shows its log position, else its exact line."""
    from airflow_cdc_provider.spark import reader

    landing = tmp_path / "in"
    write_jsonl(
        landing / "big.json",
        [
            dbz("c", 1, T0, name="ann"),  # no log position: the position shown is file:line
            dbz("u", 1, T0 + 1000, name="bea"),
            dbz("c", 2, T0 + 2000, pos=700, name="bob"),  # a log position: shown as it is
        ],
    )
    monkeypatch.setattr(reader, "WHOLE_FILE_MAX_BYTES", 16)  # every file is split-read
    metrics = run_history(spark, _spec("debezium-json", landing, tmp_path / "h", T0 + 5000, key_columns="id"))
    versions = versions_of(spark, metrics["tables"]["db.shop"]["path"])
    big = f"file:{landing / 'big.json'}"
    assert sorted((r["name"], r["_cdc_position"]) for r in versions) == [
        ("ann", f"{big}:1"),
        ("bea", f"{big}:2"),
        ("bob", "1:700:0"),
    ]

"""Chains of key changes whose update images are partial: every hop carries the whole row.

One source history, written in each format that can land it: a row whose key changes four times
(two hops before the middle AS OF, two after it) while its other columns change in between, a key
that changes and then changes back, and a key change onto a key deleted earlier that then moves
on. Each update names only the columns it changes (and the key), the way Shareplex ``data``,
GoldenGate compressed updates, Qlik ``columnMask`` and DTS ``NONE`` values write it; Canal and
Maxwell write the full row in ``data`` beside ``old``, so their chains are plain full-image moves.

The reference fold (``reference.fold``) applies the landed events by the rules of docs/design.md
(a key change deletes the old key and writes the new one from the row it had, overlaid with the
partial image). Snapshots at several AS OFs (one scan) and the history's versions at every instant must be exactly
its rows. Formats that cannot land such a chain: ``debezium-mongodb`` (``_id`` never changes),
``debezium-json``/Lindorm, ``cdl-json``, ``aws-dms``, the DataHub formats and ``debezium-avro``
(their update images are full rows).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import assert_events_add_up, rows_of, write_jsonl
from tests.reliability.test_accounting import quarantine_rows
from tests.replay.test_history import at, versions_of

from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.replay import resolve
from airflow_cdc_provider.replay.runs.history import run_history
from airflow_cdc_provider.replay.runs.many_as_ofs import run_snapshots
from airflow_cdc_provider.replay.runs.snapshot import run_snapshot
from airflow_cdc_provider.replay.spec import SnapshotSpec, spec_from_keywords
from reference import fold
from reference.histories import T0, iso
from reference.records.canal import msg as canal_msg
from reference.records.dts_avro import chars, empty, integer
from reference.records.dts_avro import message as dts_message
from reference.records.dts_avro import record as dts_record
from reference.records.maxwell import rec as maxwell_rec
from reference.records.ogg import rec as ogg_rec
from reference.records.qlik import dt_msg, md
from reference.records.shareplex import rec as shareplex_rec

KEY = ("ID", "CITY")
COLUMNS = ("ID", "CITY", "NAME", "COMMENT_TXT", "QTY")
MID = T0 + 12_500  # after step 12: the first two hops of the long chain, not the last two
UNTIL = T0 + 20_000  # after every step


@dataclass(frozen=True)
class Step:
    """One change at the source, at second ``second`` (also its log position)."""

    op: str  # ins, upd, del
    key: tuple[int, str]  # the row's key before the change (an insert's new key)
    values: dict[str, Any]  # ins: the other columns; upd: the columns it sets (key columns move the row)
    second: int


STEPS = [
    Step("ins", (2, "sp ace"), {"NAME": "n", "COMMENT_TXT": "papa", "QTY": 1}, 1),
    Step("ins", (10, "a"), {"NAME": "ten", "COMMENT_TXT": "c10", "QTY": 10}, 2),
    Step("ins", (20, "d"), {"NAME": "old", "COMMENT_TXT": "gone", "QTY": 20}, 3),
    Step("upd", (2, "sp ace"), {"QTY": 2}, 4),
    Step("upd", (2, "sp ace"), {"ID": 1, "CITY": "south", "NAME": "n5"}, 5),  # hop 1
    Step("upd", (10, "a"), {"ID": 11, "CITY": "b"}, 6),  # away ...
    Step("ins", (2, "sp ace"), {"NAME": "reused", "COMMENT_TXT": "other", "QTY": 0}, 7),  # a new row
    Step("upd", (1, "south"), {"ID": 4, "CITY": "zürich"}, 8),  # hop 2: only the key
    Step("del", (20, "d"), {}, 9),
    Step("ins", (21, "e"), {"NAME": "e", "COMMENT_TXT": "keep", "QTY": 21}, 10),
    Step("upd", (11, "b"), {"COMMENT_TXT": "c11"}, 11),
    Step("upd", (4, "zürich"), {"QTY": 12}, 12),
    Step("upd", (11, "b"), {"ID": 10, "CITY": "a"}, 13),  # ... and back
    Step("upd", (21, "e"), {"ID": 20, "CITY": "d"}, 14),  # onto the key deleted at 9
    Step("upd", (4, "zürich"), {"ID": 7, "CITY": "x y"}, 15),  # hop 3, after MID
    Step("upd", (10, "a"), {"QTY": 16}, 16),
    Step("upd", (7, "x y"), {"ID": 9, "CITY": "nine", "NAME": "n17"}, 17),  # hop 4
    Step("upd", (20, "d"), {"ID": 22, "CITY": "f", "QTY": 23}, 18),
]


def row(id_: int, city: str, name: str, comment: str, qty: int) -> dict[str, Any]:
    return dict(zip(COLUMNS, (id_, city, name, comment, qty)))


# What the source holds; the fold of the landed events must give exactly these.
AT_MID = [
    row(2, "sp ace", "reused", "other", 0),
    row(4, "zürich", "n5", "papa", 12),
    row(11, "b", "ten", "c11", 10),
    row(21, "e", "e", "keep", 21),
]
AT_UNTIL = [
    row(2, "sp ace", "reused", "other", 0),
    row(9, "nine", "n17", "papa", 12),
    row(10, "a", "ten", "c11", 16),
    row(22, "f", "e", "keep", 23),
]


@dataclass(frozen=True)
class Event:
    """A landed change: the full rows before and after it, and the partial image it carries."""

    op: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    image: dict[str, Any]  # the key (new) and the columns the change sets
    second: int

    @property
    def ms(self) -> int:
        return T0 + self.second * 1000


def key_of(r: dict[str, Any]) -> tuple:
    return tuple(r[c] for c in KEY)


def source_events(steps: list[Step]) -> list[Event]:
    """Run ``steps`` against a source table; each change with its rows before and after it."""
    table: dict[tuple, dict[str, Any]] = {}
    out = []
    for s in steps:
        if s.op == "ins":
            after = {**dict(zip(KEY, s.key)), **s.values}
            table[s.key] = after
            out.append(Event("ins", None, after, dict(after), s.second))
        elif s.op == "del":
            out.append(Event("del", table.pop(s.key), None, {}, s.second))
        else:
            before = table.pop(s.key)
            after = {**before, **s.values}
            table[key_of(after)] = after
            image = {**{c: after[c] for c in KEY}, **s.values}
            out.append(Event("upd", before, after, image, s.second))
    return out


EVENTS = source_events(STEPS)


def reference_fold(events: list[Event], as_of_ms: int) -> list[dict[str, Any]]:
    """The reference fold of the events as landed: updates carry their partial images, in key order."""
    landed = [
        fold.Event(
            {"ins": fold.INSERT, "upd": fold.UPDATE, "del": fold.DELETE}[e.op],
            e.ms,
            order=(e.second,),
            before=e.before,
            after=e.image if e.op == "upd" else e.after,
            partial=e.op == "upd",
        )
        for e in events
    ]
    return fold.fold(landed, as_of_ms, key=KEY).rows(order=key_of)


def test_the_reference_fold_gives_what_the_source_holds():
    assert reference_fold(EVENTS, MID) == AT_MID
    assert reference_fold(EVENTS, UNTIL) == AT_UNTIL


# ------------------------------------------------------------------ one writer per format


def _ms_text(ms: int, fmt: str) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime(fmt)


def _shareplex(e: Event) -> str:
    common = {"table": "S.CHAIN", "time": iso(e.ms), "scn": e.second, "trans": "1", "seq": 1}
    if e.op == "upd":  # data: the changed columns; key: the row's old key
        return shareplex_rec("upd", e.image, {c: e.before[c] for c in KEY}, **common)
    return shareplex_rec(e.op, e.after or e.before, **common)


def _ogg(e: Event) -> str:
    common = {
        "table": "OGG.CHAIN",
        "op_ts": _ms_text(e.ms, "%Y-%m-%d %H:%M:%S.%f"),
        "pos": e.second,
        "pk": KEY,
    }
    if e.op == "upd":  # compressed: the old key beside the new key and the changed columns
        return ogg_rec("U", before={c: e.before[c] for c in KEY}, after=e.image, **common)
    if e.op == "del":
        return ogg_rec("D", before=e.before, **common)
    return ogg_rec("I", after=e.after, **common)


_QLIK_MD = {
    "ID": (1, "INT4", 10, 0, 1),
    "CITY": (2, "WSTRING", 0, 0, 2),
    "NAME": (3, "WSTRING", 0, 0, 0),
    "COMMENT_TXT": (4, "WSTRING", 0, 0, 0),
    "QTY": (5, "INT4", 10, 0, 0),
}


def _qlik(e: Event) -> str:
    op = {"ins": "INSERT", "upd": "UPDATE", "del": "DELETE"}[e.op]
    full = e.before if e.op == "del" else e.after
    captured = e.image if e.op == "upd" else full  # a clear bit: a column not captured
    data = {c: full[c] if c in captured else None for c in COLUMNS}
    mask = f"{sum(1 << i for i, c in enumerate(COLUMNS) if c in captured):02X}"
    seq = _ms_text(e.ms, "%Y%m%d%H%M%S00") + f"{e.second:019d}"
    before = {c: e.before[c] for c in KEY} if e.op == "upd" else None
    at_ = iso(e.ms, millis=True)
    return json.dumps(dt_msg(op, data, before, seq=seq, at=at_, mask=mask, schema="dbo", table="CHAIN"))


def _qlik_preamble() -> list[str]:
    return [json.dumps(md("CHAIN", _QLIK_MD, schema="dbo", schema_id="md-chain"))]


_DTS_FIELDS = [("ID", 8), ("CITY", 253), ("NAME", 253), ("COMMENT_TXT", 253), ("QTY", 8)]


def _dts_values(r: dict[str, Any], carried: dict[str, Any] | None = None) -> list[Any]:
    """A positional DTS image; columns outside ``carried`` (when given) are ``NONE``: not carried."""

    def one(name: str, type_number: int) -> Any:
        if carried is not None and name not in carried:
            return empty("NONE")
        return integer(r[name]) if type_number == 8 else chars(r[name])

    return [one(name, type_number) for name, type_number in _DTS_FIELDS]


def _dts(e: Event) -> str:
    before = _dts_values(e.before) if e.before is not None else None
    after = _dts_values(e.after, e.image if e.op == "upd" else None) if e.after is not None else None
    record = dts_record(
        {"ins": "INSERT", "upd": "UPDATE", "del": "DELETE"}[e.op],
        e.second,
        before=before,
        after=after,
        table="db.chain",
        fields=_DTS_FIELDS,
        pk='{"PRIMARY":["ID","CITY"]}',
        ts=e.ms // 1000,
        position=f"{e.second}@mysql-bin.000003",
    )
    value = base64.b64encode(dts_message(record)).decode("ascii")
    return json.dumps({"topic": "dts", "partition": 0, "offset": e.second, "value": value})


_CANAL_TYPES = {
    "ID": "int(11)",
    "CITY": "varchar(20)",
    "NAME": "varchar(20)",
    "COMMENT_TXT": "varchar(20)",
    "QTY": "int(11)",
}


def _texts(r: dict[str, Any]) -> dict[str, str]:
    return {c: str(v) for c, v in r.items()}


def _canal(e: Event) -> str:
    full = e.before if e.op == "del" else e.after
    old = [_texts({c: e.before[c] for c in e.image if e.before[c] != e.after[c]})] if e.op == "upd" else None
    return canal_msg(
        {"ins": "INSERT", "upd": "UPDATE", "del": "DELETE"}[e.op],
        [_texts(full)],
        old=old,
        table="chain",
        es=e.ms,
        id_=e.second,
        mysql=_CANAL_TYPES,
        pk=KEY,
    )


def _maxwell(e: Event) -> str:
    common = {"table": "chain", "ts": e.ms // 1000, "xid": e.second, "commit": True, "pk": KEY}
    common["position"] = f"mysql-bin.000003:{e.second}"
    if e.op == "upd":  # old: the previous values of the columns that changed
        old = {c: e.before[c] for c in e.image if e.before[c] != e.after[c]}
        return maxwell_rec("update", e.after, old=old, **common)
    return maxwell_rec({"ins": "insert", "del": "delete"}[e.op], e.after or e.before, **common)


@dataclass(frozen=True)
class Writer:
    fmt: str
    table: str  # the snapshot's table
    write: Callable[[Event], str]
    key: tuple[str, ...] | None = None  # --key, for formats whose records do not name their key
    preamble: Callable[[], list[str]] = list


WRITERS = {
    w.fmt: w
    for w in (
        Writer("shareplex-json", "S.CHAIN", _shareplex, key=KEY),
        Writer("ogg-json", "OGG.CHAIN", _ogg),
        Writer("qlik-json", "dbo.CHAIN", _qlik, preamble=_qlik_preamble),
        Writer("dts-avro", "db.chain", _dts),
        Writer("canal-json", "db.chain", _canal),
        Writer("maxwell-json", "db.chain", _maxwell),
    )
}


def land(writer: Writer, folder: Path, events: list[Event] = EVENTS) -> Path:
    """The events in two files, the later half in the file that sorts first."""
    lines = [writer.write(e) for e in events]
    half = len(lines) // 2
    write_jsonl(folder / "a.json", lines[half:])
    write_jsonl(folder / "b.json", writer.preamble() + lines[:half])
    return folder


def table_rows(spark, path: str) -> list[dict[str, Any]]:
    """A table's rows in key order, only the source's columns (the history's are kept apart)."""
    return sorted(({c: r[c] for c in COLUMNS} for r in rows_of(spark, path)), key=key_of)


def _args(writer: Writer, landing: Path, output: str, as_of, **options) -> SnapshotArgs:
    return SnapshotArgs.build(
        source_format=writer.fmt,
        input_paths=str(landing),
        output_path=output,
        as_of=as_of,
        key_columns=writer.key,
        **options,
    )


# ------------------------------------------------------------------ the checks


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_chains_rebuild_exactly_at_several_as_ofs(fmt, spark, tmp_path):
    writer = WRITERS[fmt]
    landing = land(writer, tmp_path / "in")
    as_ofs = [MID, UNTIL]
    output = str(tmp_path / "snap" / "at={as_of:%H%M%S}")
    together = run_snapshots(spark, SnapshotSpec.each_from_args(_args(writer, landing, output, as_ofs)))
    for metrics, as_of in zip(together, as_ofs):
        assert table_rows(spark, metrics["tables"][writer.table]["path"]) == reference_fold(EVENTS, as_of)
        assert_events_add_up(metrics)
        assert metrics["quarantine"]["records"] == 0
    updates = {m["as_of_ms"]: m["tables"][writer.table]["updates"] for m in together}
    assert updates == {MID: 6, UNTIL: 12}


# Once decoded, every format's chain is carried by the same code: the snapshots above check each
# format's images, the histories two kinds (Shareplex ``data``/``key``, Qlik ``columnMask``).
@pytest.mark.parametrize("fmt", ("shareplex-json", "qlik-json"))
def test_history_follows_the_chain(fmt, spark, tmp_path):
    writer = WRITERS[fmt]
    landing = land(writer, tmp_path / "in")
    args = _args(writer, landing, str(tmp_path / "h"), UNTIL, history=True)
    metrics = run_history(spark, SnapshotSpec.each_from_args(args)[0])
    versions = versions_of(spark, metrics["tables"][writer.table]["path"])
    for second in range(0, 21):
        instant = T0 + second * 1000
        assert sorted(at(versions, instant), key=key_of) == reference_fold(EVENTS, instant), second
    # The row of the long chain, version by version: every key keeps the comment set at 1.
    papa = sorted(
        (r["_cdc_valid_from"] - T0, None if r["_cdc_valid_to"] is None else r["_cdc_valid_to"] - T0, r["ID"])
        for r in versions
        if r["COMMENT_TXT"] == "papa"
    )
    assert papa == [
        (1000, 4000, 2),
        (4000, 5000, 2),
        (5000, 8000, 1),
        (8000, 12_000, 4),
        (12_000, 15_000, 4),
        (15_000, 17_000, 7),
        (17_000, None, 9),
    ]
    assert metrics["quarantine"]["records"] == 0


def test_a_chain_whose_first_hops_are_in_the_base(spark, tmp_path):
    """--base: the hops before the base's AS OF are in its rows, the later ones follow them."""
    writer = WRITERS["shareplex-json"]
    day1 = [e for e in EVENTS if e.ms <= MID]
    landing = tmp_path / "landing"
    write_jsonl(landing / "day1" / "part-0.json", [writer.write(e) for e in day1])
    write_jsonl(landing / "day2" / "part-0.json", [writer.write(e) for e in EVENTS if e.ms > MID])

    def snapshot(output: str, as_of: int, **options) -> dict:
        spec = spec_from_keywords(
            source_format=writer.fmt,
            inputs=[str(landing)],
            as_of=as_of,
            output=str(tmp_path / output),
            key=list(KEY),
            **options,
        )
        return run_snapshot(spark, spec)

    base = snapshot("day1", MID, keep_state=True)
    assert table_rows(spark, base["tables"][writer.table]["path"]) == AT_MID
    metrics = snapshot("day2", UNTIL, base=str(tmp_path / "day1"))
    assert metrics["mode"] == "incremental"
    assert table_rows(spark, metrics["tables"][writer.table]["path"]) == AT_UNTIL
    assert_events_add_up(metrics)


def test_a_chain_too_long_to_rebuild_is_quarantined_not_guessed(spark, tmp_path, monkeypatch):
    """Past the rounds allowed, the hops not rebuilt are quarantined and their rows are not written:
    not in the snapshot, and in the history no version from them until a full image."""
    monkeypatch.setattr(resolve, "CHAIN_ROUNDS", 2)
    writer = WRITERS["shareplex-json"]
    landing = land(writer, tmp_path / "in")
    spec = SnapshotSpec.each_from_args(_args(writer, landing, str(tmp_path / "out"), UNTIL))[0]
    metrics = run_snapshot(spark, spec)
    # Hops 3 and 4 of the long chain start from rows two and three carries away: not rebuilt.
    assert table_rows(spark, metrics["tables"][writer.table]["path"]) == [r for r in AT_UNTIL if r["ID"] != 9]
    assert metrics["quarantine"]["reasons"] == {resolve.Q_UNREBUILT: 2}
    assert metrics["events"] == {
        "read": 18,
        "applied": 16,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 2,
    }
    assert metrics["tables"][writer.table]["updates"] == 10
    lines = {e.second: writer.write(e) for e in EVENTS}
    assert quarantine_rows(tmp_path / "out") == sorted(
        [("a.json", 6, resolve.Q_UNREBUILT, lines[15]), ("a.json", 8, resolve.Q_UNREBUILT, lines[17])],
        key=repr,
    )

    history = run_history(
        spark, SnapshotSpec.each_from_args(_args(writer, landing, str(tmp_path / "h"), UNTIL))[0]
    )
    assert history["quarantine"]["reasons"] == {resolve.Q_UNREBUILT: 2}
    versions = versions_of(spark, history["tables"][writer.table]["path"])
    unrebuilt = {(7, "x y"), (9, "nine")}
    for second in range(0, 21):
        instant = T0 + second * 1000
        expected = [r for r in reference_fold(EVENTS, instant) if key_of(r) not in unrebuilt]
        assert sorted(at(versions, instant), key=key_of) == expected, second

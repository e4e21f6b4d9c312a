"""Debezium's unavailable-value placeholder means "unchanged", never data.

PostgreSQL does not log an unchanged TOASTed value in an UPDATE without REPLICA IDENTITY FULL, so
Debezium writes ``__debezium_unavailable_value`` in its place: the text in text columns, its UTF-8
bytes in ``bytea`` (Base64 in JSON, raw bytes in Avro), a one-element array of it in text arrays.
The column keeps its value from the row's previous version; where there is none, the value is
written as null and counted in ``tables.<t>.unavailable_values``.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import pytest

# The Avro decoder runs fastavro in Python workers: they must be this interpreter. Set before the session.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from tests.conftest import assert_events_add_up, rows_of, write_jsonl  # noqa: E402
from tests.formats.test_debezium_avro import write  # noqa: E402

from airflow_cdc_provider.contract.args import SnapshotArgs  # noqa: E402
from airflow_cdc_provider.contract.checks import CdcJobArgumentError  # noqa: E402
from airflow_cdc_provider.contract.unavailable import placeholder_bytes  # noqa: E402
from airflow_cdc_provider.replay.runs.history import run_history  # noqa: E402
from airflow_cdc_provider.replay.runs.many_as_ofs import run_snapshots  # noqa: E402
from airflow_cdc_provider.replay.runs.snapshot import run_snapshot  # noqa: E402
from airflow_cdc_provider.replay.spec import SnapshotSpec  # noqa: E402
from reference.records.debezium_avro import _column, container, envelope, envelope_schema  # noqa: E402

P = "__debezium_unavailable_value"
T0 = 1_725_271_200_000  # 2024-09-02T10:00:00Z
TABLE = "shop.public.docs"
PIC = b"\x00\x01"
END = "2100-01-01T00:00:00Z"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _field(name: str, connect_type: str, **more) -> dict:
    return {"type": connect_type, "optional": name != "id", "field": name, **more}


DOC_FIELDS = [
    _field("id", "int32"),
    _field("title", "string"),
    _field("body", "string"),
    _field("pic", "bytes"),
    _field("tags", "array", items={"type": "string", "optional": True}),
]
DOC_SCHEMA = {
    "type": "struct",
    "optional": False,
    "name": "shop.public.docs.Envelope",
    "fields": [
        {"type": "struct", "optional": True, "field": "before", "fields": DOC_FIELDS},
        {"type": "struct", "optional": True, "field": "after", "fields": DOC_FIELDS},
        {"type": "string", "optional": False, "field": "op"},
    ],
}


def doc(op: str, pos: int, row_id: int, before: dict | None = None, **values) -> dict:
    """A PostgreSQL Debezium record of shop.public.docs (JsonConverter, schema block), at LSN ``pos``."""
    row = {"id": row_id, "title": None, "body": None, "pic": None, "tags": None, **values}
    return {
        "schema": DOC_SCHEMA,
        "payload": {
            "op": op,
            "ts_ms": T0 + pos * 1000 + 5,
            "before": {"id": row_id} if op == "d" else before,
            "after": None if op == "d" else row,
            "source": {
                "connector": "postgresql",
                "db": "shop",
                "schema": "public",
                "table": "docs",
                "ts_ms": T0 + pos * 1000,
                "lsn": pos,
            },
        },
    }


def unchanged(pos: int, row_id: int, **values) -> dict:
    """An update in which every large column is unchanged: Debezium's placeholder in each form."""
    return doc("u", pos, row_id, body=P, pic=b64(P.encode()), tags=[P], **values)


LANDING = [
    doc("c", 1, 1, title="a", body="LONG TEXT ORIGINAL", pic=b64(PIC), tags=["x", "y"]),
    unchanged(2, 1, title="b"),
    # A chain: update -> placeholder -> placeholder (-> update, below).
    doc("c", 3, 2, title="t1", body="v1"),
    doc("u", 4, 2, title="t2", body="v2"),
    doc("u", 5, 2, title="t3", body=P),
    doc("u", 6, 2, title="t4", body=P),
    # The key's first event is a placeholder: nothing earlier to keep.
    unchanged(7, 3, title="t"),
    # ... unless a later image sets the column, or deletes the row.
    doc("u", 8, 4, title="t", body=P),
    doc("u", 9, 4, title="u", body="w"),
    doc("u", 10, 5, body=P),
    doc("d", 11, 5),
    # An insert holding one (PostgreSQL's key change: a delete and a create): no earlier version either.
    doc("c", 12, 6, title="n", body=P),
    # Values that only contain the placeholder are data.
    doc("c", 13, 7, body=f"see {P} here", tags=["a", P]),
    # A key change carries the row's values to its new key.
    doc("c", 14, 8, title="eight", body="text of eight"),
    doc("u", 15, 9, before={"id": 8}, title="moved", body=P),
    # ... and the chain goes on: a later update sets the column again.
    doc("u", 16, 2, title="t5", body="v3"),
]


def row(row_id: int, title=None, body=None, pic=None, tags=None) -> dict:
    return {"id": row_id, "title": title, "body": body, "pic": pic, "tags": tags}


FINAL_ROWS = [
    row(1, "b", "LONG TEXT ORIGINAL", bytearray(PIC), '["x","y"]'),
    row(2, "t5", "v3"),
    row(3, "t"),
    row(4, "u", "w"),
    row(6, "n"),
    row(7, body=f"see {P} here", tags=f'["a","{P}"]'),
    row(9, "moved", "text of eight"),
]
FINAL_UNAVAILABLE = {"body": 2, "pic": 1, "tags": 1}  # keys 3 (body, pic, tags) and 6 (body)


def _spec(landing, output: Path, as_of, **options) -> SnapshotSpec:
    inputs = [str(p) for p in landing] if isinstance(landing, list) else str(landing)
    args = SnapshotArgs.build(
        source_format=options.pop("source_format", "debezium-json"),
        input_paths=inputs,
        output_path=str(output),
        as_of=as_of,
        key_columns="id",
        **options,
    )
    return SnapshotSpec.each_from_args(args)[0]


def _rows(spark, metrics: dict, table: str = TABLE) -> list[dict]:
    return sorted(rows_of(spark, metrics["tables"][table]["path"]), key=lambda r: r["id"])


def test_placeholders_keep_the_earlier_value_and_unknown_ones_are_counted(spark, tmp_path):
    landing = write_jsonl(tmp_path / "in" / "docs.json", LANDING)
    metrics = run_snapshot(spark, _spec(landing, tmp_path / "out", END))
    assert _rows(spark, metrics) == FINAL_ROWS
    t = metrics["tables"][TABLE]
    assert t["unavailable_values"] == FINAL_UNAVAILABLE
    assert (t["rows"], t["inserts"], t["updates"], t["deletes"]) == (7, 5, 10, 1)
    assert (t["updates_of_unknown_key"], t["deletes_of_unknown_key"]) == (3, 0)
    assert metrics["events"] == {
        "read": 16, "applied": 16, "after_as_of": 0, "ignored": 0, "duplicates": 0, "quarantined": 0,
    }  # fmt: skip
    assert_events_add_up(metrics)


def test_several_as_ofs_and_the_history_see_the_same_values(spark, tmp_path):
    landing = write_jsonl(tmp_path / "in" / "docs.json", LANDING)
    as_ofs = [T0 + 5000, T0 + 7000]
    args = SnapshotArgs.build(
        source_format="debezium-json",
        input_paths=str(landing),
        output_path=str(tmp_path / "snap" / "{as_of:%H%M%S}"),
        as_of=as_ofs,
        key_columns="id",
    )
    at_5, at_7 = run_snapshots(spark, SnapshotSpec.each_from_args(args))
    first = row(1, "b", "LONG TEXT ORIGINAL", bytearray(PIC), '["x","y"]')
    assert _rows(spark, at_5) == [first, row(2, "t3", "v2")]
    assert at_5["tables"][TABLE]["unavailable_values"] == {}
    assert _rows(spark, at_7) == [first, row(2, "t4", "v2"), row(3, "t")]
    assert at_7["tables"][TABLE]["unavailable_values"] == {"body": 1, "pic": 1, "tags": 1}

    history = run_history(spark, _spec(landing, tmp_path / "history", END))
    assert history["tables"][TABLE]["unavailable_values"] == FINAL_UNAVAILABLE
    versions = rows_of(spark, history["tables"][TABLE]["path"])
    chain = sorted(
        (v["_cdc_valid_from"].timestamp(), v["title"], v["body"]) for v in versions if v["id"] == 2
    )
    assert [(title, body) for _, title, body in chain] == [
        ("t1", "v1"),
        ("t2", "v2"),
        ("t3", "v2"),
        ("t4", "v2"),
        ("t5", "v3"),
    ]
    current = sorted(
        (
            {k: v for k, v in r.items() if not k.startswith("_cdc_")}
            for r in versions
            if r["_cdc_valid_to"] is None
        ),
        key=lambda r: r["id"],
    )
    assert current == FINAL_ROWS


def test_inserts_holding_placeholders_share_one_fold_across_as_ofs(spark, tmp_path, caplog):
    caplog.set_level("INFO", logger="airflow_cdc_provider.replay.runs.many_as_ofs")
    landing = write_jsonl(
        tmp_path / "in" / "docs.json",
        [doc("c", 1, 1, title="a", body="text"), doc("c", 2, 6, title="n", body=P, pic=b64(P.encode()))],
    )
    args = SnapshotArgs.build(
        source_format="debezium-json",
        input_paths=str(landing),
        output_path=str(tmp_path / "snap" / "{as_of:%H%M%S}"),
        as_of=[T0 + 1500, T0 + 2500],
        key_columns="id",
    )
    early, late = run_snapshots(spark, SnapshotSpec.each_from_args(args))
    assert "several AS OFs: one fold for all 2" in caplog.messages
    assert early["tables"][TABLE]["unavailable_values"] == {}
    assert late["tables"][TABLE]["unavailable_values"] == {"body": 1, "pic": 1}
    assert _rows(spark, late) == [row(1, "a", "text"), row(6, "n")]


def test_an_incremental_run_keeps_the_bases_values_and_its_unknown_ones(spark, tmp_path):
    before = [
        doc("c", 1, 1, title="a", body="LONG TEXT ORIGINAL", pic=b64(PIC), tags=["x", "y"]),
        doc("c", 3, 2, title="t1", body="v1"),
        doc("u", 4, 2, title="t2", body="v2"),
        unchanged(7, 3, title="t"),
        unchanged(8, 9, title="never set"),
    ]
    after = [unchanged(60, 1, title="b"), doc("u", 61, 2, title="t3", body=P), unchanged(62, 3, title="z")]
    first = write_jsonl(tmp_path / "in" / "a.json", before)
    second = write_jsonl(tmp_path / "in" / "b.json", after)
    base = run_snapshot(spark, _spec([first], tmp_path / "base", T0 + 50_000, keep_state=True))
    assert base["tables"][TABLE]["unavailable_values"] == {"body": 2, "pic": 2, "tags": 2}

    incremental = run_snapshot(
        spark, _spec([first, second], tmp_path / "next", END, base_path=str(tmp_path / "base"))
    )
    assert incremental["mode"] == "incremental" and incremental["incremental"]["applied"] is True
    full = run_snapshot(spark, _spec([first, second], tmp_path / "full", END))
    expected = [
        row(1, "b", "LONG TEXT ORIGINAL", bytearray(PIC), '["x","y"]'),
        row(2, "t3", "v2"),
        row(3, "z"),
        row(9, "never set"),
    ]
    assert _rows(spark, incremental) == _rows(spark, full) == expected
    unknown = {"body": 2, "pic": 2, "tags": 2}  # keys 3 (placeholders again) and 9 (carried from the base)
    assert (
        incremental["tables"][TABLE]["unavailable_values"]
        == full["tables"][TABLE]["unavailable_values"]
        == unknown
    )


def _plain(op: str, pos: int, after: dict) -> dict:
    """A Debezium record without a schema block (its arrays read as arrays of numbers)."""
    at = T0 + pos * 1000
    source = {
        "connector": "postgresql",
        "db": "shop",
        "schema": "public",
        "table": "nums",
        "ts_ms": at,
        "lsn": pos,
    }
    return {"op": op, "ts_ms": at + 5, "before": None, "after": after, "source": source}


def test_number_arrays_carry_the_placeholder_as_its_bytes_written_with_or_without_spaces(spark, tmp_path):
    """int and bigint arrays hold the placeholder's bytes as numbers; JSON writers differ in spacing."""
    numbers = list(P.encode())
    landing = write_jsonl(
        tmp_path / "in" / "nums.json",
        [
            _plain("c", 1, {"id": 1, "label": "a", "ids": [1, 2]}),
            json.dumps(_plain("u", 2, {"id": 1, "label": "b", "ids": numbers}), separators=(",", ":")),
            _plain("c", 3, {"id": 2, "label": "c", "ids": [3]}),
            _plain("u", 4, {"id": 2, "label": "d", "ids": numbers}),  # json.dumps: ", " between numbers
            _plain("u", 5, {"id": 3, "label": "e", "ids": numbers}),  # nothing earlier to keep
            _plain("c", 6, {"id": 4, "label": "f", "ids": [*numbers, 1]}),  # data, not the placeholder
        ],
    )
    metrics = run_snapshot(spark, _spec(landing, tmp_path / "out", END))
    table = "shop.public.nums"
    assert _rows(spark, metrics, table) == [
        {"id": 1, "label": "b", "ids": "[1,2]"},
        {"id": 2, "label": "d", "ids": "[3]"},
        {"id": 3, "label": "e", "ids": None},
        {"id": 4, "label": "f", "ids": json.dumps([*numbers, 1], separators=(",", ":"))},
    ]
    assert metrics["tables"][table]["unavailable_values"] == {"ids": 1}
    assert_events_add_up(metrics)


def test_custom_and_hex_placeholders_replace_the_default(spark, tmp_path):
    na = "__NA__"
    landing = write_jsonl(
        tmp_path / "in" / "docs.json",
        [
            doc("c", 1, 1, title="a", body="orig", pic=b64(PIC)),
            doc("u", 2, 1, title="b", body="N/A", pic=b64(na.encode())),
            doc("c", 3, 2, title="c", body="orig2", pic=b64(PIC)),
            doc("u", 4, 2, title="d", body=na, pic=b64(b"N/A")),
            doc("u", 5, 3, title="e", body=P),  # Debezium's default is data under another placeholder
        ],
    )
    options = {"unavailable_values": ["N/A", "hex:" + na.encode().hex()]}
    metrics = run_snapshot(spark, _spec(landing, tmp_path / "out", END, **options))
    assert _rows(spark, metrics) == [
        row(1, "b", "orig", bytearray(PIC)),
        row(2, "d", "orig2", bytearray(PIC)),
        row(3, "e", P),
    ]
    assert metrics["tables"][TABLE]["unavailable_values"] == {}


def test_avro_containers_carry_the_placeholders_raw(spark, tmp_path):
    columns = [
        _column("id", "int", optional=False),
        _column("title", "string"),
        _column("body", "string"),
        _column("photo", "bytes"),
        _column("tags", {"type": "array", "items": "string"}),
    ]
    schema = envelope_schema("docs", columns)
    original = {"id": 1, "title": "a", "body": "LONG TEXT ORIGINAL", "photo": PIC, "tags": ["x"]}
    records = [
        envelope("c", None, original, 1, table="docs"),
        envelope(
            "u",
            None,
            {**original, "title": "b", "body": P, "photo": P.encode(), "tags": [P]},
            2,
            table="docs",
        ),
        envelope(
            "u", None, {"id": 2, "title": "c", "body": P, "photo": P.encode(), "tags": [P]}, 3, table="docs"
        ),
    ]
    write(tmp_path / "in" / "docs+0+0000000000.avro", container(records, schema))
    metrics = run_snapshot(
        spark, _spec(tmp_path / "in", tmp_path / "out", END, source_format="debezium-avro")
    )
    rows = sorted(rows_of(spark, metrics["tables"]["inventory.docs"]["path"]), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "title": "b", "body": "LONG TEXT ORIGINAL", "photo": bytearray(PIC), "tags": '["x"]'},
        {"id": 2, "title": "c", "body": None, "photo": None, "tags": None},
    ]
    assert metrics["tables"]["inventory.docs"]["unavailable_values"] == {"body": 1, "photo": 1, "tags": 1}
    assert_events_add_up(metrics)


def test_the_option_round_trips_and_is_refused_where_it_means_nothing():
    args = SnapshotArgs.build(
        source_format="debezium-avro",
        input_paths="/lake/in",
        output_path="/lake/out",
        as_of=END,
        unavailable_values=["N/A", "hex:00ff"],
    )
    argv = args.to_argv()
    given = [argv[i + 1] for i, a in enumerate(argv) if a == "--unavailable-value"]
    assert given == ["N/A", "hex:00ff"]
    assert SnapshotArgs.from_argv(args.to_argv()) == args
    assert placeholder_bytes("hex:00FF") == b"\x00\xff" and placeholder_bytes(P) == P.encode()
    with pytest.raises(CdcJobArgumentError, match="debezium-avro and debezium-json.*not for canal-json"):
        SnapshotArgs.build(
            source_format="canal-json",
            input_paths="/in",
            output_path="/out",
            as_of=END,
            unavailable_values="x",
        )
    with pytest.raises(CdcJobArgumentError, match="pairs of hex digits"):
        SnapshotArgs.build(
            source_format="debezium-json",
            input_paths="/in",
            output_path="/out",
            as_of=END,
            unavailable_values="hex:abc",
        )

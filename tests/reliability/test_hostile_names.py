"""Table names taken from records never choose where the job writes, and two sources never share a
snapshot: every name a quoted identifier allows lands in its own folder inside the output, full,
incremental and rerun alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import rows_of, write_jsonl

from airflow_cdc_provider.contract.tables import TableNameError, qualify, table_folder
from airflow_cdc_provider.replay.runs.snapshot import run_snapshot
from airflow_cdc_provider.replay.spec import spec_from_keywords
from reference.histories import T0

LONG = "t" * 300
# (db, schema, table) as a PostgreSQL or MySQL source block names them (schema None for MySQL).
HOSTILE = [
    ("inventory", None, "../../../escaped"),
    ("pg", "x/../../..", "victim"),
    ("x", None, "a.b"),
    ("x.a", None, "b"),
    ("inventory", None, ".hidden"),
    ("inventory", None, "_staging"),
    ("inventory", None, "a/b\\c:d*e?f"),
    ("inventory", None, LONG),
    ("inventory", None, "customers"),
    ("库", None, "客户"),
]


def _record(n: int, db: str, schema: str | None, table: str, op: str = "c", name: str = "v") -> dict:
    source = {"db": db, "table": table, "ts_ms": T0 + n * 1000}
    if schema is not None:
        source["schema"] = schema
    row = {"id": n, "name": name}
    return {"op": op, "ts_ms": T0 + n * 1000, "before": None, "after": row, "source": source}


def _land(root: Path, day: str, op: str, name: str) -> None:
    records = [_record(n, *parts, op=op, name=name) for n, parts in enumerate(HOSTILE)]
    write_jsonl(root / "landing" / f"dt={day}" / "part-0.json", records)


def _run(spark, root: Path, out: str, as_of: str, **options) -> dict:
    spec = spec_from_keywords(
        source_format="debezium-json",
        inputs=[str(root / "landing")],
        as_of=as_of,
        output=str(root / "lake" / out),
        key=["id"],
        **options,
    )
    return run_snapshot(spark, spec)


def _outside(root: Path) -> list[str]:
    """Everything under ``root`` but the landing and the outputs (hidden siblings included)."""
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if not str(p.relative_to(root)).startswith(("landing", "lake/full", "lake/daily"))
        and p != root / "lake"
    )


@pytest.fixture(scope="module")
def hostile(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    _land(root, "2024-09-02", "c", "first")
    full = _run(spark, root, "full", "2024-09-02T23:00:00Z", keep_state=True)
    return root, full


def test_each_source_table_is_its_own_snapshot_inside_the_output(spark, hostile):
    root, metrics = hostile
    expected = {qualify([p for p in parts if p is not None]) for parts in HOSTILE}
    assert set(metrics["tables"]) == expected
    assert metrics["rows"] == len(HOSTILE)
    out = root / "lake" / "full"
    for n, parts in enumerate(HOSTILE):
        name = qualify([p for p in parts if p is not None])
        entry = metrics["tables"][name]
        assert entry["parts"] == [p for p in parts if p is not None]
        assert entry["path"] == f"file:{out}/{table_folder(name)}"
        assert (entry["rows"], entry["inserts"]) == (1, 1)
        assert rows_of(spark, entry["path"]) == [{"id": n, "name": "first"}]
    folders = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert folders == sorted([table_folder(name) for name in expected] + ["_cdc_state"])
    assert metrics["tables"]['x."a.b"']["path"].endswith("/x.%22a.b%22")
    assert metrics["tables"]['"x.a".b']["path"].endswith("/%22x.a%22.b")
    assert metrics["tables"]["inventory.customers"]["path"] == f"file:{out}/inventory.customers"
    assert _outside(root) == []  # nothing beside the output, escaped or hidden


def test_an_incremental_run_carries_every_table_and_a_rerun_finds_the_same_folders(spark, hostile):
    root, full = hostile
    _land(root, "2024-09-03", "u", "second")
    base = str(root / "lake" / "full")
    first = _run(spark, root, "daily", "2024-09-03T23:00:00Z", base=base)
    assert set(first["tables"]) == set(full["tables"])
    for name, entry in first["tables"].items():
        assert entry["path"] == full["tables"][name]["path"].replace("/full/", "/daily/")
        assert [r["name"] for r in rows_of(spark, entry["path"])] == ["second"]
    # An Airflow retry: the same command into the same output succeeds with the same result.
    again = _run(spark, root, "daily", "2024-09-03T23:00:00Z", base=base)
    assert {k: v["rows"] for k, v in again["tables"].items()} == {
        k: v["rows"] for k, v in first["tables"].items()
    }
    for name, entry in again["tables"].items():
        assert rows_of(spark, entry["path"]) == rows_of(spark, first["tables"][name]["path"])
    assert _outside(root) == []


def test_a_dotted_table_option_that_means_two_tables_is_refused(spark, hostile):
    root, _ = hostile
    with pytest.raises(TableNameError) as caught:
        _run(spark, root, "picked", "2024-09-02T23:00:00Z", tables=["x.a.b"])
    assert str(caught.value) == (
        "--table 'x.a.b' is ambiguous: it names tables whose parts differ: "
        "['x', 'a.b'] (write x.\"a.b\": x.\"a.b\"); ['x.a', 'b'] (write \"x.a\".b: \"x.a\".b). "
        "Quote the part that holds a dot, as shown."
    )
    picked = _run(spark, root, "picked", "2024-09-02T23:00:00Z", tables=['x."a.b"', "customers"])
    assert sorted(picked["tables"]) == ["inventory.customers", 'x."a.b"']
    metrics = json.loads((root / "lake" / "picked" / "_cdc_metrics.json").read_text())
    assert metrics["tables"]['x."a.b"']["parts"] == ["x", "a.b"]

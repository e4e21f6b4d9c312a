"""``--with-metadata``: ``_cdc_file`` and ``_cdc_line`` name the landed record that last wrote each row.

One landing holds the three ways a line is known: a file read whole, a gzip file cut short (its
lines salvaged) and a file read in splits whose records carry log positions (its lines found
after the fold). Snapshots, several AS OFs, a history and incremental runs must all point at the
right file and line; Avro containers and Parquet files, which have no lines, name the record's
index in the file.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.conftest import debezium_specs, rows_of, write_jsonl
from tests.formats.test_debezium_avro import parquet_envelopes, product, write
from tests.reliability.test_bad_input import write_cut
from tests.replay.test_history import versions_of
from tests.replay.test_semantics import T0, dbz

from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.replay.runs.history import run_history
from airflow_cdc_provider.replay.runs.many_as_ofs import run_snapshots
from airflow_cdc_provider.replay.runs.snapshot import run_snapshot
from airflow_cdc_provider.replay.spec import SnapshotSpec
from airflow_cdc_provider.spark import reader
from reference.records.debezium_avro import container, envelope

END = "2100-01-01T00:00:00Z"
MIDDLE = T0 + 21  # after c.json's first two records and the gzip's first 22 lines, before the rest
LINEAGE = ("_cdc_op", "_cdc_event_ts", "_cdc_position", "_cdc_file", "_cdc_line")
PADDING = "x" * 400  # makes c.json larger than a.json, so that it is read in splits


def land(root: Path, monkeypatch, cut_gzip: bool = True) -> Path:
    """a.json read whole; b.json.gz cut short (its first line updates row 2, then rows 100...);
    c.json read in splits, with MySQL binlog positions."""
    write_jsonl(
        root / "a.json",
        [dbz("c", 1, T0, name="a1"), dbz("c", 2, T0 + 1, name="b1"), dbz("u", 1, T0 + 2, name="a2")],
    )
    if cut_gzip:
        gz = [dbz("u", 2, T0 + 10, name="b2")] + [
            dbz("c", i, T0 + i - 100, name=f"r{i}") for i in range(100, 2100)
        ]
        write_cut(root / "b.json.gz", gzip.compress, [json.dumps(r) for r in gz], 0.5)
    write_jsonl(
        root / "c.json",
        [
            dbz("c", 5, T0 + 20, pos=500, name=PADDING),
            dbz("c", 6, T0 + 21, pos=600, name=PADDING),
            dbz("u", 5, T0 + 22, pos=700, name="e2"),
        ],
    )
    monkeypatch.setattr(reader, "WHOLE_FILE_MAX_BYTES", (root / "a.json").stat().st_size)
    return root


@pytest.fixture
def small_splits(spark):
    """Each of c.json's records in a split of its own: its position in the split is not its line."""
    spark.conf.set("spark.sql.files.maxPartitionBytes", "256")
    yield
    spark.conf.unset("spark.sql.files.maxPartitionBytes")


@pytest.fixture
def landing(tmp_path, monkeypatch, small_splits) -> Path:
    return land(tmp_path / "in", monkeypatch)


def _specs(landing: Path, output: Path | str, as_of, **options) -> list[SnapshotSpec]:
    return debezium_specs(landing, output, as_of, **{"with_metadata": True, **options})


def expected(landing: Path, delivered: int | None, as_of_ms: int | None = None) -> list[tuple]:
    """(id, name, op, file, line) of every row as of ``as_of_ms`` (None: every change applied).

    ``delivered``: the gzip's lines salvaged (None: no gzip). Its line N (N > 1) creates row
    98 + N at T0 + N - 2.
    """
    a, gz, c = (f"file:{landing}/{name}" for name in ("a.json", "b.json.gz", "c.json"))
    until = as_of_ms if as_of_ms is not None else 2**62
    rows = [(1, "a2", "update", a, 3)]
    rows += [(2, "b1", "insert", a, 2)] if delivered is None else [(2, "b2", "update", gz, 1)]
    delivered = delivered or 0
    rows += [(98 + n, f"r{98 + n}", "insert", gz, n) for n in range(2, delivered + 1) if T0 + n - 2 <= until]
    rows += [(5, "e2", "update", c, 3) if T0 + 22 <= until else (5, PADDING, "insert", c, 1)]
    rows += [(6, PADDING, "insert", c, 2)]
    return sorted(rows)


def lineage(rows: list[dict]) -> list[tuple]:
    return sorted((r["id"], r["name"], r["_cdc_op"], r["_cdc_file"], r["_cdc_line"]) for r in rows)


def salvaged(spark, metrics: dict) -> int:
    """How many lines of the cut gzip were delivered (its last one created the row with the highest id)."""
    return max(r["id"] for r in rows_of(spark, metrics["tables"]["db.shop"]["path"])) - 98


def test_a_snapshot_names_the_file_and_line_that_last_wrote_each_row(spark, landing, tmp_path):
    (spec,) = _specs(landing, tmp_path / "out", END)
    metrics = run_snapshot(spark, spec)
    path = metrics["tables"]["db.shop"]["path"]
    assert spark.read.parquet(path).columns == ["id", "name", *LINEAGE]
    delivered = salvaged(spark, metrics)
    assert 100 < delivered < 2001
    assert lineage(rows_of(spark, path)) == expected(landing, delivered)
    assert metrics["quarantine"]["reasons"] == {"truncated": 1}


def test_several_as_ofs_each_name_their_own_writers(spark, landing, tmp_path):
    output = tmp_path / "snap" / "at={as_of:%Y%m%dT%H%M%S.%f}"
    first, last = run_snapshots(spark, _specs(landing, output, [MIDDLE, END]))
    delivered = salvaged(spark, last)
    assert lineage(rows_of(spark, first["tables"]["db.shop"]["path"])) == expected(landing, delivered, MIDDLE)
    assert lineage(rows_of(spark, last["tables"]["db.shop"]["path"])) == expected(landing, delivered)


def test_a_history_names_the_writer_of_every_version(spark, landing, tmp_path):
    (spec,) = _specs(landing, tmp_path / "history", END, history=True)
    metrics = run_history(spark, spec)
    path = metrics["tables"]["db.shop"]["path"]
    assert spark.read.parquet(path).columns[-3:] == ["_cdc_event_ts", "_cdc_file", "_cdc_line"]
    delivered = salvaged(spark, metrics)
    a, gz, c = (f"file:{landing}/{name}" for name in ("a.json", "b.json.gz", "c.json"))
    superseded = [(1, "a1", "insert", a, 1), (2, "b1", "insert", a, 2), (5, PADDING, "insert", c, 1)]
    assert lineage(versions_of(spark, path)) == sorted(superseded + expected(landing, delivered))


def test_incremental_runs_carry_the_base_rows_files_and_lines(spark, tmp_path, monkeypatch, small_splits):
    landing = land(tmp_path / "in", monkeypatch, cut_gzip=False)
    # A base kept without --with-metadata lacks the lines of c.json (read in splits, log positions).
    (base,) = _specs(landing, tmp_path / "d1", T0 + 5, keep_state=True, with_metadata=False)
    run_snapshot(spark, base)
    (rebuilt,) = _specs(landing, tmp_path / "d2", MIDDLE, base_path=str(tmp_path / "d1"))
    middle = run_snapshot(spark, rebuilt)
    assert (middle["incremental"]["applied"], middle["incremental"]["reason"]) == (
        False,
        "--with-metadata shows each row's line (_cdc_line), and the base's state lacks the lines of "
        "records in files read in splits (written without --with-metadata, or by an earlier version)",
    )
    (later,) = _specs(landing, tmp_path / "d3", END, base_path=str(tmp_path / "d2"))
    metrics = run_snapshot(spark, later)
    assert metrics["incremental"]["applied"] is True
    # a.json is not read again; rows 1, 2 and 6 (c.json line 2, a split-read record with a log
    # position) come from d2's state, untouched by this run's events.
    assert metrics["files"]["skipped_because"] == {"already applied by the base": 1}
    middle_rows = rows_of(spark, middle["tables"]["db.shop"]["path"])
    assert lineage(middle_rows) == expected(landing, None, MIDDLE)
    assert lineage(rows_of(spark, metrics["tables"]["db.shop"]["path"])) == expected(landing, None)


def test_avro_and_parquet_records_are_named_by_their_index_in_the_file(spark, tmp_path):
    landing = tmp_path / "in"
    avro = [
        envelope("c", None, product(1, "a"), 10),
        envelope("c", None, product(2, "b"), 11),
        envelope("u", product(1, "a"), product(1, "c"), 12),
    ]
    write(landing / "products+0+0000000000.avro", container(avro))
    parquet_envelopes(
        [envelope("c", None, product(3, "d"), 13), envelope("u", product(3, "d"), product(3, "e"), 14)],
        landing / "products+1+0000000000.snappy.parquet",
    )
    args = SnapshotArgs.build(
        source_format="debezium-avro",
        input_paths=str(landing),
        output_path=str(tmp_path / "out"),
        as_of=END,
        key_columns="id",
        with_metadata=True,
    )
    metrics = run_snapshot(spark, SnapshotSpec.each_from_args(args)[0])
    rows = rows_of(spark, metrics["tables"]["inventory.products"]["path"])
    assert lineage(rows) == [
        (1, "c", "update", f"file:{landing}/products+0+0000000000.avro", 3),
        (2, "b", "insert", f"file:{landing}/products+0+0000000000.avro", 2),
        (3, "e", "update", f"file:{landing}/products+1+0000000000.snappy.parquet", 2),
    ]

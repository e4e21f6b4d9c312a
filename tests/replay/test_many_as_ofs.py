"""Several AS OFs from one scan: each snapshot is exactly what a run of that AS OF alone writes.

Every format's generated histories (with every injected fault) are rebuilt at two AS OFs in one
run; the earlier snapshot is compared with a separate run of its AS OF (rows, metrics, quarantine),
the later with the plain Python fold of the histories. The sample's daily partitions compare
every snapshot with its own run.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_events_add_up, rows_of, write_jsonl
from tests.reliability.test_accounting import assert_accounted, quarantine_rows
from tests.replay.test_semantics import T0, dbz, dbz_truncate

from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.formats import get_decoder
from airflow_cdc_provider.replay.runs.many_as_ofs import run_snapshots
from airflow_cdc_provider.replay.runs.snapshot import run_snapshot
from airflow_cdc_provider.replay.spec import SnapshotSpec, spec_from_keywords
from airflow_cdc_provider.sample_data import SAMPLE_AS_OF, SAMPLE_LANDING
from reference.histories import ENCODERS, land, random_history
from reference.histories import T0 as HISTORY_T0

# Fields that name where and when a snapshot was written, not what it holds.
_WHERE = ("output", "written_at")


def _specs(fmt: str, landing: Path, output: str, as_ofs: list[int], **options) -> list[SnapshotSpec]:
    args = SnapshotArgs.build(
        source_format=fmt, input_paths=str(landing), output_path=output, as_of=as_ofs, **options
    )
    return SnapshotSpec.each_from_args(args)


def _content(metrics: dict) -> dict:
    """The metrics without where they were written (table paths and the quarantine's path too)."""
    out = {k: v for k, v in metrics.items() if k not in _WHERE}
    out["tables"] = {
        t: {k: v for k, v in info.items() if k != "path"} for t, info in metrics["tables"].items()
    }
    out["quarantine"] = {k: v for k, v in metrics["quarantine"].items() if k != "path"}
    return out


def _assert_same_snapshot(spark, together: dict, alone: dict) -> None:
    assert _content(together) == _content(alone)
    for table in alone["tables"]:
        assert rows_of(spark, together["tables"][table]["path"]) == rows_of(
            spark, alone["tables"][table]["path"]
        )
    if alone["quarantine"]["records"]:
        assert quarantine_rows(Path(together["output"].removeprefix("file:"))) == quarantine_rows(
            Path(alone["output"].removeprefix("file:"))
        )


@pytest.mark.parametrize("fmt", sorted(ENCODERS))
def test_each_snapshot_is_the_run_of_its_as_of_alone(fmt, spark, tmp_path, caplog):
    caplog.set_level("INFO", logger="airflow_cdc_provider.replay.runs.many_as_ofs")
    rng = random.Random(f"many-{fmt}")
    landing = tmp_path / "in"
    landing.mkdir()
    latest = HISTORY_T0 + 13_000  # after every change of a history (at most 12 of them, one per second)
    expected = {
        f"h{i}": land(ENCODERS[fmt], landing, f"h{i}", random_history(rng), latest, rng) for i in range(2)
    }
    as_ofs = [HISTORY_T0 + 6_500, latest]
    keys = ",".join(ENCODERS[fmt].key)
    together = run_snapshots(
        spark, _specs(fmt, landing, str(tmp_path / "snap" / "at={as_of:%H%M%S}"), as_ofs, key_columns=keys)
    )
    assert [m["as_of_ms"] for m in together] == as_ofs
    assert [m["output"] for m in together] == [
        f"file:{tmp_path}/snap/at=100006",
        f"file:{tmp_path}/snap/at=100013",
    ]
    for metrics in together:
        assert_events_add_up(metrics)
    # Nothing but the snapshots is left: the shared write's folder was moved in and removed.
    assert sorted(p.name for p in (tmp_path / "snap").iterdir()) == ["at=100006", "at=100013"]
    # Full images fold once for both AS OFs; partial images fold each AS OF on its own.
    assert _one_fold(caplog) is not get_decoder(fmt).partial_images
    # The earlier AS OF against a run of its own; the latest against the plain Python fold.
    (alone,) = _specs(fmt, landing, str(tmp_path / "alone"), [as_ofs[0]], key_columns=keys)
    _assert_same_snapshot(spark, together[0], run_snapshot(spark, alone))
    tables = {t: rows_of(spark, info["path"]) for t, info in together[-1]["tables"].items()}
    assert_accounted(together[-1], tables, Path(together[-1]["output"].removeprefix("file:")), fmt, expected)


@pytest.mark.parametrize(
    "as_ofs, reads",
    [
        (
            ["2024-09-01T12:00:00Z", SAMPLE_AS_OF, "2024-09-03T00:00:00Z"],
            [(5, 8, 91), (10, 3, 83), (13, 0, 83)],
        ),
        # Before the first day every partition is left unread (a run alone failed, decoding no files).
        (["2024-08-20T00:00:00Z", "2024-09-03T00:00:00Z"], [(0, 13, 0), (13, 0, 83)]),
    ],
)
def test_each_as_of_reads_only_the_partitions_its_run_would(spark, tmp_path, as_ofs, reads):
    """The sample's daily partitions: an earlier AS OF leaves later days unread, as it would alone."""
    args = SnapshotArgs.build(
        source_format="debezium-json",
        input_paths=str(SAMPLE_LANDING),
        output_path=str(tmp_path / "dt={as_of:%Y-%m-%dT%H}"),
        as_of=as_ofs,
        key_columns="id",
    )
    together = run_snapshots(spark, SnapshotSpec.each_from_args(args))
    assert [(m["files"]["read"], m["files"]["skipped"], m["rows"]) for m in together] == reads
    for as_of, metrics in zip(as_ofs, together):
        spec = spec_from_keywords(
            source_format="debezium-json",
            inputs=[str(SAMPLE_LANDING)],
            as_of=as_of,
            output=str(tmp_path / f"alone-{as_of[:13]}"),
            key=["id"],
        )
        _assert_same_snapshot(spark, metrics, run_snapshot(spark, spec))
        if as_of == SAMPLE_AS_OF:
            expected = json.loads(
                (REPO / "airflow_cdc_provider" / "sample_data" / "expected.json").read_text()
            )
            assert (metrics["rows"], metrics["events"]) == (expected["rows"], expected["events"])


def test_an_as_of_folded_on_its_own_can_read_no_file(spark):
    """The per-AS-OF fold picks each AS OF's events by file; an AS OF that reads none takes none
    (its filter was an empty SQL ``IN ()``, which Spark refuses to parse)."""
    from airflow_cdc_provider.replay.runs.many_as_ofs import _input_of_as_of
    from airflow_cdc_provider.spark.reader import LandedFile

    landed = [LandedFile("file:/landing/dt=2024-09-02/a.json", 10, 0)]
    events = spark.createDataFrame([("file:/landing/dt=2024-09-02/a.json",)], "file string")
    read = _input_of_as_of(events, landed, landed, set(), kept=True)
    assert (read.events.count(), read.files, read.skipped) == (
        0,
        [],
        {"partition starts after AS OF + lateness": landed},
    )


def test_a_snapshot_that_cannot_be_written_leaves_the_others_written(spark, tmp_path):
    """Each snapshot commits on its own: a folder holding someone else's files stops the run there."""
    taken = tmp_path / "dt=2024-09-02"
    taken.mkdir()
    (taken / "notes.txt").write_text("not a snapshot")
    args = SnapshotArgs.build(
        source_format="debezium-json",
        input_paths=str(SAMPLE_LANDING),
        output_path=str(tmp_path / "dt={as_of:%Y-%m-%d}"),
        as_of=["2024-09-01T00:00:00Z", "2024-09-02T00:00:00Z", "2024-09-03T00:00:00Z"],
        key_columns="id",
    )
    with pytest.raises(ValueError, match="dt=2024-09-02 exists and was not written by cdc-replay"):
        run_snapshots(spark, SnapshotSpec.each_from_args(args))
    assert (tmp_path / "dt=2024-09-01" / "_cdc_metrics.json").exists()
    assert sorted(p.name for p in taken.iterdir()) == ["notes.txt"]
    assert not (tmp_path / "dt=2024-09-03").exists()


def test_the_command_line_prints_the_metrics_of_every_snapshot(spark, tmp_path, capsys):
    from airflow_cdc_provider.jobs.cli import EXIT_OK, main

    argv = ["snapshot", "--format", "debezium-json", "--input", str(SAMPLE_LANDING), "--key", "id"]
    argv += ["--as-of", "2024-09-02T00:00:00Z", "--as-of", "2024-09-03T00:00:00Z"]
    assert main([*argv, "--output", str(tmp_path / "dt={as_of:%Y-%m-%d}")]) == EXIT_OK
    printed = json.loads(capsys.readouterr().out)
    assert [(m["as_of"], m["output"]) for m in printed] == [
        ("2024-09-02T00:00:00+00:00", f"file:{tmp_path}/dt=2024-09-02"),
        ("2024-09-03T00:00:00+00:00", f"file:{tmp_path}/dt=2024-09-03"),
    ]
    assert printed == [
        json.loads((tmp_path / f"dt={d}" / "_cdc_metrics.json").read_text())
        for d in ("2024-09-02", "2024-09-03")
    ]


def _together_and_alone(
    spark, tmp_path, landing: Path, as_ofs: list[int], fmt: str = "debezium-json", key: str = "id", **options
) -> list[dict]:
    """Run ``as_ofs`` together, compare each snapshot with its run alone; return the together metrics."""
    output = str(tmp_path / "snap" / "at={as_of:%H%M%S}")
    together = run_snapshots(spark, _specs(fmt, landing, output, as_ofs, key_columns=key, **options))
    for as_of_ms, metrics in zip(as_ofs, together):
        (alone,) = _specs(
            fmt,
            landing,
            str(tmp_path / f"alone-{as_of_ms}"),
            [as_of_ms],
            key_columns=key,
            **options,
        )
        _assert_same_snapshot(spark, metrics, run_snapshot(spark, alone))
    return together


def _one_fold(caplog) -> bool:
    return any("one fold for all" in r.getMessage() for r in caplog.records)


def test_one_fold_serves_every_as_of_with_key_changes_duplicates_and_late_files(spark, tmp_path, caplog):
    caplog.set_level("INFO", logger="airflow_cdc_provider.replay.runs.many_as_ofs")
    landing = tmp_path / "in"
    write_jsonl(
        landing / "a.json",
        [
            dbz("c", 1, T0, pos=100, name="ann"),
            dbz("c", 2, T0 + 1000, pos=200, name="bob"),
            dbz("u", 3, T0 + 2000, pos=300, before={"id": 1, "name": "ann"}, name="ann"),  # key 1 -> 3
            dbz("d", 2, T0 + 3000, pos=400, name="bob"),
            dbz("d", 9, T0 + 3000, pos=450),  # a key nobody inserted
        ],
    )
    # Landed late, in another file: an exact re-delivery and the newest change.
    write_jsonl(
        landing / "b.json",
        [dbz("c", 2, T0 + 1000, pos=200, name="bob"), dbz("u", 3, T0 + 4000, pos=500, name="cy")],
    )
    together = _together_and_alone(spark, tmp_path, landing, [T0 + 1500, T0 + 2500, T0 + 3500, T0 + 9000])
    assert _one_fold(caplog)
    assert [m["rows"] for m in together] == [2, 2, 1, 1]
    assert [m["events"]["duplicates"] for m in together] == [1, 1, 1, 1]
    assert [m["tables"]["db.shop"]["deletes_of_unknown_key"] for m in together] == [0, 0, 1, 1]
    assert rows_of(spark, together[-1]["tables"]["db.shop"]["path"]) == [{"id": 3, "name": "cy"}]


def test_event_times_running_backwards_fold_each_as_of_on_its_own(spark, tmp_path, caplog):
    caplog.set_level("INFO", logger="airflow_cdc_provider.replay.runs.many_as_ofs")
    # Position 200 comes after position 100 but carries an earlier time: AS OF T0+2s sees only it.
    landing = write_jsonl(
        tmp_path / "in" / "a.json",
        [
            dbz("c", 1, T0 + 3000, pos=100, name="later in time"),
            dbz("u", 1, T0 + 1000, pos=200, name="newer"),
        ],
    )
    together = _together_and_alone(spark, tmp_path, landing.parent, [T0 + 2000, T0 + 4000])
    assert not _one_fold(caplog)
    assert "event times run backwards across AS OFs" in caplog.text
    assert [rows_of(spark, m["tables"]["db.shop"]["path"]) for m in together] == [
        [{"id": 1, "name": "newer"}],
        [{"id": 1, "name": "newer"}],
    ]
    assert [m["tables"]["db.shop"]["updates_of_unknown_key"] for m in together] == [1, 0]


def test_a_truncate_folds_each_as_of_on_its_own(spark, tmp_path, caplog):
    caplog.set_level("INFO", logger="airflow_cdc_provider.replay.runs.many_as_ofs")
    landing = write_jsonl(
        tmp_path / "in" / "a.json",
        [dbz("c", 1, T0, name="ann"), dbz_truncate(T0 + 2000), dbz("c", 2, T0 + 3000, name="bob")],
    )
    together = _together_and_alone(spark, tmp_path, landing.parent, [T0 + 1000, T0 + 2500, T0 + 4000])
    assert "truncates or column drops" in caplog.text
    assert [m["rows"] for m in together] == [1, 0, 1]


def test_a_column_drop_folds_each_as_of_on_its_own(spark, tmp_path, caplog):
    """Found by the one pass's counts: the landing is decoded again and each AS OF folded alone."""
    from reference.records.maxwell import T, rec

    caplog.set_level("INFO", logger="airflow_cdc_provider.replay.runs.many_as_ofs")
    landing = write_jsonl(
        tmp_path / "in" / "a.json",
        [
            rec("insert", {"k": 1, "note": "n1"}, pk=None, ts=T),
            rec("table-alter", None, pk=None, ts=T + 2, sql="ALTER TABLE `t` DROP COLUMN `note`"),
            rec("insert", {"k": 2}, pk=None, ts=T + 3),
        ],
    )
    as_ofs = [(T + 1) * 1000, (T + 5) * 1000]
    together = _together_and_alone(spark, tmp_path, landing.parent, as_ofs, fmt="maxwell-json", key="k")
    assert not _one_fold(caplog)
    assert "truncates or column drops" in caplog.text
    assert [rows_of(spark, m["tables"]["db.t"]["path"]) for m in together] == [
        [{"k": 1, "note": "n1"}],
        [{"k": 1}, {"k": 2}],
    ]


def test_whole_transactions_fold_each_as_of_on_its_own(spark, tmp_path, caplog):
    from tests.replay.test_whole_transactions import transfer_landing

    caplog.set_level("INFO", logger="airflow_cdc_provider.replay.runs.many_as_ofs")
    landing = transfer_landing(tmp_path / "in" / "a.json")
    together = _together_and_alone(
        spark, tmp_path, landing.parent, [T0 + 2000, T0 + 3000], whole_transactions=True
    )
    assert not _one_fold(caplog)
    assert [m["transactions"] for m in together] == [
        {"whole": True, "held_back": 1, "events_held_back": 1},
        {"whole": True, "held_back": 0, "events_held_back": 0},
    ]


def test_the_shared_write_keeps_each_as_ofs_own_columns_and_empty_tables(spark, tmp_path, caplog):
    """A column that appears later, and a table with no row yet: each AS OF's tables are its own."""
    caplog.set_level("INFO", logger="airflow_cdc_provider.replay.runs.many_as_ofs")
    landing = tmp_path / "in"
    write_jsonl(
        landing / "a.json",
        [
            dbz("c", 1, T0, pos=100, name="ann"),
            dbz("c", 2, T0 + 2000, pos=200, name="bob", city="Oslo"),  # a column no earlier row has
            dbz("d", 1, T0 + 3000, pos=300, name="ann"),
        ],
    )
    together = _together_and_alone(spark, tmp_path, landing, [T0 - 1000, T0 + 1000, T0 + 2500, T0 + 9000])
    assert _one_fold(caplog)
    columns = [spark.read.parquet(m["tables"]["db.shop"]["path"]).columns for m in together]
    assert columns == [["id"], ["id", "name"], ["id", "name", "city"], ["id", "name", "city"]]
    assert [m["rows"] for m in together] == [0, 1, 2, 1]

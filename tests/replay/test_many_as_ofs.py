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

from tests.conftest import REPO, assert_events_add_up, rows_of
from tests.reliability.histories import ENCODERS, T0, land, random_history
from tests.reliability.test_accounting import assert_accounted, quarantine_rows

from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.replay.engine import run_snapshot, run_snapshots
from airflow_cdc_provider.replay.spec import SnapshotSpec
from airflow_cdc_provider.sample_data import SAMPLE_LANDING

# Fields that name where and when a snapshot was written, not what it holds.
_WHERE = ("output", "written_at")


def _specs(fmt: str, landing: Path, output: str, as_ofs: list[int], **options) -> list[SnapshotSpec]:
    args = SnapshotArgs.build(
        source_format=fmt, input_paths=str(landing), output_path=output, as_of=as_ofs, **options
    )
    return SnapshotSpec.each_from_job_args(args)


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
def test_each_snapshot_is_the_run_of_its_as_of_alone(fmt, spark, tmp_path):
    rng = random.Random(f"many-{fmt}")
    landing = tmp_path / "in"
    landing.mkdir()
    latest = T0 + 13_000  # after every change of a history (at most 12 of them, one per second)
    expected = {
        f"h{i}": land(ENCODERS[fmt], landing, f"h{i}", random_history(rng), latest, rng) for i in range(2)
    }
    as_ofs = [T0 + 6_500, latest]
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
    # The earlier AS OF against a run of its own; the latest against the plain Python fold.
    (alone,) = _specs(fmt, landing, str(tmp_path / "alone"), [as_ofs[0]], key_columns=keys)
    _assert_same_snapshot(spark, together[0], run_snapshot(spark, alone))
    tables = {t: rows_of(spark, info["path"]) for t, info in together[-1]["tables"].items()}
    assert_accounted(together[-1], tables, Path(together[-1]["output"].removeprefix("file:")), fmt, expected)


def test_each_as_of_reads_only_the_partitions_its_run_would(spark, tmp_path):
    """The sample's daily partitions: an earlier AS OF leaves later days unread, as it would alone."""
    expected = json.loads((REPO / "airflow_cdc_provider" / "sample_data" / "expected.json").read_text())
    days = ["2024-09-01T12:00:00Z", expected["as_of"], "2024-09-03T00:00:00Z"]
    args = SnapshotArgs.build(
        source_format="debezium-json",
        input_paths=str(SAMPLE_LANDING),
        output_path=str(tmp_path / "dt={as_of:%Y-%m-%dT%H}"),
        as_of=days,
        key_columns="id",
    )
    together = run_snapshots(spark, SnapshotSpec.each_from_job_args(args))
    assert [(m["files"]["read"], m["files"]["skipped"], m["rows"]) for m in together] == [
        (5, 8, 91),
        (10, 3, 83),
        (13, 0, 83),
    ]
    for day, metrics in zip(days, together):
        spec = SnapshotSpec.from_args(
            source_format="debezium-json",
            inputs=[str(SAMPLE_LANDING)],
            as_of=day,
            output=str(tmp_path / f"alone-{day[:10]}"),
            key=["id"],
        )
        _assert_same_snapshot(spark, metrics, run_snapshot(spark, spec))
    assert (together[1]["rows"], together[1]["events"]) == (expected["rows"], expected["events"])


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
        run_snapshots(spark, SnapshotSpec.each_from_job_args(args))
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

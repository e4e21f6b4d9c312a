"""The progress of a real run (``spark.progress``): its phases in order with their files and bytes,
Spark's stages at most once an interval in plain lines, a bar on a terminal, nothing with ``--quiet``,
no value of a row anywhere, and no Spark job of its own."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.jobs.cli import EXIT_OK, main
from airflow_cdc_provider.replay.runs.snapshot import run_snapshot
from airflow_cdc_provider.replay.spec import SnapshotSpec
from airflow_cdc_provider.sample_data import SAMPLE_EXPECTED, replay_arguments
from airflow_cdc_provider.spark.progress import (
    PlainRenderer,
    Reporter,
    RichRenderer,
    describe,
    human_bytes,
    reporter_for,
)
from airflow_cdc_provider.spark.reader import list_landed_files

# cdc-replay [  12.3s] TEXT
LINE = re.compile(r"^cdc-replay \[ *(\d+\.\d)s\] (.+)$")
# fold: stage 4: 3/4 tasks, 1 running / writing 1/2 tables: stages 6, 7: ...
STAGE_LINE = re.compile(r"^[a-z]+(?: \d+/\d+ [a-z]+)?: stages? [\d, +more]+: \d+/\d+ tasks, \d+ running")
REBUILD_PHASES = ["listing", "decoding", "fold", "typing", "writing", "done"]


def _sample_spec(output: Path) -> SnapshotSpec:
    return SnapshotSpec.each_from_args(SnapshotArgs.from_argv(replay_arguments(str(output))[1:]))[0]


def _row_values() -> set[str]:
    """Every text value of the sample's snapshot rows that could not be a figure of the progress
    itself: four characters or more, and a letter among them (a session that ran many jobs before
    shows stage numbers such as 1001)."""
    snapshot = json.loads(SAMPLE_EXPECTED.read_text())["snapshot"]
    return {
        value
        for rows in snapshot.values()
        for row in rows
        for value in row.values()
        if isinstance(value, str) and len(value) >= 4 and any(c.isalpha() for c in value)
    }


def _jobs_of(spark, group: str, run) -> tuple[int, object]:
    """How many Spark jobs ``run()`` starts, and what it returns."""
    spark.sparkContext.setJobGroup(group, group)
    try:
        result = run()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(group)), result


def test_a_plain_run_reports_its_phases_in_order_and_spark_at_most_once_an_interval(spark, tmp_path):
    interval = 0.5
    stream = io.StringIO()
    spec = _sample_spec(tmp_path / "reported")
    listed, after = spec.partitions.split(list_landed_files(spark, list(spec.inputs)), spec.as_of_ms)

    def reported_run() -> dict:
        with Reporter(PlainRenderer(stream, interval=interval)) as reporter:
            reporter.watch(spark)
            metrics = run_snapshot(spark, spec)
            reporter.done([metrics])
        return metrics

    jobs_reported, metrics = _jobs_of(spark, "reported", reported_run)
    jobs_plain, _ = _jobs_of(spark, "plain", lambda: run_snapshot(spark, _sample_spec(tmp_path / "plain")))

    matches = [LINE.match(line) for line in stream.getvalue().splitlines()]
    assert all(matches), stream.getvalue()
    timed = [(float(m.group(1)), m.group(2)) for m in matches]
    phases = [text for _, text in timed if not STAGE_LINE.match(text)]
    assert [text.split(":")[0] for text in phases] == REBUILD_PHASES, phases
    assert phases[0] == describe("listing", files=listed, unread=after)
    assert f"{len(listed)} files, {human_bytes(sum(f.size for f in listed))}" in phases[0]
    assert f"{len(after)} after AS OF + lateness, not read" in phases[0]
    assert phases[1] == describe("decoding", files=listed)
    assert phases[-1] == f"done: as of {metrics['as_of']}: 83 rows in 2 tables, 305 events read"

    stage_lines = [k for k, (_, text) in enumerate(timed) if STAGE_LINE.match(text)]
    assert stage_lines, f"no stage line in a run of {timed[-1][0]} s: {timed}"
    for k in stage_lines:  # a Spark line comes at least one interval after the line before it
        assert timed[k][0] - timed[k - 1][0] >= interval - 0.1, timed[k - 1 : k + 1]
    assert "━" not in stream.getvalue() and "\r" not in stream.getvalue()
    assert not any(value in stream.getvalue() for value in _row_values())
    # The markers and the status tracker start no Spark job of their own.
    assert jobs_reported == jobs_plain


def test_on_a_terminal_a_bar_shows_spark_progress_and_stdout_is_left_alone(spark, tmp_path, capsys):
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    with Reporter(RichRenderer(console)) as reporter:
        reporter.watch(spark)
        reporter.done([run_snapshot(spark, _sample_spec(tmp_path / "out"))])
    shown = out.getvalue()
    printed = re.findall(r"\[ *\d+\.\ds\] ([a-z]+)", shown)
    assert printed == REBUILD_PHASES, printed
    assert "━" in shown  # the bar
    assert re.search(r"stages? \d+.*: \d+/\d+ tasks, \d+ running", shown)
    assert [value for value in _row_values() if value in shown] == [], shown
    assert capsys.readouterr().out == ""


def test_quiet_prints_no_progress_and_stdout_holds_the_metrics_only(spark, tmp_path, capsys):
    output = tmp_path / "quiet"
    assert main([*replay_arguments(str(output)), "--master", "local[2]", "--quiet"]) == EXIT_OK
    captured = capsys.readouterr()
    assert json.loads(captured.out)["rows"] == 83
    assert json.loads(captured.out) == json.loads((output / "_cdc_metrics.json").read_text())
    assert "cdc-replay [" not in captured.err


@pytest.mark.parametrize("command", ["snapshot", "history"])
def test_both_runs_take_quiet_and_verbose_but_not_both(command, capsys):
    from airflow_cdc_provider.jobs.cli import build_parser

    instant = "--as-of" if command == "snapshot" else "--until"
    base = [command, "--format", "debezium-json", "--input", "in", instant, "2024-01-01T00:00:00Z"]
    base += ["--output", "out", "--key", "id"]
    for with_master in (True, False):  # the console script, and spark_app.py under spark-submit
        parser = build_parser(with_master=with_master)
        assert parser.parse_args([*base, "--quiet"]).quiet
        assert parser.parse_args([*base, "--verbose"]).verbose
        plain = parser.parse_args(base)
        assert not plain.quiet and not plain.verbose
        with pytest.raises(SystemExit):
            parser.parse_args([*base, "--quiet", "--verbose"])
    capsys.readouterr()


def test_the_reporter_follows_quiet_and_the_terminal():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert reporter_for(quiet=True).renderer is None
    assert isinstance(reporter_for(quiet=False, stream=io.StringIO()).renderer, PlainRenderer)
    rich = reporter_for(quiet=False, stream=Terminal()).renderer
    assert isinstance(rich, RichRenderer)
    rich.close()

"""The benchmark harness end to end at a tiny size: generator, runner, and the rows each job writes.

Runs ``benchmarks.run.run_all`` in the test session's SparkSession (repeat 1) on two generated
landings and checks exact rows, not timings: the rebuild's rows are the generator's history folded
in Python, and the window job (b) and DuckDB (d) write the same rows as the rebuild.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import rows_of

from benchmarks.generate import Slots, Workload, generate, history
from benchmarks.run import Landing, compare_text, report_text, run_all
from reference import fold
from reference.fold import DELETE

pytestmark = pytest.mark.slow

DEBEZIUM = Workload(events=2_000, keys=200, files=4, late_share=0.2, layout="hive-hour", as_of_share=0.9)
SHAREPLEX = Workload(source_format="shareplex-json", events=2_000, keys=200, files=3, partial_share=0.5)


def folded(w: Workload) -> list[dict]:
    """The rows at AS OF: the reference fold of the generator's history (each change with its whole row)."""
    events = []
    for change, _ in history(w):
        row = {"id": change.key, "name": change.name, "qty": change.qty}
        image = {"before": row} if change.op == DELETE else {"after": row}
        events.append(fold.Event(change.op, change.ms, order=(change.position,), **image))
    return fold.fold(events, w.as_of_ms, key=("id",)).rows()


def bench(
    spark,
    tmp_path_factory,
    w: Workload,
    incremental_share: float = 0.0,
    as_ofs: int = 0,
    with_history: bool = False,
    with_prototype: bool = False,
) -> tuple[Path, dict, dict]:
    work = tmp_path_factory.mktemp(w.source_format)
    expected = generate(w, work / "landed")
    landing = Landing.open(work / "landed")
    return (
        work,
        expected,
        run_all(
            spark,
            landing,
            work,
            1,
            incremental_share,
            as_ofs=as_ofs,
            with_history=with_history,
            with_prototype=with_prototype,
        ),
    )


@pytest.fixture(scope="module")
def debezium(spark, tmp_path_factory):
    return bench(
        spark,
        tmp_path_factory,
        DEBEZIUM,
        incremental_share=0.3,
        as_ofs=3,
        with_history=True,
        with_prototype=True,
    )


def rebuilt_rows(spark, work: Path, expected: dict) -> list[dict]:
    ((table, _),) = expected["tables"].items()
    return rows_of(spark, work / "out-c" / table)


def test_debezium_rebuild_is_the_folded_history(spark, debezium):
    work, expected, report = debezium
    assert report["mismatches"] == []
    assert report["rows"] == {
        "expected": expected["rows"],
        "b": expected["rows"],
        "c": expected["rows"],
        "d": report["rows"]["d"],
        "e": expected["rows"],
        "k": None,
        "w": report["rows"]["w"],
        "f": expected["rows"],
        "g": expected["rows"],
        "v": expected["rows"],
    }
    assert rebuilt_rows(spark, work, expected) == folded(DEBEZIUM)
    ((table, _),) = expected["tables"].items()
    assert rows_of(spark, work / "out-e" / table) == folded(DEBEZIUM)  # (e) started from a base at 70%
    assert report["measurements"]["e"]["note"].startswith("incremental, 30.0% new events: read ")
    # (w), the daily prototype: the base's rows without the keys the new files touch, plus theirs.
    ids = [r["id"] for r in rows_of(spark, work / "out-w" / table)]
    assert len(ids) == len(set(ids)) == report["rows"]["w"] > 0
    # (k): the base's tables copied as they are.
    assert rows_of(spark, work / "out-k" / table) == rows_of(spark, work / "out-e-base" / table)
    assert report["measurements"]["k"]["note"].endswith(" rows of the base") and report["ratios"]["e/k"] > 0
    # (f): three snapshots from one scan, the last at AS OF: the same rows as (c).
    last = sorted((work / "out-f").iterdir())[-1]
    assert len(list((work / "out-f").iterdir())) == 3
    assert rows_of(spark, last / table) == folded(DEBEZIUM)
    assert report["measurements"]["f"]["note"].startswith("3 snapshots; rows of the last (at AS OF); ")
    # (g): the history's current versions are (c)'s rows.
    current = [
        {k: v for k, v in r.items() if not k.startswith("_cdc_")}
        for r in rows_of(spark, work / "out-g" / table)
        if r["_cdc_valid_to"] is None
    ]
    assert sorted(current, key=lambda r: json.dumps(r, sort_keys=True)) == folded(DEBEZIUM)
    assert report["measurements"]["g"]["note"].endswith(" versions; rows = the current ones")
    assert 0 < expected["rows"] < DEBEZIUM.keys
    assert report["measurements"]["a"]["seconds"] > 0 and report["ratios"]["c/a"] > 0


def test_window_job_writes_the_rebuilds_rows(spark, debezium):
    work, expected, _ = debezium
    window = [{k: v for k, v in r.items() if k != "table"} for r in rows_of(spark, work / "out-b")]
    assert window == rebuilt_rows(spark, work, expected)
    assert {r["table"] for r in rows_of(spark, work / "out-b")} == set(expected["tables"])


def test_duckdb_writes_the_rebuilds_rows(spark, debezium):
    pytest.importorskip("duckdb")
    work, expected, report = debezium
    assert report["measurements"]["d"]["seconds"] > 0
    duck = [{k: v for k, v in r.items() if k != "table"} for r in rows_of(spark, work / "out-d")]
    assert duck == rebuilt_rows(spark, work, expected)


def test_late_events_land_in_a_later_file(debezium):
    """Every record sits in its event time's file, or (the late ones, counted) in a later one."""
    work, expected, _ = debezium
    slots = Slots(DEBEZIUM)
    on_time = late = 0
    files = sorted((work / "landed").rglob("part-*.json"))
    # 2,000 events from 10:00:01 are one hour partition of four 15-minute files; late ones fill the fourth.
    assert [f.relative_to(work / "landed").as_posix() for f in files] == [
        f"dt=2024-09-02/hour=10/part-{i:05d}.json" for i in range(4)
    ]
    for path in files:
        relative = path.relative_to(work / "landed").as_posix()
        for line in path.read_text().splitlines():
            slot = slots.slot(json.loads(line)["source"]["pos"])
            if slots.path(slot) == relative:
                on_time += 1
            else:
                assert relative > slots.path(slot), relative  # later: dt=/hour=/part- paths sort by time
                late += 1
    assert late == expected["counts"]["late"] > 0
    assert on_time + late == DEBEZIUM.events


def test_shareplex_partial_updates_rebuild_exactly(spark, tmp_path_factory):
    work, expected, report = bench(spark, tmp_path_factory, SHAREPLEX)
    assert report["mismatches"] == []
    assert expected["counts"]["partial_updates"] > 0
    assert rebuilt_rows(spark, work, expected) == folded(SHAREPLEX)
    assert (
        report["measurements"]["b"]["note"]
        == report["measurements"]["d"]["note"]
        == "written for debezium-json only"
    )
    assert report["measurements"]["a"]["seconds"] > 0 and report["rows"]["b"] is None


def test_prototype_writes_the_rebuilds_rows_and_counts(spark, debezium):
    """(v), the design's smallest rebuild (benchmarks/prototype.py), is a floor only if it does the work:
    the same rows and counts."""
    work, expected, report = debezium
    ((table, _),) = expected["tables"].items()
    assert rows_of(spark, work / "out-v" / table) == folded(DEBEZIUM)
    assert report["ratios"]["v/b"] > 0 and report["ratios"]["c/v"] > 0
    assert "v/b " in report_text(report)


def test_report_and_comparison_print(debezium):
    _, _, report = debezium
    text = report_text(report)
    assert "(c) cdc-replay rebuild" in text and "MISMATCH" not in text
    larger = json.loads(json.dumps(report))
    larger["input"]["events"] *= 10
    larger["measurements"]["c"]["seconds"] *= 12
    assert (
        "(c) time ratio 12.00x for 10x the events (target: <= 11x, i.e. 10M <= 11x 1M) MISSED"
        in compare_text(report, larger)
    )
    larger["measurements"]["c"]["seconds"] = report["measurements"]["c"]["seconds"] * 10
    assert compare_text(report, larger).endswith(" MET")
    avro = json.loads(json.dumps(report))
    avro["workload"]["source_format"] = "dts-avro"
    avro["rebuild_events_per_s"] = report["rebuild_events_per_s"] / 4
    assert compare_text(report, avro).endswith("= 0.25 (target: >= 0.5 of debezium-json's) MISSED")
    avro["workload"]["source_format"] = "debezium-avro"  # also decoded in Python workers
    avro["rebuild_events_per_s"] = report["rebuild_events_per_s"] * 0.5
    assert compare_text(report, avro).endswith("= 0.50 (target: >= 0.5 of debezium-json's) MET")
    canal = json.loads(json.dumps(report))
    canal["workload"]["source_format"] = "canal-json"
    canal["rebuild_events_per_s"] = report["rebuild_events_per_s"] * 0.7
    assert compare_text(report, canal).endswith("= 0.70 (target: >= 0.7 of debezium-json's) MET")


def test_report_counts_spark_jobs_and_times_call_sites(debezium):
    """Each measurement says how many Spark jobs a run started; the rebuild's time is split by call site."""
    _, _, report = debezium
    c, d = report["measurements"]["c"], report["measurements"]["d"]
    assert len(c["jobs"]) == 1 and c["jobs"][0] == sum(p["jobs"] for p in c["phases"]) > 0
    assert d["jobs"] == [0]  # DuckDB starts no Spark job
    assert c["phases"][-1]["site"] == "driver: between and around jobs"
    assert (
        sum(p["seconds"] for p in c["phases"]) >= c["seconds"] - 0.01
    )  # jobs may overlap, never leave time out
    assert "median run, time per call site" in report_text(report)


def test_cold_runs_rebuild_the_sample_in_their_own_process(capsys):
    """``benchmarks.cold``: a fresh ``cdc-replay`` process per run, its rows checked against expected.json."""
    import re

    from benchmarks.cold import main as cold_main

    assert cold_main(["--repeat", "1"]) == 0
    printed = capsys.readouterr().out
    assert re.fullmatch(
        r"cold cdc-replay on the bundled sample, with the class archive \(if built\): "
        r"median (\d+\.\d\d) s \((\d+\.\d\d)\)\n",
        printed,
    ), printed


TWO_DAYS = Workload(events=2_000, keys=200, files=3, late_share=0.2, layout="two-days", new_share=0.05)


def test_two_days_landing_puts_the_new_events_in_their_own_day(spark, tmp_path_factory):
    """A daily run's landing: (e) starts from the snapshot as of the cut and reads day 2's file only."""
    work, expected, report = bench(spark, tmp_path_factory, TWO_DAYS, incremental_share=0.01)
    landed = sorted(f.relative_to(work / "landed").as_posix() for f in (work / "landed").rglob("part-*"))
    assert landed == [
        *(f"dt=2024-09-01/part-{i:05d}.json" for i in range(3)),
        "dt=2024-09-02/part-00000.json",
    ]
    assert expected["cut_ms"] == TWO_DAYS.cut_ms == TWO_DAYS.as_of_ms - 100_000  # 5% of 2,000 seconds
    day2 = (work / "landed" / landed[-1]).read_text().splitlines()
    assert (
        sum(json.loads(line)["source"]["pos"] > 1_900 for line in day2) == 100
    )  # every new event, plus late ones
    assert report["mismatches"] == []
    assert report["measurements"]["e"]["note"] == (
        f"incremental, 5.0% new events: read 1 file(s) "
        f"({(work / 'landed' / landed[-1]).stat().st_size / 2**20:,.1f} MiB), skipped 3"
    )
    ((table, _),) = expected["tables"].items()
    assert rows_of(spark, work / "out-e" / table) == folded(TWO_DAYS)


def test_cold_daily_runs_compare_a_base_run_with_a_full_rebuild(tmp_path, capsys):
    """``benchmarks.cold --daily --prototype``: yesterday's snapshot once, then the window job, the
    prototype, full and incremental runs, each a new process; the rebuilds' rows checked."""
    import re

    from benchmarks.cold import main as cold_main

    generate(TWO_DAYS, tmp_path / "landed")
    assert cold_main(["--repeat", "1", "--daily", str(tmp_path / "landed"), "--prototype"]) == 0
    printed = capsys.readouterr().out
    assert re.fullmatch(
        rf"cold cdc-replay on {tmp_path}/landed, with the class archive \(if built\), alternating:\n"
        r"  \(b\) window job, plain PySpark: +median \d+\.\d\d s \(\d+\.\d\d\)\n"
        r"  \(v\) prototype, plain PySpark: +median \d+\.\d\d s \(\d+\.\d\d\)\n"
        r"  \(c\) full rebuild: +median \d+\.\d\d s \(\d+\.\d\d\)\n"
        r"  \(e\) from yesterday's snapshot: +median \d+\.\d\d s \(\d+\.\d\d\); read 1 file\(s\), skipped 3\n"
        r"  e/c cold \d+\.\d\d   c/b cold \d+\.\d\d   v/b cold \d+\.\d\d   c/v cold \d+\.\d\d\n",
        printed,
    ), printed

"""``--max-quarantined N`` and ``P%``: at the limit a run publishes, past it it fails and the output stays.

A failed run names the count, the limit, the top reasons and where its quarantine is kept (a
hidden folder beside the output); the previous snapshot is left exactly as it was, and the next
run that commits removes what the failed one kept. The rule holds per snapshot of several AS OFs
and for a history, and the option travels from the operator to spark-submit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import airflow_env  # noqa: F401 - sets Airflow's home before anything imports airflow
from tests.conftest import debezium_specs, rows_of, write_jsonl
from tests.reliability.test_bad_input import quarantined, where
from tests.replay.test_semantics import T0, dbz

from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.contract.checks import CdcJobArgumentError
from airflow_cdc_provider.replay.errors import QuarantineLimitError
from airflow_cdc_provider.replay.runs.history import run_history
from airflow_cdc_provider.replay.runs.many_as_ofs import run_snapshots
from airflow_cdc_provider.replay.runs.snapshot import run_snapshot
from airflow_cdc_provider.replay.spec import SnapshotSpec

END = "2100-01-01T00:00:00+00:00"
NULL_KEY = json.dumps(dbz("c", None, T0, name="no key"))
CUT = '{"op": "c", "after": {"id": 9'


def _specs(landing: Path, output: Path | str, as_of=END, **options) -> list[SnapshotSpec]:
    return debezium_specs(landing, output, as_of, **options)


def _land_day_one(root: Path) -> Path:
    """6 records, 2 of them quarantined: not JSON, not a JSON object."""
    write_jsonl(root / "a.json", [dbz("c", 1, T0, name="a"), dbz("c", 2, T0, name="b"), "{oops"])
    write_jsonl(root / "b.json", [dbz("c", 3, T0, name="c"), "[1, 2]", dbz("c", 4, T0, name="d")])
    return root


def _land_c(root: Path) -> Path:
    """4 more records, 3 of them quarantined: not JSON, missing key, truncated (no line break)."""
    (root / "c.json").write_text(
        "\n".join([json.dumps(dbz("u", 2, T0 + 1, name="b2")), "{again", NULL_KEY, CUT]), encoding="utf-8"
    )
    return root


def _land(root: Path) -> Path:
    """10 records, 5 of them quarantined: not JSON (2), missing key, not a JSON object, truncated."""
    return _land_c(_land_day_one(root))


def _rejected(output: Path) -> Path:
    return output.parent / f".{output.name}.cdc-rejected"


def _listing(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


FIRST_FIVE = [
    ("a.json", 3, "not JSON", "{oops"),
    ("b.json", 2, "not a JSON object", "[1, 2]"),
    ("c.json", 2, "not JSON", "{again"),
    ("c.json", 3, "missing key", NULL_KEY),
    ("c.json", 4, "truncated", CUT),
]


def test_a_count_limit_passes_at_it_and_fails_past_it_leaving_the_previous_snapshot(spark, tmp_path):
    landing = _land_day_one(tmp_path / "in")
    output = tmp_path / "snaps" / "out"
    (at_limit,) = _specs(landing, output, max_quarantined=2)
    metrics = run_snapshot(spark, at_limit)
    assert metrics["quarantine"] == {
        "records": 2,
        "path": f"file:{output}/_quarantine",
        "reasons": {"not JSON": 1, "not a JSON object": 1},
        "limit": "2",
        "allowed": 2,
    }
    published = (output / "_cdc_metrics.json").read_text(encoding="utf-8")
    rows = [{"id": i, "name": n} for i, n in [(1, "a"), (2, "b"), (3, "c"), (4, "d")]]
    assert rows_of(spark, output / "db.shop") == rows

    _land_c(landing)  # 3 more quarantined records: 5 of 10
    (past,) = _specs(landing, output, max_quarantined="4")
    with pytest.raises(QuarantineLimitError) as failed:
        run_snapshot(spark, past)
    kept = _rejected(output) / "_quarantine"
    assert str(failed.value) == (
        f"too many quarantined records for the snapshot as of {END}: 5 of the 10 records read, past "
        "--max-quarantined 4 (at most 4); top reasons: not JSON (2), missing key (1), not a JSON object (1). "
        f"The quarantined records are in file:{kept}; file:{output} is left as it was."
    )
    assert rows_of(spark, output / "db.shop") == rows
    assert (output / "_cdc_metrics.json").read_text(encoding="utf-8") == published
    assert _listing(output.parent) == {"out", ".out.cdc-rejected"}  # no staging folder, no lock
    assert where(quarantined(_rejected(output))) == FIRST_FIVE


def test_a_share_limit_counts_the_records_read_and_the_next_commit_removes_the_rejected(spark, tmp_path):
    landing = _land(tmp_path / "in")
    output = tmp_path / "snaps" / "out"
    (at_limit,) = _specs(landing, output, max_quarantined="50%")  # 5 of 10
    metrics = run_snapshot(spark, at_limit)
    assert (metrics["quarantine"]["limit"], metrics["quarantine"]["allowed"]) == ("50%", 5)
    rows = [{"id": i, "name": n} for i, n in [(1, "a"), (2, "b2"), (3, "c"), (4, "d")]]
    assert rows_of(spark, output / "db.shop") == rows

    write_jsonl(landing / "d.json", [dbz("u", 3, T0 + 2, name="c2"), "{x", "{y"])  # 7 of 13: 50% is 6.5
    with pytest.raises(QuarantineLimitError) as failed:
        run_snapshot(spark, _specs(landing, output, max_quarantined="50%")[0])
    kept = _rejected(output) / "_quarantine"
    assert str(failed.value) == (
        f"too many quarantined records for the snapshot as of {END}: 7 of the 13 records read, past "
        "--max-quarantined 50% (at most 6); top reasons: not JSON (4), missing key (1), not a JSON object (1). "
        f"The quarantined records are in file:{kept}; file:{output} is left as it was."
    )
    assert rows_of(spark, output / "db.shop") == rows
    both = [*FIRST_FIVE, ("d.json", 2, "not JSON", "{x"), ("d.json", 3, "not JSON", "{y")]
    assert where(quarantined(_rejected(output))) == both

    metrics = run_snapshot(spark, _specs(landing, output, max_quarantined="60%")[0])  # 7.8: at most 7
    assert (metrics["quarantine"]["records"], metrics["quarantine"]["allowed"]) == (7, 7)
    assert rows_of(spark, output / "db.shop") == [{**r, "name": "c2"} if r["id"] == 3 else r for r in rows]
    assert where(quarantined(output)) == both
    assert _listing(output.parent) == {"out"}


def test_each_of_several_as_ofs_has_its_own_limit(spark, tmp_path):
    day1, day2 = 1725152400000, 1725238800000  # 2024-09-01T01:00Z, 2024-09-02T01:00Z
    landing = tmp_path / "in"
    write_jsonl(landing / "dt=2024-09-01" / "a.json", [dbz("c", 1, day1, name="a"), "{oops"])
    write_jsonl(landing / "dt=2024-09-02" / "b.json", [dbz("c", 2, day2, name="b"), "[1, 2]"])
    root = tmp_path / "snap"
    specs = _specs(
        landing,
        root / "as_of={as_of:%Y-%m-%d}",
        ["2024-09-01T12:00:00Z", "2024-09-02T12:00:00Z"],
        max_quarantined="1",
    )
    with pytest.raises(QuarantineLimitError) as failed:
        run_snapshots(spark, specs)
    kept = root / ".as_of=2024-09-02.cdc-rejected" / "_quarantine"
    assert str(failed.value) == (
        "too many quarantined records for the snapshot as of 2024-09-02T12:00:00+00:00: 2 of the 4 records "
        "read, past --max-quarantined 1 (at most 1); top reasons: not JSON (1), not a JSON object (1). "
        f"The quarantined records are in file:{kept}; file:{root}/as_of=2024-09-02 is left as it was."
    )
    # The first AS OF reads day one only (day two starts after it + lateness): 1 of 2, at its limit.
    assert rows_of(spark, root / "as_of=2024-09-01" / "db.shop") == [{"id": 1, "name": "a"}]
    first = json.loads((root / "as_of=2024-09-01" / "_cdc_metrics.json").read_text(encoding="utf-8"))
    assert (first["events"]["read"], first["quarantine"]["records"]) == (2, 1)
    assert _listing(root) == {"as_of=2024-09-01", ".as_of=2024-09-02.cdc-rejected"}
    assert [(r[0], r[2]) for r in where(quarantined(kept.parent))] == [
        ("a.json", "not JSON"),
        ("b.json", "not a JSON object"),
    ]


def test_a_history_past_the_limit_is_not_written(spark, tmp_path):
    landing = _land(tmp_path / "in")
    output = tmp_path / "snaps" / "history"
    (spec,) = _specs(landing, output, history=True, max_quarantined="49.5%")  # 4.95: at most 4
    with pytest.raises(QuarantineLimitError) as failed:
        run_history(spark, spec)
    kept = _rejected(output) / "_quarantine"
    assert str(failed.value) == (
        f"too many quarantined records for the history until {END}: 5 of the 10 records read, past "
        "--max-quarantined 49.5% (at most 4); top reasons: not JSON (2), missing key (1), not a JSON object (1). "
        f"The quarantined records are in file:{kept}; file:{output} is left as it was."
    )
    assert _listing(output.parent) == {".history.cdc-rejected"}
    assert where(quarantined(kept.parent)) == FIRST_FIVE


# ------------------------------------------------------------------------------------------------
# The option on the argument list and from the operator (no Spark)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "sent"), [(0, "0"), (25, "25"), ("25", "25"), ("0.50%", "0.5%"), ("100%", "100%"), ("", None)]
)
def test_the_limit_round_trips_through_the_argument_list(given, sent):
    args = SnapshotArgs.build(
        source_format="debezium-json", input_paths="/in", output_path="/o", as_of=0, max_quarantined=given
    )
    assert args.max_quarantined == sent
    argv = args.to_argv()
    if sent is None:
        assert "--max-quarantined" not in argv
    else:
        assert argv[argv.index("--max-quarantined") + 1] == sent
    assert SnapshotArgs.from_argv(argv) == args
    history = SnapshotArgs.build(
        source_format="debezium-json",
        input_paths="/in",
        output_path="/o",
        as_of=0,
        max_quarantined=given,
        history=True,
    )
    assert SnapshotArgs.from_argv(history.to_argv()) == history


@pytest.mark.parametrize(
    ("given", "on_error", "message"),
    [
        (
            "5",
            "fail",
            "max_quarantined limits how many records on_error='quarantine' sets aside; "
            "on_error='fail' fails on the first one: use one or the other",
        ),
        (
            "-1",
            "quarantine",
            "max_quarantined must be a record count N or a share P% of the records read (e.g. 100 or 0.5%), "
            "got '-1'",
        ),
        ("101%", "quarantine", "max_quarantined '101%': a share of the records read is at most 100%"),
        (
            "1e3",
            "quarantine",
            "max_quarantined must be a record count N or a share P% of the records read (e.g. 100 or 0.5%), "
            "got '1e3'",
        ),
        (
            1.5,
            "quarantine",
            "max_quarantined must be a record count N or a share P% of the records read (e.g. 100 or 0.5%), "
            "got 1.5",
        ),
    ],
)
def test_a_limit_that_cannot_apply_is_refused(given, on_error, message):
    with pytest.raises(CdcJobArgumentError) as refused:
        SnapshotArgs.build(
            source_format="debezium-json",
            input_paths="/in",
            output_path="/o",
            as_of=0,
            on_error=on_error,
            max_quarantined=given,
        )
    assert str(refused.value) == message


def test_the_operator_argument_reaches_spark_submit(monkeypatch, tmp_path):
    from collections import defaultdict
    from types import SimpleNamespace

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from airflow_cdc_provider.operators.snapshot import CdcSnapshotOperator

    submitted: list[list[str]] = []
    monkeypatch.setattr(
        SparkSubmitHook,
        "submit",
        lambda hook, application="", **kwargs: submitted.append(
            hook._build_spark_submit_command(application)
        ),
    )
    output = tmp_path / "out"
    output.mkdir()
    metrics = {"output": f"file:{output}", "as_of": END, "rows": 0, "tables": {}}
    (output / "_cdc_metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    operator = CdcSnapshotOperator(
        task_id="limited",
        source_format="debezium-json",
        input_paths="/in",
        output_path=str(output),
        as_of=END,
        key_columns="id",
        max_quarantined="{{ params.limit }}",
    )
    assert "max_quarantined" in operator.template_fields
    operator.render_template_fields({"params": {"limit": "0.5%"}})
    context = {"outlet_events": defaultdict(lambda: SimpleNamespace(extra={}))}
    assert operator.execute(context) == metrics
    (command,) = submitted
    at = command.index("--max-quarantined")
    assert command[at - 2 : at + 2] == ["--on-error", "quarantine", "--max-quarantined", "0.5%"]

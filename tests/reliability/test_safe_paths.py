"""Safe paths and parameters: the job never writes into its inputs, never deletes what it did not
write, never puts a row value in an error or a log line, and the operator's values reach
spark-submit as single arguments of a list, never through a shell."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest

from tests import airflow_env  # noqa: F401 - must come before anything imports airflow
from tests.conftest import write_jsonl
from tests.replay.test_semantics import T0, dbz
from tests.submit_recorder import install_recorder

from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.hooks.cdc_replay import CdcJobArgumentError, CdcReplayHook, application_path
from airflow_cdc_provider.replay.errors import QuarantineError
from airflow_cdc_provider.replay.output import OutputError, OutputTarget

OVERLAP = (
    "overlap (the output is, contains or lies inside the input); write the snapshot outside the landed files"
)


@pytest.fixture
def landed(tmp_path: Path) -> Path:
    write_jsonl(tmp_path / "lake" / "cdc" / "a.json", [dbz("c", 1, T0, name="a")])
    return tmp_path / "lake" / "cdc"


@pytest.mark.parametrize(
    ("input_path", "output_path"),
    [
        ("lake/cdc", "lake/cdc"),  # is the input
        ("lake/cdc", "lake/cdc/snapshot"),  # lies inside it
        ("lake/cdc/a.json", "lake/cdc"),  # contains it: replacing it would delete landed files
        ("lake", "lake/cdc/../snapshot"),  # the same, spelled with ..
        ("lake/*", "lake/snapshot/today"),  # a glob that matches the output's folder
        ("lake/{cdc,snap*}/", "lake/snapshot"),
        ("lake/cdc", "link/snapshot"),  # through a symbolic link to the input
    ],
)
def test_an_output_overlapping_an_input_is_refused_before_anything_runs(
    replay, landed, tmp_path, input_path, output_path
):
    (tmp_path / "link").symlink_to(landed, target_is_directory=True)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(OutputError) as refused:
        replay("debezium-json", [str(tmp_path / input_path)], key="id", output=str(tmp_path / output_path))
    assert str(refused.value).startswith("output file:")
    assert str(refused.value).endswith(f"and input {tmp_path / input_path} {OVERLAP}")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize(
    ("input_path", "output_path"),
    [("lake/cdc", "lake/cdc-snapshot"), ("lake/*.json", "lake/snapshot"), ("lake/c?c/x", "lake/cdc-x")],
)
def test_outputs_beside_the_inputs_are_allowed(spark, landed, tmp_path, input_path, output_path):
    OutputTarget(spark, str(tmp_path / output_path)).refuse_overlap([str(tmp_path / input_path)])


def test_nothing_the_job_did_not_write_is_replaced(replay, landed, tmp_path):
    theirs = tmp_path / "theirs"
    (theirs / "keep").mkdir(parents=True)
    (theirs / "keep" / "data.csv").write_text("1,2\n")
    ours_plus = tmp_path / "ours_plus"
    (ours_plus / "db.shop").mkdir(parents=True)
    (ours_plus / "_cdc_metrics.json").write_text(json.dumps({"tables": {"db.shop": {}}}))
    (ours_plus / "notes.txt").write_text("mine")
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    messages = {}
    for output in (theirs, ours_plus, a_file):
        with pytest.raises(OutputError) as refused:
            replay("debezium-json", landed, key="id", output=str(output))
        messages[output.name] = str(refused.value)
    assert messages == {
        "theirs": f"output file:{theirs} exists and was not written by cdc-replay (no _cdc_metrics.json); "
        "refusing to replace it. Choose an empty or new folder.",
        "ours_plus": f"output file:{ours_plus} holds notes.txt, which the earlier cdc-replay run did not write; "
        "refusing to replace it (that would delete them). Move them away or choose another folder.",
        "a_file": f"output file:{a_file} exists and is a file; choose a folder",
    }
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_row_values_never_reach_errors_or_logs(replay, landed, tmp_path, caplog):
    secret = "4111-1111-1111-1111"
    write_jsonl(
        landed / "b.json",
        [
            {**dbz("c", 2, T0, name=secret), "op": "?"},  # unknown op, carrying the value
            f'{{"op": "c", "after": {{"id": 3, "card": "{secret}"',  # not JSON
        ],
    )
    caplog.set_level(logging.DEBUG)
    with pytest.raises(QuarantineError) as failed:
        replay("debezium-json", landed, key="id", on_error="fail")
    assert str(failed.value) == (
        f"cannot decode file:{landed}/b.json line 1: unknown op "
        "(--on-error fail; rerun with --on-error quarantine to set such records aside)"
    )
    assert secret not in caplog.text
    metrics, _ = replay("debezium-json", landed, key="id", output=tmp_path / "out")
    assert metrics["quarantine"]["reasons"] == {"not JSON": 1, "unknown op": 1}
    assert secret not in json.dumps(metrics) and secret not in caplog.text
    # The quarantine is the one place the raw records go.
    assert secret in "".join(p.read_text() for p in (tmp_path / "out" / "_quarantine").glob("part-*"))


def test_operator_values_reach_spark_submit_as_single_arguments_without_a_shell(tmp_path, monkeypatch):
    """A stand-in ``spark3-submit`` records the argument vector the Spark provider starts it with."""
    argv_file = install_recorder(tmp_path, monkeypatch)
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_RECORDER",
        json.dumps({"conn_type": "spark", "host": "local[1]", "extra": {"spark-binary": "spark3-submit"}}),
    )
    monkeypatch.chdir(tmp_path)

    hostile = ["/lake/in dir/$(touch pwned)", "/lake/b;touch pwned", "/lake/c --master yarn", "`touch pwned`"]
    request = SnapshotArgs.build(
        source_format="debezium-json",
        input_paths=hostile,
        output_path=str(tmp_path / "out dir; touch pwned"),
        as_of="2024-09-02T00:00:00Z",
        key_columns=["id"],
        tables="db.t --conf spark.x=y",
    )
    hook = CdcReplayHook(conn_id="spark_recorder", spark_conf={"spark.app.tag": "a b; --master yarn"})
    assert hook.run_snapshot(request) == [{"rows": 0}]

    argv = json.loads(argv_file.read_text())
    app = argv.index(application_path())
    error_file = argv[argv.index("--error-file") + 1]
    assert argv[app + 1 :] == replace(request, error_file=error_file).to_argv()
    assert argv[:app].count("--master") == 1 and argv[argv.index("--master") + 1] == "local[1]"
    assert "spark.app.tag=a b; --master yarn" in argv[:app]
    assert [a for a in argv if a.startswith("--conf") or a == "--conf"].count("--conf") == argv[:app].count(
        "--conf"
    )
    assert not (tmp_path / "pwned").exists()

    for value in ("--conf spark.driver.extraJavaOptions=-Dx", "/ok\n--master yarn"):
        with pytest.raises(CdcJobArgumentError):
            SnapshotArgs.build(source_format="debezium-json", input_paths=[value], output_path="/o", as_of=1)

"""CdcHistoryOperator: the history job it sends, and a real run under dag.test() (spark-submit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import airflow_env
from tests.operators.landed_customers import AS_OF, T0, operator_dag, run_conf

from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.hooks.cdc_replay import CdcReplayHook


@pytest.mark.slow
def test_history_task_writes_every_version_through_spark_submit(airflow_db, tmp_path, landed):
    """CdcHistoryOperator: the ``history`` job under spark-submit, its metrics as the XCom."""
    conf = run_conf(tmp_path, landed, output=str(tmp_path / "history"))
    dag_run = operator_dag("cdc_history_test").test(run_conf=conf)
    assert airflow_env.task_states(dag_run) == {"history": "success"}, Path(conf["report_file"]).read_text()
    metrics = airflow_env.xcom_return_value(dag_run, "history")
    output = Path(conf["output"])
    assert metrics == json.loads((output / "_cdc_metrics.json").read_text(encoding="utf-8"))
    assert (metrics["as_of"], metrics["rows"], metrics["versions"]) == (AS_OF, 1, 3)
    assert metrics["tables"]["default.customers"]["versions"] == 3

    import pyarrow.parquet as pq

    versions = pq.read_table(output / "default.customers").to_pylist()
    ms = {None: None} | {T0 + s * 1000: s for s in range(10)}
    assert sorted(
        (
            ms[int(v["_cdc_valid_from"].timestamp() * 1000)],
            v["_cdc_valid_to"] and ms[int(v["_cdc_valid_to"].timestamp() * 1000)],
            v["_cdc_op"],
            v["first_name"],
        )
        for v in versions
    ) == [(1, 3, "insert", "Anne"), (2, 4, "insert", "Sally"), (3, None, "update", "Anne Marie")]


def test_the_history_operator_sends_the_history_job(monkeypatch):
    from airflow_cdc_provider.operators.history import CdcHistoryOperator

    sent = []
    metrics = {"output": "file:/o", "as_of": AS_OF, "rows": 0, "versions": 0, "tables": {}}
    monkeypatch.setattr(
        CdcReplayHook, "run_snapshot", lambda hook, request: sent.append(request) or [metrics]
    )
    operator = CdcHistoryOperator(
        task_id="history", source_format="debezium-json", input_paths="/in", output_path="/o", until=AS_OF
    )
    assert "until" in operator.template_fields and "as_of" not in operator.template_fields
    assert (
        operator.execute({"outlet_events": {operator.output_asset: type("E", (), {"extra": {}})()}})
        == metrics
    )
    (request,) = sent
    assert request.to_argv()[:5] == ["history", "--format", "debezium-json", "--input", "/in"]
    assert request.to_argv()[5:9] == ["--until", AS_OF, "--output", "/o"]
    assert SnapshotArgs.from_argv(request.to_argv()) == request
    with pytest.raises(TypeError, match="CdcHistoryOperator takes until, not keep_state"):
        CdcHistoryOperator(
            task_id="h", source_format="debezium-json", input_paths="/in", output_path="/o", keep_state=True
        )

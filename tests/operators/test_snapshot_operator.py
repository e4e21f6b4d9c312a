"""CdcSnapshotOperator and CdcReplayHook: argument safety, defaults, and real runs under dag.test().

The dag.test() runs really call spark-submit (local[2]); each costs about 20 s, so there are two.
"""

from __future__ import annotations

import json
from pathlib import Path

import pendulum
import pytest

from tests import airflow_env
from airflow_cdc_provider.hooks.cdc_replay import (
    CdcJobArgumentError,
    CdcReplayHook,
    SnapshotRequest,
    SparkTarget,
)
from airflow_cdc_provider.operators.snapshot import CdcSnapshotOperator

T0 = 1725264000000  # 2024-09-02T08:00:00Z
AS_OF = "2024-09-02T08:00:05+00:00"


def lindorm(op: str, second: int, before: dict | None, after: dict | None) -> str:
    """A Lindorm SQL record shaped like the seed-000 samples ("schema": {}, payload wrapper)."""
    ts = T0 + second * 1000
    payload = {
        "op": op,
        "ts_ms": ts + 8,
        "before": before,
        "after": after,
        "source": {"version": "v1.0", "db": "ld-xxxx", "namespace": "default", "table": "customers", "ts_ms": ts},
    }
    return json.dumps({"schema": {}, "payload": payload})


ANNE = {"id": "1004", "first_name": "Anne", "last_name": "Kretchmar"}
SALLY = {"id": "1005", "first_name": "Sally", "last_name": "Thomas"}
ANNE_MARIE = {"id": "1004", "first_name": "Anne Marie", "last_name": "Kretchmar"}
GEORGE = {"id": "1006", "first_name": "George", "last_name": "Bailey"}


@pytest.fixture
def landed(tmp_path: Path) -> Path:
    """Two files; a key's events span both; a tombstone; one event after AS OF."""
    root = tmp_path / "landing"
    root.mkdir()
    (root / "a.jsonl").write_text(
        "\n".join([lindorm("c", 1, None, ANNE), lindorm("c", 2, None, SALLY), "null"]) + "\n", encoding="utf-8"
    )
    (root / "b.jsonl").write_text(
        "\n".join([lindorm("u", 3, ANNE, ANNE_MARIE), lindorm("d", 4, SALLY, None), lindorm("c", 10, None, GEORGE)])
        + "\n",
        encoding="utf-8",
    )
    return root


def run_conf(tmp_path: Path, landed: Path, **overrides) -> dict:
    conf = {
        "inputs": [str(landed / "a.jsonl"), str(landed / "b.jsonl")],
        "output": str(tmp_path / "snapshot"),
        "as_of": AS_OF,
        "key": ["id"],
        "tables": [],
        "report_file": str(tmp_path / "task_exception.txt"),
    }
    conf.update(overrides)
    return conf


def operator_dag(dag_id: str):
    bag = airflow_env.load_dags(airflow_env.OPERATOR_TEST_DAGS)
    assert bag.import_errors == {}
    return bag.get_dag(dag_id)


# ------------------------------------------------------------------------------------------------
# Argument list: exact, and impossible to inject into
# ------------------------------------------------------------------------------------------------


def test_argument_list_is_exact():
    request = SnapshotRequest.build(
        source_format="debezium-json",
        input_paths=["/lake/a", "s3a://lake/b/*.json"],
        output_path="/lake/out",
        as_of=pendulum.datetime(2024, 9, 2, 6, 40, tz="UTC"),
        key_columns=["id", "region"],
        tables="default.customers",
        on_error="fail",
        with_metadata=True,
    )
    assert request.application_args("/tmp/err.json") == [
        "--format", "debezium-json",
        "--input", "/lake/a",
        "--input", "s3a://lake/b/*.json",
        "--as-of", "2024-09-02T06:40:00+00:00",
        "--output", "/lake/out",
        "--key", "id,region",
        "--table", "default.customers",
        "--on-error", "fail",
        "--with-metadata",
        "--error-file", "/tmp/err.json",
    ]  # fmt: skip
    one_path = SnapshotRequest.build(
        source_format="debezium-json", input_paths="/lake/a", output_path="/o", as_of=1725259200000,
        key_columns={"db.orders": ["order_id", "line"], "db.items": "sku"},
    )
    assert one_path.application_args() == [
        "--format", "debezium-json", "--input", "/lake/a", "--as-of", "1725259200000", "--output", "/o",
        "--key", "db.orders=order_id,line", "--key", "db.items=sku", "--on-error", "quarantine",
    ]  # fmt: skip


GOOD = {
    "source_format": "debezium-json",
    "input_paths": ["/lake/a"],
    "output_path": "/lake/out",
    "as_of": "2024-09-02T06:40:00Z",
}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("input_paths", ["/lake/a", "--master=yarn"], "must not start with '-'"),
        ("output_path", "--conf spark.driver.extraJavaOptions=-Dx", "must not start with '-'"),
        ("output_path", "/lake/out\n--with-metadata", "line breaks"),
        ("key_columns", ["id", "-x"], "must not start with '-'"),
        ("key_columns", ["id,--table"], "single column names"),
        ("key_columns", {"db.t=x": "id"}, "must not contain '=' or ','"),
        ("key_columns", {"db.t": []}, "at least one column"),
        ("tables", ["db.t\r\n--on-error fail"], "line breaks"),
        ("as_of", "--as-of", "must not start with '-'"),
        ("as_of", "2024-09-02T06:40:00", "UTC offset"),
        ("as_of", "yesterday", "ISO-8601"),
        ("source_format", "debezium-json --master yarn", "unknown source_format"),
        ("on_error", "ignore", "on_error must be one of"),
        ("input_paths", [], "at least one path"),
        ("input_paths", [""], "must not be empty"),
    ],
)
def test_values_that_could_inject_options_are_refused(field, value, message):
    with pytest.raises(CdcJobArgumentError, match=message):
        SnapshotRequest.build(**{**GOOD, field: value})


def test_as_of_defaults_to_data_interval_end():
    captured = {}

    class RecordingHook:
        def run_snapshot(self, request):
            captured["request"] = request
            return {"rows": 0}

    op = CdcSnapshotOperator(
        task_id="snap", source_format="debezium-json", input_paths="/lake/a", output_path="/lake/out", as_of=""
    )
    op.__dict__["hook"] = RecordingHook()
    end = pendulum.datetime(2024, 9, 2, 0, 0, tz="UTC")
    assert op.execute({"data_interval_end": end, "logical_date": end.subtract(days=1)}) == {"rows": 0}
    assert captured["request"].as_of == "2024-09-02T00:00:00+00:00"
    assert set(CdcSnapshotOperator.template_fields) >= {"input_paths", "output_path", "as_of", "key_columns", "tables"}


def test_submit_conf_defaults_only_for_local_masters():
    hook = CdcReplayHook(spark_conf={"spark.executor.memory": "2g"})
    loopback = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    local_memory = {"spark.driver.memory": "2g"}
    assert hook.submit_conf(SparkTarget("local[2]")) == {"spark.executor.memory": "2g", **loopback, **local_memory}
    assert hook.submit_conf(SparkTarget("spark://127.0.0.1:7077")) == {"spark.executor.memory": "2g", **loopback}
    assert hook.submit_conf(SparkTarget("spark://cluster:7077")) == {"spark.executor.memory": "2g"}
    assert hook.submit_conf(SparkTarget("yarn", deploy_mode="cluster")) == {"spark.executor.memory": "2g"}
    own = CdcReplayHook(spark_conf={"spark.driver.host": "10.0.0.5", "spark.driver.memory": "6g"}).submit_conf(
        SparkTarget("local[*]")
    )
    assert own == {"spark.driver.host": "10.0.0.5", "spark.driver.memory": "6g", "spark.driver.bindAddress": "127.0.0.1"}


def test_metrics_are_read_through_object_storage_for_uris():
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/cdc-test-bucket/snap/_cdc_metrics.json", b'{"rows": 7}')
    assert CdcReplayHook.read_metrics("memory://cdc-test-bucket/snap") == {"rows": 7}


# ------------------------------------------------------------------------------------------------
# Real runs: dag.test() -> spark-submit local[2]
# ------------------------------------------------------------------------------------------------


def test_snapshot_task_returns_the_job_metrics(airflow_db, tmp_path, landed):
    conf = run_conf(tmp_path, landed)
    dag_run = operator_dag("cdc_operator_test").test(run_conf=conf)

    assert airflow_env.task_states(dag_run) == {"snapshot": "success"}
    metrics = airflow_env.xcom_return_value(dag_run, "snapshot")
    output = Path(conf["output"])
    assert metrics == json.loads((output / "_cdc_metrics.json").read_text(encoding="utf-8"))
    table_uri = f"file:{output}/default.customers"
    assert {k: metrics[k] for k in ("format", "as_of", "as_of_ms", "output", "rows", "events")} == {
        "format": "debezium-json",
        "as_of": AS_OF,
        "as_of_ms": T0 + 5000,
        "output": f"file:{output}",
        "rows": 1,
        "events": {"read": 6, "applied": 4, "after_as_of": 1, "ignored": 1, "duplicates": 0, "quarantined": 0},
    }
    customers = metrics["tables"]["default.customers"]
    assert list(metrics["tables"]) == ["default.customers"]
    assert {k: customers[k] for k in ("rows", "path", "inserts", "updates", "deletes", "last_event_ms")} == {
        "rows": 1, "path": table_uri, "inserts": 2, "updates": 1, "deletes": 1, "last_event_ms": T0 + 4000,
    }  # fmt: skip

    import pyarrow.parquet as pq

    rows = pq.read_table(output / "default.customers").to_pylist()
    assert rows == [ANNE_MARIE]


def test_failed_job_fails_the_task_with_the_job_message(airflow_db, tmp_path, landed):
    # No --key: plain Debezium values do not name their key, so the job must refuse, naming the table.
    conf = run_conf(tmp_path, landed, key=[])
    dag_run = operator_dag("cdc_operator_test").test(run_conf=conf)

    assert airflow_env.task_states(dag_run) == {"snapshot": "failed"}
    raised = Path(conf["report_file"]).read_text(encoding="utf-8")
    assert raised.startswith("CdcReplayJobError: cdc-replay job failed: MissingKeyError: no key for table(s) default.customers")
    assert "--key" in raised
    assert not Path(conf["output"]).exists()


def test_missing_connection_fails_the_task_clearly(airflow_db, tmp_path, landed):
    conf = run_conf(tmp_path, landed)
    dag_run = operator_dag("cdc_operator_missing_conn").test(run_conf=conf)

    assert airflow_env.task_states(dag_run) == {"snapshot": "failed"}
    raised = Path(conf["report_file"]).read_text(encoding="utf-8")
    assert raised.startswith(
        "SparkConnectionNotFoundError: Spark connection 'cdc_test_connection_that_does_not_exist' is not defined"
    )
    assert "YARN" in raised
    assert not Path(conf["output"]).exists()

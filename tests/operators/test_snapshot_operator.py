"""CdcSnapshotOperator and CdcReplayHook: argument safety, defaults, and real runs under dag.test().

The dag.test() runs really call spark-submit (local[2]); each costs about 20 s, so there are two,
plus one submission that is killed while it starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pendulum
import pytest

from tests import airflow_env

from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.contract.as_of import resolve_as_of
from airflow_cdc_provider.hooks.cdc_replay import (
    CdcJobArgumentError,
    CdcReplayHook,
    CdcReplayJobError,
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
        "source": {
            "version": "v1.0",
            "db": "ld-xxxx",
            "namespace": "default",
            "table": "customers",
            "ts_ms": ts,
        },
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
        "\n".join([lindorm("c", 1, None, ANNE), lindorm("c", 2, None, SALLY), "null"]) + "\n",
        encoding="utf-8",
    )
    (root / "b.jsonl").write_text(
        "\n".join(
            [lindorm("u", 3, ANNE, ANNE_MARIE), lindorm("d", 4, SALLY, None), lindorm("c", 10, None, GEORGE)]
        )
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
        "lineage_file": str(tmp_path / "lineage.json"),
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
    request = SnapshotArgs.build(
        source_format="debezium-json",
        input_paths=["/lake/a", "s3a://lake/b/*.json"],
        output_path="/lake/out",
        as_of=pendulum.datetime(2024, 9, 2, 6, 40, tz="UTC"),
        key_columns=["id", "region"],
        tables="default.customers",
        on_error="fail",
        with_metadata=True,
    )
    assert replace(request, error_file="/tmp/err.json").to_argv() == [
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
    one_path = SnapshotArgs.build(
        source_format="debezium-json",
        input_paths="/lake/a",
        output_path="/o",
        as_of=1725259200000,
        key_columns={"db.orders": ["order_id", "line"], "db.items": "sku"},
    )
    assert one_path.to_argv() == [
        "--format", "debezium-json", "--input", "/lake/a", "--as-of", "1725259200000", "--output", "/o",
        "--key", "db.orders=order_id,line", "--key", "db.items=sku", "--on-error", "quarantine",
    ]  # fmt: skip
    incremental = SnapshotArgs.build(
        source_format="canal-json",
        input_paths="/lake/a",
        output_path="/lake/2024-09-03",
        as_of=1725259200000,
        partitions="%Y/%m/%d",
        partition_timezone="Asia/Shanghai",
        lateness="2h",
        base_path="/lake/2024-09-02",
    )
    assert incremental.to_argv() == [
        "--format", "canal-json", "--input", "/lake/a", "--as-of", "1725259200000", "--output", "/lake/2024-09-03",
        "--on-error", "quarantine", "--partitions", "%Y/%m/%d", "--lateness", "2h",
        "--partition-timezone", "Asia/Shanghai", "--base", "/lake/2024-09-02",
    ]  # fmt: skip
    kept = SnapshotArgs.build(
        source_format="canal-json", input_paths="/a", output_path="/o", as_of=0, keep_state=True
    )
    assert kept.to_argv()[-1] == "--keep-state"


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
        ("base_path", "--master=yarn", "must not start with '-'"),
        ("lateness", "a while", "--lateness must be a duration such as 30m, 1h or 2d, not 'a while'"),
        ("partitions", "dt=%m-%d", "partition_pattern must be a relative strftime pattern containing %Y"),
        ("partition_timezone", "Moon/Base", "unknown partition_timezone 'Moon/Base'"),
    ],
)
def test_values_that_could_inject_options_are_refused(field, value, message):
    with pytest.raises(CdcJobArgumentError, match=message):
        SnapshotArgs.build(**{**GOOD, field: value})


def _executed(monkeypatch, written: list[dict], **arguments):
    """Run the operator with ``arguments``, stopping at the hook, which returns ``written``.

    Returns what ``execute`` returned, the request it would submit, the operator and the context.
    """
    from collections import defaultdict
    from types import SimpleNamespace

    sent = []
    monkeypatch.setattr(CdcReplayHook, "run_snapshot", lambda hook, request: sent.append(request) or written)
    operator = CdcSnapshotOperator(
        **{"output_path": "/o", "as_of": AS_OF, "key_columns": ["id"], **arguments}
    )
    context = {"outlet_events": defaultdict(lambda: SimpleNamespace(extra={}))}
    returned = operator.execute(context)
    (request,) = sent
    return returned, request, operator, context


def _request_sent(monkeypatch, **arguments) -> SnapshotArgs:
    """The request the operator would submit for ``arguments`` (one AS OF: its metrics are the XCom)."""
    metrics = {"output": "file:/o", "as_of": AS_OF, "rows": 0, "tables": {}}
    returned, request, _, _ = _executed(monkeypatch, [metrics], **arguments)
    assert returned == metrics
    return request


def test_the_operator_passes_table_columns_and_the_timestamp_column_to_the_job(monkeypatch):
    request = _request_sent(
        monkeypatch,
        task_id="dms",
        source_format="aws-dms",
        input_paths="/lake/dms",
        table_columns={"hr.employee": ["id", "name", "hired"]},
        timestamp_column="dms_ts",
    )
    assert {"table_columns", "timestamp_column"} <= set(CdcSnapshotOperator.template_fields)
    argv = request.to_argv()
    assert argv[argv.index("--columns") : argv.index("--columns") + 4] == [
        "--columns", "hr.employee=id,name,hired", "--timestamp-column", "dms_ts",
    ]  # fmt: skip


def test_the_operator_passes_whole_transactions_to_the_job(monkeypatch):
    request = _request_sent(
        monkeypatch,
        task_id="tx",
        source_format="debezium-json",
        input_paths="/lake/dbz",
        whole_transactions=True,
    )
    assert request.whole_transactions
    assert request.to_argv()[-1] == "--whole-transactions"


def test_the_operator_passes_unavailable_values_to_the_job(monkeypatch):
    request = _request_sent(
        monkeypatch,
        task_id="toast",
        source_format="debezium-json",
        input_paths="/lake/dbz",
        unavailable_values=["N/A", "hex:5f5f"],
    )
    assert "unavailable_values" in CdcSnapshotOperator.template_fields
    argv = request.to_argv()
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--unavailable-value"] == ["N/A", "hex:5f5f"]


def test_as_of_defaults_to_data_interval_end():
    end = pendulum.datetime(2024, 9, 2, 0, 0, tz="UTC")
    context = {"data_interval_end": end, "logical_date": end.subtract(days=1)}
    assert resolve_as_of("", context) == "2024-09-02T00:00:00+00:00"
    assert resolve_as_of(None, context) == "2024-09-02T00:00:00+00:00"
    assert (
        resolve_as_of(None, {"data_interval_end": None, "logical_date": end}) == "2024-09-02T00:00:00+00:00"
    )
    assert resolve_as_of("2024-09-01T06:00:00Z", context) == "2024-09-01T06:00:00Z"
    assert set(CdcSnapshotOperator.template_fields) >= {
        "input_paths",
        "output_path",
        "as_of",
        "key_columns",
        "tables",
    }


def test_submit_conf_defaults_only_for_local_masters():
    hook = CdcReplayHook(spark_conf={"spark.executor.memory": "2g"})
    quiet = {"spark.log.level": "WARN"}
    loopback = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    local_memory = {"spark.driver.memory": "2g"}
    this_python = {"spark.pyspark.python": sys.executable}
    user = {"spark.executor.memory": "2g"}
    assert hook.submit_conf(SparkTarget("local[2]")) == {**user, **quiet, **loopback, **local_memory}
    assert hook.submit_conf(SparkTarget("spark://127.0.0.1:7077")) == {
        **user,
        **quiet,
        **loopback,
        **this_python,
    }
    assert hook.submit_conf(SparkTarget("spark://cluster:7077")) == {**user, **quiet}
    assert hook.submit_conf(SparkTarget("spark://cluster:7077", deploy_mode="cluster")) == {
        **user,
        **quiet,
        "spark.standalone.submit.waitAppCompletion": "true",
    }
    assert hook.submit_conf(SparkTarget("yarn", deploy_mode="cluster")) == {**user, **quiet}
    own = CdcReplayHook(
        spark_conf={"spark.driver.host": "10.0.0.5", "spark.driver.memory": "6g", "spark.log.level": "ERROR"}
    ).submit_conf(SparkTarget("local[*]"))
    assert own == {
        "spark.driver.host": "10.0.0.5", "spark.driver.memory": "6g", "spark.log.level": "ERROR",
        "spark.driver.bindAddress": "127.0.0.1",
    }  # fmt: skip


def test_a_local_mode_driver_gets_the_jvm_options_ahead_of_the_users_own():
    hook = CdcReplayHook(spark_conf={"spark.driver.extraJavaOptions": "-Dmine=1"})
    quick = ["-XX:TieredStopAtLevel=1"]
    local = hook.submit_conf(SparkTarget("local[2]"), quick)
    assert local["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 -Dmine=1"
    cluster = hook.submit_conf(SparkTarget("spark://127.0.0.1:7077"), quick)
    assert cluster["spark.driver.extraJavaOptions"] == "-Dmine=1"
    assert "spark.driver.extraJavaOptions" not in CdcReplayHook().submit_conf(SparkTarget("local[2]"), [])


def test_driver_log_level_is_spark_log_level_unless_left_to_spark():
    target = SparkTarget("spark://cluster:7077")
    assert CdcReplayHook(driver_log_level="info").submit_conf(target) == {"spark.log.level": "INFO"}
    assert CdcReplayHook(driver_log_level=None).submit_conf(target) == {}
    for build in (
        lambda: CdcReplayHook(driver_log_level="quiet"),
        lambda: CdcSnapshotOperator(
            task_id="t",
            source_format="debezium-json",
            input_paths="/i",
            output_path="/o",
            driver_log_level="quiet",
        ),
    ):
        with pytest.raises(CdcJobArgumentError) as raised:
            build()
        assert (
            str(raised.value)
            == "driver_log_level must be one of ALL, DEBUG, ERROR, FATAL, INFO, OFF, TRACE, WARN, got 'quiet'"
        )


def test_submit_env_binds_spark_to_loopback_only_for_masters_on_this_machine(monkeypatch):
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    assert CdcReplayHook.submit_env(SparkTarget("local[2]"))["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert CdcReplayHook.submit_env(SparkTarget("spark://localhost:7077"))["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert "SPARK_LOCAL_IP" not in CdcReplayHook.submit_env(SparkTarget("yarn"))
    path = CdcReplayHook.submit_env(SparkTarget("yarn"))["PATH"].split(os.pathsep)
    assert path[0] == str(Path(sys.executable).parent)


def test_output_asset_is_the_stable_part_of_the_output_path():
    from airflow.sdk import DAG, Asset

    def asset_of(**kwargs) -> Asset:
        with DAG("cdc_asset_test", schedule=None):
            op = CdcSnapshotOperator(
                task_id="snap", source_format="debezium-json", input_paths="/lake/in", **kwargs
            )
        assert op.outlets == [op.output_asset]
        return op.output_asset

    assert (
        asset_of(output_path="s3a://lake/snapshots/customers/dt={{ ds }}").uri
        == "s3a://lake/snapshots/customers"
    )
    assert (
        asset_of(output_path="/lake/snapshots/customers/{{ ds }}/x").uri == "file:///lake/snapshots/customers"
    )
    assert asset_of(output_path="/lake/snapshots/customers").uri == "file:///lake/snapshots/customers"
    assert asset_of(output_path="{{ params.output }}").uri == "x-cdc-snapshot://cdc_asset_test/snap"
    assert (
        asset_of(output_path="/lake/s", output_asset=Asset("customers_snapshot")).name == "customers_snapshot"
    )
    assert asset_of(output_path="/lake/s", output_asset="gs://bucket/snap").uri == "gs://bucket/snap"


def test_the_operator_needs_no_openlineage_provider():
    """Parsing and building tasks never import OpenLineage; with its client missing, nothing breaks."""
    code = (
        "import sys\n"
        "sys.modules['openlineage'] = None  # as if the OpenLineage client were not installed\n"
        "from airflow.sdk import DAG\n"
        "from airflow_cdc_provider.operators.snapshot import CdcSnapshotOperator\n"
        "with DAG('d', schedule=None):\n"
        "    op = CdcSnapshotOperator(task_id='t', source_format='debezium-json', input_paths='/i', output_path='/o')\n"
        "loaded = [m for m in sys.modules if m.startswith('openlineage.') or m.startswith('airflow.providers.openlineage.')\n"
        "          and m != 'airflow.providers.openlineage.get_provider_info']\n"
        "print(op.get_openlineage_facets_on_complete(None), loaded)\n"
    )
    env = {**os.environ, "AIRFLOW_HOME": str(airflow_env.AIRFLOW_HOME)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "None []"


def test_metrics_are_read_through_object_storage_for_uris():
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/cdc-test-bucket/snap/_cdc_metrics.json", b'{"rows": 7}')
    assert CdcReplayHook.read_metrics("memory://cdc-test-bucket/snap") == {"rows": 7}


# ------------------------------------------------------------------------------------------------
# Real runs: dag.test() -> spark-submit local[2]
# ------------------------------------------------------------------------------------------------


def test_snapshot_task_returns_the_job_metrics(airflow_db, tmp_path, landed, capfd):
    conf = run_conf(tmp_path, landed)
    dag_run = operator_dag("cdc_operator_test").test(run_conf=conf)
    log = capfd.readouterr()

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
        "events": {
            "read": 6,
            "applied": 4,
            "after_as_of": 1,
            "ignored": 1,
            "duplicates": 0,
            "quarantined": 0,
        },
    }
    customers = metrics["tables"]["default.customers"]
    assert list(metrics["tables"]) == ["default.customers"]
    assert {k: customers[k] for k in ("rows", "path", "inserts", "updates", "deletes", "last_event_ms")} == {
        "rows": 1, "path": table_uri, "inserts": 2, "updates": 1, "deletes": 1, "last_event_ms": T0 + 4000,
    }  # fmt: skip

    import pyarrow.parquet as pq

    rows = pq.read_table(output / "default.customers").to_pylist()
    assert rows == [ANNE_MARIE]

    # The output asset's event carries the row counts.
    assert airflow_env.asset_event_extras("x-cdc-snapshot://cdc_operator_test/snapshot", dag_run.run_id) == [
        {"output": f"file:{output}", "as_of": AS_OF, "rows": 1, "tables": {"default.customers": 1}}
    ]

    # OpenLineage: the landed inputs, one output per table, its row count.
    lineage = json.loads(Path(conf["lineage_file"]).read_text(encoding="utf-8"))
    assert [(d["namespace"], d["name"]) for d in lineage["inputs"]] == [
        ("file", str(landed / "a.jsonl")),
        ("file", str(landed / "b.jsonl")),
    ]
    assert [
        (d["namespace"], d["name"], d["outputFacets"]["outputStatistics"]["rowCount"])
        for d in lineage["outputs"]
    ] == [("file", f"{output}/default.customers", 1)]

    # Spark's own INFO chatter stays out of the task log (driver_log_level WARN); the job's own lines stay.
    task_log = log.out + log.err
    assert "snapshot of 1 table(s) as of 2024-09-02T08:00:05+00:00 written to" in task_log
    assert [
        name
        for name in ("INFO SparkEnv:", "INFO BlockManager", "INFO Executor:", "INFO DAGScheduler:")
        if name in task_log
    ] == []


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


def test_failed_job_fails_the_task_with_the_job_message(airflow_db, tmp_path, landed):
    # No --key: plain Debezium values do not name their key, so the job must refuse, naming the table.
    conf = run_conf(tmp_path, landed, key=[])
    dag_run = operator_dag("cdc_operator_test").test(run_conf=conf)

    assert airflow_env.task_states(dag_run) == {"snapshot": "failed"}
    raised = Path(conf["report_file"]).read_text(encoding="utf-8")
    assert raised.startswith(
        "CdcReplayJobError: cdc-replay job failed: MissingKeyError: no key for table(s) default.customers"
    )
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


def processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every live process (zombies are gone: only unreaped)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state, parent_text = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
                if state == "Z":
                    continue
                parent = int(parent_text)
                table[int(entry.name)] = (
                    parent,
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(),
                )
            except (OSError, ValueError):
                continue
    return table


def running_submission() -> tuple[int, int] | None:
    """(spark-submit JVM, job's Python driver) started by this process, once both are up."""
    table = processes()
    jvms = [
        pid for pid, (parent, cmd) in table.items() if parent == os.getpid() and "java" in cmd.split(" ")[0]
    ]
    drivers = [pid for pid, (parent, cmd) in table.items() if parent in jvms and "spark_app.py" in cmd]
    # The driver's own JVM: the test session's SparkSession JVM is a java child of this process too.
    return (table[drivers[0]][0], drivers[0]) if drivers else None


def test_on_kill_stops_the_running_submission(tmp_path, landed):
    operator = CdcSnapshotOperator(
        task_id="snapshot", source_format="debezium-json", input_paths=str(landed),
        output_path=str(tmp_path / "snapshot"), as_of=AS_OF, key_columns=["id"],
    )  # fmt: skip
    raised: list[BaseException] = []

    def execute() -> None:
        try:
            operator.execute({})
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            raised.append(exc)

    worker = threading.Thread(target=execute)
    worker.start()
    deadline = time.monotonic() + 120
    while (started := running_submission()) is None and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert started, "the job's driver never started"

    operator.on_kill()
    worker.join(timeout=60)

    assert not worker.is_alive()
    assert [type(exc) for exc in raised] == [CdcReplayJobError]
    assert str(raised[0]).startswith(
        "cdc-replay job failed without writing an error report: Cannot execute: spark-submit"
    )
    assert "Error code is: -9." in str(raised[0])
    assert set(started) & set(processes()) == set()  # on_kill stops the driver too, not only spark-submit
    assert not (tmp_path / "snapshot").exists()


def test_a_list_of_as_ofs_returns_every_snapshots_metrics_and_lineage(monkeypatch):
    """One task, several AS OFs: the XCom, the asset event and OpenLineage name every folder written."""

    def metrics(day: str, rows: int) -> dict:
        return {
            "output": f"file:/snap/dt={day}",
            "as_of": f"{day}T00:00:00+00:00",
            "rows": rows,
            "tables": {"db.t": {"rows": rows, "path": f"file:/snap/dt={day}/db.t"}},
        }

    written = [metrics("2024-09-02", 3), metrics("2024-09-03", 4)]
    returned, request, operator, context = _executed(
        monkeypatch,
        written,
        task_id="range",
        source_format="debezium-json",
        input_paths="/lake",
        output_path="/snap/dt={as_of:%Y-%m-%d}",
        as_of=["2024-09-02T00:00:00Z", "2024-09-03T00:00:00Z"],
        key_columns="id",
    )
    assert operator.output_asset.uri == "file:///snap"
    assert returned == written
    assert request.snapshots() == [
        ("2024-09-02T00:00:00Z", "/snap/dt=2024-09-02"),
        ("2024-09-03T00:00:00Z", "/snap/dt=2024-09-03"),
    ]
    assert context["outlet_events"][operator.output_asset].extra == {
        "snapshots": [
            {"output": "file:/snap/dt=2024-09-02", "as_of": "2024-09-02T00:00:00+00:00", "rows": 3, "tables": {"db.t": 3}},
            {"output": "file:/snap/dt=2024-09-03", "as_of": "2024-09-03T00:00:00+00:00", "rows": 4, "tables": {"db.t": 4}},
        ]
    }  # fmt: skip
    lineage = operator.get_openlineage_facets_on_complete(None)
    assert [(d.namespace, d.name, d.outputFacets["outputStatistics"].rowCount) for d in lineage.outputs] == [
        ("file", "/snap/dt=2024-09-02/db.t", 3),
        ("file", "/snap/dt=2024-09-03/db.t", 4),
    ]

"""CdcSnapshotOperator: the job it sends, its asset and lineage, and real runs under dag.test().

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
from pathlib import Path

import pendulum
import pytest

from tests import airflow_env
from tests.operators.landed_customers import ANNE_MARIE, AS_OF, T0, operator_dag, run_conf

from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.contract.as_of import resolve_as_of
from airflow_cdc_provider.hooks.cdc_replay import CdcReplayHook, CdcReplayJobError
from airflow_cdc_provider.operators.snapshot import CdcSnapshotOperator


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


# ------------------------------------------------------------------------------------------------
# Real runs: dag.test() -> spark-submit local[2]
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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

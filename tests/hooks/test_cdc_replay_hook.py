"""CdcReplayHook: the argument list it submits, the Spark properties and environment of the
submission, and reading the metrics back. No Spark runs here; the operator tests submit for real.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pendulum
import pytest

from tests import airflow_env  # noqa: F401 - sets Airflow's home before anything imports airflow

from airflow_cdc_provider.contract import jvm
from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.hooks.cdc_replay import (
    CdcJobArgumentError,
    CdcReplayHook,
    SparkTarget,
    UnsupportedDeployModeError,
)
from airflow_cdc_provider.operators.snapshot import CdcSnapshotOperator

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


# ------------------------------------------------------------------------------------------------
# spark-submit: Spark properties, environment, metrics
# ------------------------------------------------------------------------------------------------


def test_submit_conf_defaults_only_for_local_masters():
    hook = CdcReplayHook(spark_conf={"spark.executor.memory": "2g"})
    quiet = {"spark.log.level": "WARN"}
    loopback = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    local_memory = {"spark.driver.memory": "2g"}
    this_python = {"spark.pyspark.python": sys.executable}
    user = {"spark.executor.memory": "2g"}
    # A driver on the Airflow worker (client mode) gets the package's log4j profile.
    profile = {"spark.driver.extraJavaOptions": jvm.log4j_java_option()}
    assert hook.submit_conf(SparkTarget("local[2]")) == {
        **user,
        **quiet,
        **loopback,
        **local_memory,
        **profile,
    }
    assert hook.submit_conf(SparkTarget("spark://127.0.0.1:7077")) == {
        **user,
        **quiet,
        **loopback,
        **this_python,
        **profile,
    }
    assert hook.submit_conf(SparkTarget("spark://cluster:7077")) == {**user, **quiet, **profile}
    assert hook.submit_conf(SparkTarget("yarn", deploy_mode="cluster")) == {**user, **quiet}
    own = CdcReplayHook(
        spark_conf={"spark.driver.host": "10.0.0.5", "spark.driver.memory": "6g", "spark.log.level": "ERROR"}
    ).submit_conf(SparkTarget("local[*]"))
    assert own == {
        "spark.driver.host": "10.0.0.5", "spark.driver.memory": "6g", "spark.log.level": "ERROR",
        "spark.driver.bindAddress": "127.0.0.1", **profile,
    }  # fmt: skip


STANDALONE_CLUSTER_MODE = (
    "Spark connection 'spark_standalone' submits to the standalone master spark://spark-master.internal:7077 "
    "in cluster deploy mode. Standalone clusters do not run Python applications in cluster deploy mode: "
    'spark-submit refuses them ("Cluster deploy mode is currently not supported for python applications '
    'on standalone clusters"), and the cdc-replay job is one. Use client deploy mode on a standalone '
    'cluster (drop "deploy-mode": "cluster" from the connection\'s extra and spark.submit.deployMode from '
    "spark_conf; the driver then runs on the Airflow worker), or cluster deploy mode on YARN or Kubernetes."
)


@pytest.mark.parametrize(
    ("extra", "spark_conf"),
    [({"deploy-mode": "cluster"}, {}), ({}, {"spark.submit.deployMode": "cluster"})],
)
def test_standalone_cluster_deploy_mode_is_refused_before_submitting(monkeypatch, extra, spark_conf):
    connection = {"conn_type": "spark", "host": "spark://spark-master.internal", "port": 7077, "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_STANDALONE", json.dumps(connection))
    monkeypatch.setenv("PATH", "")  # nothing could be submitted: the refusal comes first
    hook = CdcReplayHook(conn_id="spark_standalone", spark_conf=spark_conf)
    request = SnapshotArgs.build(**GOOD)
    with pytest.raises(UnsupportedDeployModeError) as refused:
        hook.run_snapshot(request)
    assert str(refused.value) == STANDALONE_CLUSTER_MODE


def test_the_deploy_modes_that_work_are_accepted(monkeypatch):
    for host, extra, conf, mode in [
        ("spark://spark-master.internal:7077", {}, {}, None),
        ("spark://spark-master.internal:7077", {"deploy-mode": "client"}, {}, "client"),
        # The connection's deploy mode wins over spark_conf's, as on spark-submit's command line.
        (
            "spark://spark-master.internal:7077",
            {"deploy-mode": "client"},
            {"spark.submit.deployMode": "cluster"},
            "client",
        ),
        ("yarn", {"deploy-mode": "cluster"}, {}, "cluster"),
        ("k8s://https://kubernetes.default.svc:443", {}, {"spark.submit.deployMode": "cluster"}, "cluster"),
    ]:
        connection = {"conn_type": "spark", "host": host, "extra": extra}
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_TARGET", json.dumps(connection))
        target = CdcReplayHook(conn_id="spark_target", spark_conf=conf).spark_target()
        assert (target.master, target.deploy_mode) == (host, mode)


def test_a_local_mode_driver_gets_the_jvm_options_ahead_of_the_users_own():
    hook = CdcReplayHook(spark_conf={"spark.driver.extraJavaOptions": "-Dmine=1"})
    quick = ["-XX:TieredStopAtLevel=1"]
    local = hook.submit_conf(SparkTarget("local[2]"), quick)
    profile = jvm.log4j_java_option()
    assert local["spark.driver.extraJavaOptions"] == f"{profile} -XX:TieredStopAtLevel=1 -Dmine=1"
    cluster = hook.submit_conf(SparkTarget("spark://127.0.0.1:7077"), quick)
    assert cluster["spark.driver.extraJavaOptions"] == f"{profile} -Dmine=1"
    on_yarn = hook.submit_conf(SparkTarget("yarn", deploy_mode="cluster"), quick)
    assert on_yarn["spark.driver.extraJavaOptions"] == "-Dmine=1"  # the driver is not on this machine
    assert (
        CdcReplayHook().submit_conf(SparkTarget("local[2]"), [])["spark.driver.extraJavaOptions"] == profile
    )


def test_driver_log_level_is_spark_log_level_unless_left_to_spark():
    target = SparkTarget("spark://cluster:7077")
    profile = {"spark.driver.extraJavaOptions": jvm.log4j_java_option()}
    assert CdcReplayHook(driver_log_level="info").submit_conf(target) == {
        "spark.log.level": "INFO",
        **profile,
    }
    assert CdcReplayHook(driver_log_level=None).submit_conf(target) == profile
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


def test_metrics_are_read_through_object_storage_for_uris():
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/cdc-test-bucket/snap/_cdc_metrics.json", b'{"rows": 7}')
    assert CdcReplayHook.read_metrics("memory://cdc-test-bucket/snap") == {"rows": 7}

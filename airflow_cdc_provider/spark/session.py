"""The one place a SparkSession is configured for the replay job and the tests."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import SparkSession

from airflow_cdc_provider.contract import jvm
from airflow_cdc_provider.contract.args import DEFAULT_MASTER

# Settings the replay relies on, whatever the master.
_JOB_CONF = {
    # Event times and AS OF are instants: keep Spark's rendering of them in UTC.
    "spark.sql.session.timeZone": "UTC",
    # Shuffle partitions sized to the data, not a fixed 200.
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # This rule copies a generator's input expression into an inferred filter pushed below it;
    # over decoder expressions that made plans grow from kilobytes to tens of megabytes.
    "spark.sql.optimizer.excludedRules": "org.apache.spark.sql.catalyst.optimizer.InferFiltersFromGenerate",
    # The fold's aggregation runs on rows its window already sorted by key: a sort-based aggregate
    # uses that order, where the object hash aggregate re-sorts everything once it passes 128 keys.
    "spark.sql.execution.useObjectHashAggregateExec": "false",
    # PySpark records the Python call site of every column function for error contexts, at ten
    # JVM round trips a call; a run builds its plans from tens of thousands of such calls, which
    # cost seconds on every run whatever the input size. The job's errors carry their own text.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # Its default is "false unless testing", worked out from an environment variable each time it
    # is read, and Spark 4.2 reads it for every value an interpreted expression (a lambda) takes
    # out of an array or map: about a sixth of Canal's decoding went there. Same value, stated.
    "spark.sql.types.framework.enabled": "false",
}
# Only for an embedded local master: this machine's host name does not resolve to loopback.
_LOCAL_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "2g",
}


def session_conf(
    master: str | None, extra_conf: dict[str, str] | None = None, java_options: Sequence[str] | None = None
) -> dict[str, str]:
    """The properties a session starts with: the job's, a local master's, then ``extra_conf``.

    An embedded local driver's JVM gets ``java_options`` ahead of any ``spark.driver.extraJavaOptions``
    in ``extra_conf``; None means ``jvm.java_options(small_input=False)``: the class archive, when
    one is built.
    """
    conf = dict(_JOB_CONF)
    extra = dict(extra_conf or {})
    if master is not None and master.startswith("local"):
        conf.update(_LOCAL_CONF)
        if java_options is None:
            java_options = jvm.java_options(small_input=False)
        merged = jvm.merged_java_options(java_options, extra.pop(jvm.JAVA_OPTIONS_CONF, None))
        if merged:
            conf[jvm.JAVA_OPTIONS_CONF] = merged
    conf.update(extra)
    return conf


def build_session(
    master: str | None = None,
    app_name: str = "cdc-replay",
    extra_conf: dict[str, str] | None = None,
    java_options: Sequence[str] | None = None,
) -> SparkSession:
    """Return the session for a replay run.

    ``master=None`` means "whatever spark-submit configured", falling back to ``local[*]`` when
    the job runs as a plain Python process. ``extra_conf`` and ``java_options``: see ``session_conf``.
    """
    import os
    import sys

    # Python workers (Avro decoding) must run this interpreter, which has the package and its
    # dependencies; PySpark reads only the environment variable, before the context starts.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    # Under spark-submit the JVM that launched this process already holds spark.master and the
    # application name (PySpark sets PYSPARK_GATEWAY_PORT for it). They cannot be read before the
    # context starts (a SparkConf made now is empty), so both are left to it: naming a master here
    # would override spark-submit's and run a cluster submission in local mode.
    under_spark_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    effective = master or (None if under_spark_submit else DEFAULT_MASTER)
    builder = SparkSession.builder if under_spark_submit else SparkSession.builder.appName(app_name)
    if effective is not None:
        builder = builder.master(effective)
    for key, value in session_conf(effective, extra_conf, java_options).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    # spark.log.level (e.g. from the operator's driver_log_level) is the submitter's choice; keep it.
    if not session.sparkContext.getConf().contains("spark.log.level"):
        session.sparkContext.setLogLevel("WARN")
    return session

"""The one place a SparkSession is configured for the replay job and the tests.

Unless asked to be ``verbose``, a session keeps Spark's start-up noise off the job's stderr: an
embedded driver's JVM starts with the package's log4j2 profile (``log4j2.properties`` beside this
module) and its stderr passes through a filter for the lines no log4j setting reaches
(``_JVM_NOISE``); PySpark's pandas-version warning and py4j's connection lines stay out too.
Spark's console progress bar stays off everywhere: the job draws its own (``spark.progress``).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import warnings
from collections.abc import Sequence
from typing import IO

from pyspark.sql import SparkSession

from airflow_cdc_provider.contract import jvm
from airflow_cdc_provider.contract.args import DEFAULT_MASTER

_log = logging.getLogger(__name__)

# Lines the JVM writes to its stderr before log4j is in charge, which no log4j setting reaches:
# the JDK's notice for the incubator module Spark's launcher adds (--add-modules).
_JVM_NOISE = (re.compile(r"WARNING: Using incubator modules: "),)

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
    # The job reports its own progress (spark.progress); Spark's bar would draw over its lines,
    # and under spark-submit fill the task log with carriage returns.
    "spark.ui.showConsoleProgress": "false",
}
# Only for an embedded local master: this machine's host name does not resolve to loopback.
_LOCAL_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.memory": jvm.LOCAL_DRIVER_MEMORY,
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


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (no JVM in this process: no py4j, no sparkContext)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def build_session(
    master: str | None = None,
    app_name: str = "cdc-replay",
    extra_conf: dict[str, str] | None = None,
    java_options: Sequence[str] | None = None,
    remote: str | None = None,
    verbose: bool = False,
) -> SparkSession:
    """Return the session for a replay run.

    ``remote`` (``sc://HOST:PORT/;token=...``) connects to a Spark Connect server and sets the job's
    runtime settings on that session. Otherwise ``master=None`` means "whatever spark-submit
    configured", falling back to ``local[*]`` when the job runs as a plain Python process.
    ``extra_conf`` and ``java_options``: see ``session_conf``. ``verbose`` leaves Spark's own
    logging as Spark sets it up (its default log4j profile, the JVM's start-up lines, PySpark's
    warnings); otherwise they are kept out (module docstring).
    """
    if not verbose:
        _keep_python_noise_out()
    if remote:
        return connect_session(remote, extra_conf)
    return _classic_session(master, app_name, extra_conf, java_options, verbose)


def connect_session(remote: str, extra_conf: dict[str, str] | None = None) -> SparkSession:
    """A Spark Connect session with the job's settings.

    The server's static settings (memory, master) are the server's own; the runtime SQL settings
    the replay relies on are set on this session. One the server will not change is left as it is:
    they tune plans, the results do not depend on them.
    """
    import os

    from pyspark.errors import PySparkException
    from pyspark.sql.connect.shell import PROGRESS_BAR_ENABLED

    # The Connect client's own bar writes to stdout, which carries the job's metrics.
    os.environ[PROGRESS_BAR_ENABLED] = "0"
    session = SparkSession.builder.remote(remote).getOrCreate()
    for key, value in {**_JOB_CONF, **(extra_conf or {})}.items():
        try:
            session.conf.set(key, value)
        except PySparkException as exc:
            _log.debug("Spark Connect server keeps %s: %s", key, exc)
    return session


def _classic_session(
    master: str | None,
    app_name: str,
    extra_conf: dict[str, str] | None,
    java_options: Sequence[str] | None,
    verbose: bool = False,
) -> SparkSession:
    import os

    # Python workers (Avro decoding) must run this interpreter, which has the package and its
    # dependencies; PySpark reads only the environment variable, before the context starts.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    # Under spark-submit the JVM that launched this process already holds spark.master and the
    # application name (PySpark sets PYSPARK_GATEWAY_PORT for it). They cannot be read before the
    # context starts (a SparkConf made now is empty), so both are left to it: naming a master here
    # would override spark-submit's and run a cluster submission in local mode.
    under_spark_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    # PySpark's builder goes remote whenever SPARK_REMOTE is set; a classic session was asked for.
    os.environ.pop("SPARK_REMOTE", None)
    effective = master or (None if under_spark_submit else DEFAULT_MASTER)
    embedded_quiet = not under_spark_submit and not verbose
    if embedded_quiet:
        extra_conf = with_quiet_log4j(extra_conf)
    options = session_conf(effective, extra_conf, java_options)
    if not under_spark_submit:
        options = {"spark.app.name": app_name, **options}
    if effective is not None:
        options = {"spark.master": effective, **options}
    if embedded_quiet:
        _start_quiet_jvm(options)
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    # spark.log.level (e.g. from the operator's driver_log_level) is the submitter's choice; keep it.
    if not session.sparkContext.getConf().contains("spark.log.level"):
        session.sparkContext.setLogLevel("WARN")
    return session


def with_quiet_log4j(extra_conf: dict[str, str] | None) -> dict[str, str]:
    """``extra_conf`` with ``log4j_java_option`` ahead of its own driver Java options (a caller's
    own ``-Dlog4j2.configurationFile`` comes later and wins)."""
    extra = dict(extra_conf or {})
    extra[jvm.JAVA_OPTIONS_CONF] = jvm.merged_java_options(
        [jvm.log4j_java_option()], extra.get(jvm.JAVA_OPTIONS_CONF)
    )
    return extra


def _start_quiet_jvm(options: dict[str, str]) -> None:
    """Start the embedded driver's JVM as PySpark's builder would, with ``options``, but with its
    stderr read through ``_copy_jvm_stderr``; the builder then finds it running. Nothing when a
    JVM is already running in this process."""
    from subprocess import PIPE

    from pyspark import SparkConf
    from pyspark.core.context import SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        # PySpark's launcher passes each property of the (JVM-less) conf to spark-submit.
        gateway = launch_gateway(SparkConf().setAll(list(options.items())), popen_kwargs={"stderr": PIPE})
        threading.Thread(
            target=_copy_jvm_stderr, args=(gateway.proc.stderr,), name="jvm-stderr", daemon=True
        ).start()
        SparkContext._ensure_initialized(gateway=gateway)


def _copy_jvm_stderr(stream: IO[bytes]) -> None:
    """The JVM's stderr, line by line, to this process's ``sys.stderr`` as it is at that line (a
    progress display may have redirected it), without the lines of ``_JVM_NOISE``."""
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace")
        if any(pattern.match(line) for pattern in _JVM_NOISE):
            continue
        try:
            sys.stderr.write(line)
            sys.stderr.flush()
        except (OSError, ValueError):  # closed while the process exits
            return


def _keep_python_noise_out() -> None:
    """PySpark's warning about a pandas release it does not test against (the package pins the
    range it supports; the warning would still come with one installed against that pin) and
    py4j's connection lines at exit."""
    warnings.filterwarnings(
        "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)

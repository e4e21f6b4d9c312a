"""Submit the ``cdc-replay`` snapshot job with spark-submit and read back what it wrote.

The hook owns every piece of I/O the operator needs: the Spark connection, the spark-submit call
(through the apache-spark provider's ``SparkSubmitHook``), the job's error file and the
``_cdc_metrics.json`` it writes. The argument list is built as a list, never a shell string, and
every value is checked so that nothing a template renders can turn into a spark-submit or job
option.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowNotFoundException

from airflow_cdc_provider.contract import jvm
from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.contract.checks import CdcJobArgumentError
from airflow_cdc_provider.contract.metrics import METRICS_FILE
from airflow_cdc_provider.contract.package_zip import package_zip
from airflow_cdc_provider.contract.paths import is_local_path, local_path

# Spark property naming each submission, so on_kill finds its processes among this one's.
SUBMISSION_TOKEN_CONF = "spark.cdc.submission"
_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
# Levels Spark's spark.log.level accepts (log4j's).
LOG_LEVELS = ("ALL", "DEBUG", "ERROR", "FATAL", "INFO", "OFF", "TRACE", "WARN")
DEFAULT_DRIVER_LOG_LEVEL = "WARN"
# Connection extra that turns off shipping this package to a cluster (``"ship-package": false``).
SHIP_PACKAGE_EXTRA = "ship-package"
PY_FILES_CONF = "spark.submit.pyFiles"
DEPLOY_MODE_CONF = "spark.submit.deployMode"


def _descendants_of_submission(token: str) -> list[Any]:
    """Every live process started by the spark-submit whose command line carries ``token``.

    The submission is one of this process's own descendants, found by the unique property the
    hook put on its command line: no private attribute of the Spark provider is read.
    """
    import psutil

    found: list[Any] = []
    for process in psutil.Process().children(recursive=True):
        try:
            if any(token in part for part in process.cmdline()):
                found.extend(process.children(recursive=True))
        except psutil.Error:
            continue
    return found


def _stop_processes(processes: list[Any], grace_seconds: float = 5.0) -> None:
    """SIGTERM, then SIGKILL whatever is still running after ``grace_seconds``; wait for the end."""
    import psutil

    for process in processes:
        try:
            process.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(processes, timeout=grace_seconds)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(
        alive, timeout=grace_seconds
    )  # a process in a blocking system call dies when it returns


class SparkConnectionNotFoundError(AirflowNotFoundException):
    """The Spark connection is missing; without it the Spark provider would submit to YARN."""


class CdcReplayJobError(AirflowException):
    """The snapshot job ran and failed; the message is the job's own error."""


class UnsupportedDeployModeError(AirflowFailException):
    """The connection asks for a deploy mode Spark refuses for this (Python) job; retrying cannot help."""


def standalone_cluster_mode_message(conn_id: str, master: str) -> str:
    """Why a standalone master in cluster deploy mode is refused before submitting, and what works."""
    return (
        f"Spark connection {conn_id!r} submits to the standalone master {master} in cluster deploy "
        f"mode. Standalone clusters do not run Python applications in cluster deploy mode: spark-submit "
        f'refuses them ("Cluster deploy mode is currently not supported for python applications on '
        f'standalone clusters"), and the cdc-replay job is one. Use client deploy mode on a standalone '
        f'cluster (drop "deploy-mode": "cluster" from the connection\'s extra and {DEPLOY_MODE_CONF} from '
        f"spark_conf; the driver then runs on the Airflow worker), or cluster deploy mode on YARN or "
        f"Kubernetes."
    )


def _flag(value: Any, what: str) -> bool:
    """A boolean from a connection extra, which may hold JSON ``true``/``false`` or a string."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise CdcJobArgumentError(f"{what} must be true or false, got {value!r}")


def application_path() -> str:
    """Local path of the spark-submit application file shipped with this package (``jobs/spark_app.py``).

    Found beside this module rather than imported: the hook runs where the job's layers (and
    PySpark) need not be loaded.
    """
    return str(Path(__file__).resolve().parents[1] / "jobs" / "spark_app.py")


def normalise_log_level(level: str | None) -> str | None:
    """A Spark log level in upper case (``None`` stays None: Spark's default)."""
    if level is None:
        return None
    if not isinstance(level, str) or level.upper() not in LOG_LEVELS:
        raise CdcJobArgumentError(f"driver_log_level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    return level.upper()


@dataclass(frozen=True)
class SparkTarget:
    """What the hook needs to know about the Spark connection besides what SparkSubmitHook reads."""

    master: str
    deploy_mode: str | None = None
    ship_package: bool = True  # the connection's "ship-package" extra

    @property
    def is_local_master(self) -> bool:
        """``local``, ``local[N]``, ``local[*]``...: driver and executors are this process's machine."""
        return self.master.startswith("local")

    @property
    def is_standalone(self) -> bool:
        """A Spark standalone master (``spark://HOST:PORT``, several hosts for high availability)."""
        return self.master.startswith("spark://")

    @property
    def driver_is_local(self) -> bool:
        """True when the driver runs in this process's machine (client or local mode)."""
        return self.deploy_mode != "cluster"

    @property
    def is_loopback(self) -> bool:
        """A local[...] master, or a cluster master listening on this machine's loopback."""
        if self.is_local_master:
            return True
        return (urlsplit(self.master).hostname or "") in _LOOPBACK_HOSTS


def connection_type(conn_id: str) -> str | None:
    """The type of Airflow connection ``conn_id`` (``spark``, ``spark_connect``...); None when undefined."""
    try:
        return BaseHook.get_connection(conn_id).conn_type
    except AirflowNotFoundException:
        return None


def spark_target_from_connection(conn: Any) -> SparkTarget:
    """Derive the master URL the Spark provider will use from a ``spark`` connection."""
    host = conn.host or ""
    if conn.conn_type == "spark" and host and ("://" in host or not conn.port):
        master = host
    else:
        master = f"{conn.conn_type}://{host}"
    if conn.port:
        master = f"{master}:{conn.port}"
    extra = conn.extra_dejson or {}
    return SparkTarget(
        master=master,
        deploy_mode=extra.get("deploy-mode"),
        ship_package=_flag(extra.get(SHIP_PACKAGE_EXTRA, True), f"the {SHIP_PACKAGE_EXTRA!r} extra"),
    )


class CdcReplayHook(BaseHook):
    """Run the snapshot job through spark-submit and return its metrics.

    :param conn_id: Airflow connection of type ``spark`` giving the master (``local[*]``,
        ``spark://host:7077``, ``yarn``, ``k8s://...``) and optional deploy mode.
    :param spark_conf: extra Spark properties passed as ``--conf key=value``.
    :param name: spark-submit application name.
    :param driver_log_level: the driver's Spark log level (``spark.log.level``): spark-submit's
        output is the task log, and at Spark's default INFO it is mostly Spark's own start-up
        chatter. ``None`` leaves Spark's default.
    :param ship_package: for a master that is not ``local[...]``, send a zip of this installed
        package with the submission (``--py-files``), so executors (and a cluster-mode driver)
        whose Python lacks it can run the job. ``None`` (default): the connection's
        ``ship-package`` extra decides, and without it the package is shipped. Never added when
        ``spark_conf`` sets ``spark.submit.pyFiles``: the user's own files are kept as they are.
    """

    conn_name_attr = "conn_id"
    default_conn_name = "spark_default"
    conn_type = "spark"
    hook_name = "CDC Replay"

    def __init__(
        self,
        conn_id: str = default_conn_name,
        spark_conf: Mapping[str, Any] | None = None,
        name: str = "cdc-replay",
        driver_log_level: str | None = DEFAULT_DRIVER_LOG_LEVEL,
        ship_package: bool | None = None,
    ) -> None:
        super().__init__()
        self.conn_id = conn_id
        self.spark_conf = dict(spark_conf or {})
        self.name = name
        self.driver_log_level = normalise_log_level(driver_log_level)
        self.ship_package = ship_package
        self._submit_hook: Any = None
        self._submission_token: str | None = None

    def spark_target(self) -> SparkTarget:
        """The Spark target; fails clearly instead of letting spark-submit default to YARN.

        The deploy mode is the connection's, else ``spark.submit.deployMode`` from ``spark_conf``
        (spark-submit's own order). A standalone master in cluster deploy mode is refused here,
        before anything is submitted: Spark would refuse it anyway, with a message that does not
        say what to do instead.
        """
        try:
            conn = self.get_connection(self.conn_id)
        except AirflowNotFoundException:
            raise SparkConnectionNotFoundError(
                f"Spark connection {self.conn_id!r} is not defined, so the snapshot job has nowhere "
                f"to run (the Spark provider would silently submit to YARN). Create it, e.g. "
                f'AIRFLOW_CONN_{self.conn_id.upper()}=\'{{"conn_type":"spark","host":"local[*]"}}\' '
                f"for local mode, or host spark://HOST:7077 / yarn / k8s://... for a cluster."
            ) from None
        target = spark_target_from_connection(conn)
        if target.deploy_mode is None and DEPLOY_MODE_CONF in self.spark_conf:
            target = replace(target, deploy_mode=str(self.spark_conf[DEPLOY_MODE_CONF]))
        if target.is_standalone and target.deploy_mode == "cluster":
            raise UnsupportedDeployModeError(standalone_cluster_mode_message(self.conn_id, target.master))
        return target

    def submit_conf(self, target: SparkTarget, java_options: Sequence[str] = ()) -> dict[str, str]:
        """Spark properties for the submission: the user's, plus defaults for this machine's masters.

        ``java_options`` (``jvm.java_options_for`` the job's inputs) go to a local-mode driver's JVM,
        ahead of the user's own ``spark.driver.extraJavaOptions``.
        """
        conf = {str(k): str(v) for k, v in self.spark_conf.items()}
        if self.driver_log_level:
            conf.setdefault("spark.log.level", self.driver_log_level)
        if target.is_loopback and target.driver_is_local:
            # This machine's host name may not resolve to its loopback address.
            conf.setdefault("spark.driver.host", "127.0.0.1")
            conf.setdefault("spark.driver.bindAddress", "127.0.0.1")
        driver_options = []
        if target.driver_is_local:
            # The driver's output is the task log: the package's log4j profile keeps Spark's
            # start-up warnings out of it (a log4j2.configurationFile in spark_conf comes later and wins).
            driver_options.append(jvm.log4j_java_option())
        if target.is_local_master:
            # In local mode the driver JVM does all the work; spark-submit starts it before the job
            # can configure anything, so the embedded session's default (jvm.LOCAL_DRIVER_MEMORY) goes here.
            conf.setdefault("spark.driver.memory", jvm.LOCAL_DRIVER_MEMORY)
            driver_options.extend(java_options)
        merged = jvm.merged_java_options(driver_options, conf.get(jvm.JAVA_OPTIONS_CONF))
        if merged:
            conf[jvm.JAVA_OPTIONS_CONF] = merged
        if not target.is_local_master and target.is_loopback:
            # A cluster on this machine runs its executors here too: give their Python workers this
            # interpreter, which has the package and its dependencies.
            conf.setdefault("spark.pyspark.python", sys.executable)
        return conf

    def package_py_files(self, target: SparkTarget) -> str | None:
        """The zip of this package for ``--py-files``, or None when it is not to be shipped.

        A ``local[...]`` master runs everything in this machine's Python, which has the package.
        Elsewhere the executors' Python (and the driver's, in cluster deploy mode) may not, so the
        package goes with the submission unless shipping is off or the user passes their own
        ``spark.submit.pyFiles`` (theirs are kept: ``--py-files`` would replace them).
        """
        if target.is_local_master:
            return None
        if not (self.ship_package if self.ship_package is not None else target.ship_package):
            self.log.info(
                "Not shipping airflow_cdc_provider to %s (shipping is off): the cluster's Python must "
                "have it installed.",
                target.master,
            )
            return None
        if PY_FILES_CONF in self.spark_conf:
            self.log.info(
                "spark_conf sets %s=%s: keeping it, and not adding this package's zip; those files "
                "(or the cluster's Python) must provide airflow_cdc_provider.",
                PY_FILES_CONF,
                self.spark_conf[PY_FILES_CONF],
            )
            return None
        zipped = str(package_zip())
        self.log.info("Shipping airflow_cdc_provider to %s with --py-files %s", target.master, zipped)
        return zipped

    @staticmethod
    def submit_env(target: SparkTarget) -> dict[str, str]:
        """Environment for spark-submit: this interpreter's bin/ first on PATH, loopback binding.

        spark-submit from a pip-installed PySpark finds SPARK_HOME (and ``python3`` finds the
        interpreter that has this package) only when that bin/ comes first. For a master on this
        machine, ``SPARK_LOCAL_IP`` keeps Spark from binding to (and warning about) the address
        the host name resolves to.
        """
        env = dict(os.environ)
        bin_dir = str(Path(sys.executable).parent)
        if (Path(bin_dir) / "spark-submit").exists():
            parts = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != bin_dir]
            env["PATH"] = os.pathsep.join([bin_dir, *parts])
        if target.is_loopback and target.driver_is_local:
            env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        return env

    def run_snapshot(self, request: SnapshotArgs) -> list[dict[str, Any]]:
        """Submit the job, wait for it, and return the ``_cdc_metrics.json`` of each snapshot it
        wrote (one per AS OF, in the order the AS OFs were given)."""
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        target = self.spark_target()
        error_file = self._new_error_file() if target.driver_is_local else None
        self._submission_token = f"cdc-replay-{uuid.uuid4().hex}"
        java_options = jvm.java_options_for(request) if target.is_local_master else []
        conf = {**self.submit_conf(target, java_options), SUBMISSION_TOKEN_CONF: self._submission_token}
        try:
            self._submit_hook = SparkSubmitHook(
                conf=conf,
                conn_id=self.conn_id,
                name=self.name,
                py_files=self.package_py_files(target),
                application_args=replace(request, error_file=error_file).to_argv(),
            )
            try:
                self._submit_hook.submit(application=application_path(), env=self.submit_env(target))
            except AirflowException as exc:
                raise CdcReplayJobError(self._failure_message(error_file, exc)) from exc
            except FileNotFoundError as exc:
                raise CdcReplayJobError(
                    f"cannot start {exc.filename or 'spark-submit'}: it is not on PATH. Install pyspark "
                    f"in the environment that runs Airflow, or put Spark's bin/ on PATH."
                ) from exc
        finally:
            if error_file:
                Path(error_file).unlink(missing_ok=True)
        return [self.read_metrics(folder) for _as_of, folder in request.snapshots()]

    def on_kill(self) -> None:
        """Stop a running submission (the operator forwards its on_kill here).

        The provider kills the spark-submit JVM only. In client mode that JVM is the parent of the
        job's Python driver, which is then orphaned and can run on for minutes (holding the output
        lock) before it notices its gateway is gone; so its descendants are stopped too.
        """
        if self._submit_hook is None or self._submission_token is None:
            return
        leftovers = _descendants_of_submission(self._submission_token)
        self._submit_hook.on_kill()
        _stop_processes(leftovers)

    @staticmethod
    def _new_error_file() -> str:
        handle, path = tempfile.mkstemp(prefix="cdc-replay-error-", suffix=".json")
        os.close(handle)
        return path

    @staticmethod
    def _failure_message(error_file: str | None, exc: Exception) -> str:
        """The job's own error when it wrote one, else what spark-submit reported."""
        text = (
            Path(error_file).read_text(encoding="utf-8").strip()
            if error_file and Path(error_file).exists()
            else ""
        )
        if not text:
            return f"cdc-replay job failed without writing an error report: {exc}"
        try:
            report = json.loads(text)
        except ValueError:
            return f"cdc-replay job failed: {text}"
        if not isinstance(report, dict):
            return f"cdc-replay job failed: {text}"
        kind = report.get("type")
        error = report.get("error") or "(the job gave no message; see the task log)"
        return f"cdc-replay job failed: {kind}: {error}" if kind else f"cdc-replay job failed: {error}"

    @staticmethod
    def read_metrics(output_path: str) -> dict[str, Any]:
        """Read ``OUTPUT/_cdc_metrics.json`` from a local path or any URI Airflow's object storage knows."""
        scheme = urlsplit(output_path).scheme
        try:
            if is_local_path(output_path):
                text = (Path(local_path(output_path)) / METRICS_FILE).read_text(encoding="utf-8")
            else:
                from airflow.sdk import ObjectStoragePath

                text = (ObjectStoragePath(output_path.rstrip("/")) / METRICS_FILE).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise CdcReplayJobError(
                f"the job finished but wrote no {METRICS_FILE} under {output_path!r}"
            ) from None
        except Exception as exc:
            raise CdcReplayJobError(
                f"cannot read {METRICS_FILE} under {output_path!r} ({type(exc).__name__}: {exc}); for a "
                f"{scheme}:// output, install the Airflow provider that serves that scheme to object storage"
            ) from exc
        return json.loads(text)

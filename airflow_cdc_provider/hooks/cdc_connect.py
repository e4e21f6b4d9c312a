"""CdcConnectHook: run a ``cdc-replay`` request over Spark Connect, in the task's own process.

With a ``spark_connect`` connection the operators need no spark-submit and no JVM on the Airflow
worker: this process opens a Connect session (the apache-spark provider's ``SparkConnectHook``
builds its URL from host, port, user, token and TLS), lists the landing and swaps the output
from here, and the server does the rest. Every operation the run starts carries one tag, so
``on_kill`` stops them all on the server and the run's own cleanup releases the output's lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
from airflow.sdk import BaseHook

from airflow_cdc_provider.contract.args import SnapshotArgs

if TYPE_CHECKING:
    from airflow_cdc_provider.jobs.connect_run import ConnectRun

CONNECT_CONN_TYPE = SparkConnectHook.conn_type


class CdcConnectHook(BaseHook):
    """Runs the replay job through a Spark Connect session; returns its metrics as the job prints them.

    :param conn_id: an Airflow connection of type ``spark_connect``.
    :param spark_conf: Spark SQL settings for the session (``spark.conf.set``); the server's
        static settings (memory, master) are the server's own.
    """

    conn_name_attr = "conn_id"
    default_conn_name = SparkConnectHook.default_conn_name
    conn_type = CONNECT_CONN_TYPE
    hook_name = "CDC replay (Spark Connect)"

    def __init__(self, conn_id: str = default_conn_name, spark_conf: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.conn_id = conn_id
        self.spark_conf = {str(k): str(v) for k, v in (spark_conf or {}).items()}
        self._run: ConnectRun | None = None

    def remote_url(self) -> str:
        """The ``sc://`` URL of the connection (it may carry a token: never log it)."""
        return SparkConnectHook(self.conn_id).get_connection_url()

    def run_snapshot(self, request: SnapshotArgs) -> list[dict[str, Any]]:
        """Run the request over Connect; the ``_cdc_metrics.json`` of each snapshot written.

        Progress goes to the task log as plain lines, one every few seconds at most.
        """
        from airflow_cdc_provider.jobs.connect_run import ConnectRun

        self._run = ConnectRun(self.remote_url(), self.spark_conf)
        self.log.info(
            "Running %s over Spark Connect (operations tagged %s)", request.source_format, self._run.tag
        )
        return self._run.run(request)

    def on_kill(self) -> None:
        """Interrupt every operation this run started on the server (the run then cleans up and
        releases the output's lock)."""
        if self._run is not None:
            count = self._run.interrupt()
            self.log.info("Interrupted %d Spark Connect operation(s) tagged %s", count, self._run.tag)

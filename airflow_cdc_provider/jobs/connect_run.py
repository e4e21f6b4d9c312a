"""One replay request over Spark Connect in this process, interruptible from another thread.

``CdcConnectHook`` runs the job inside an Airflow task this way: no spark-submit, no JVM here.
Every operation the run starts on the server carries the run's tag, so ``interrupt`` (the task's
``on_kill``) stops them all; the interrupted call then fails in the running thread, whose cleanup
removes the staging folder and releases the output's lock.
"""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING, Any

from airflow_cdc_provider.contract.args import SnapshotArgs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class ConnectRun:
    """Run requests through a Connect session to ``remote`` (``sc://...``; may carry a token)."""

    def __init__(self, remote: str, conf: dict[str, str] | None = None, *, quiet: bool = False) -> None:
        self._remote = remote
        self._conf = dict(conf or {})
        self._quiet = quiet
        self.tag = f"cdc-replay-{uuid.uuid4().hex}"
        self._session: SparkSession | None = None
        self._lock = threading.Lock()

    def run(self, request: SnapshotArgs) -> list[dict[str, Any]]:
        """The ``_cdc_metrics.json`` of each snapshot the request writes (one for a history)."""
        from airflow_cdc_provider.jobs.run import run_reported
        from airflow_cdc_provider.spark.progress import reporter_for

        try:
            with reporter_for(quiet=self._quiet) as reporter:
                return run_reported(reporter, request, "starting: Spark Connect session", self._open)
        finally:
            with self._lock:
                session, self._session = self._session, None
            if session is not None:
                session.removeTag(self.tag)

    def _open(self) -> SparkSession:
        """The session, its operations tagged, and kept for ``interrupt``."""
        from airflow_cdc_provider.spark.session import connect_session

        spark = connect_session(self._remote, self._conf)
        spark.addTag(self.tag)
        with self._lock:
            self._session = spark
        return spark

    def interrupt(self) -> int:
        """Interrupt the operations the run has going on the server; how many there were."""
        with self._lock:
            session = self._session
        return 0 if session is None else len(session.interruptTag(self.tag))

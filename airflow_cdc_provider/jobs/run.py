"""One replay request run on a session: the part the command line and the Spark Connect hook share.

The command line builds the session (embedded, under spark-submit, or over Spark Connect) and
prints the metrics; ``CdcConnectHook`` runs the same request in an Airflow task's own process.
Both come here, so a request means the same run wherever it runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession

from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.formats import get_decoder
from airflow_cdc_provider.formats.base import Decoder
from airflow_cdc_provider.replay.runs.history import run_history
from airflow_cdc_provider.replay.runs.many_as_ofs import run_snapshots
from airflow_cdc_provider.replay.spec import SnapshotSpec
from airflow_cdc_provider.spark.session import is_connect

if TYPE_CHECKING:
    from airflow_cdc_provider.spark.progress import Reporter

_log = logging.getLogger(__name__)


class ConnectWorkersError(RuntimeError):
    """The Spark Connect server's Python workers cannot run a decoder that needs them."""


def run_request(spark: SparkSession, request: SnapshotArgs) -> list[dict[str, Any]]:
    """Run ``request`` on ``spark``: one metrics object per snapshot written (one for a history)."""
    specs = SnapshotSpec.each_from_args(request)
    decoder = get_decoder(specs[0].source_format)
    if is_connect(spark) and decoder.worker_modules:
        ship_package(spark, decoder)
    try:
        return [run_history(spark, specs[0])] if request.history else run_snapshots(spark, specs)
    except Exception as exc:
        missing = _missing_worker_module(exc, decoder) if is_connect(spark) else None
        if missing is None:
            raise
        raise ConnectWorkersError(
            f"the Spark Connect server's Python workers cannot import {missing}, which the "
            f"{decoder.name} decoder runs there: install {', '.join(decoder.worker_modules)} in the "
            f"server's Python (its PYSPARK_PYTHON), or run this format with spark-submit"
        ) from None


def run_reported(
    reporter: Reporter, request: SnapshotArgs, starting: str, open_session: Callable[[], SparkSession]
) -> list[dict[str, Any]]:
    """``run_request`` on the session ``open_session`` gives, reported to ``reporter`` from its start
    (``starting``: the phase's line; never a URL, which may carry a token) to its metrics."""
    reporter.phase("starting", starting)
    spark = open_session()
    reporter.watch(spark)
    written = run_request(spark, request)
    reporter.done(written)
    return written


def ship_package(spark: SparkSession, decoder: Decoder) -> None:
    """Add this package to the session's Python path on the server (``addArtifacts(pyfile=True)``).

    Decoders that run Python in Spark's workers import ``airflow_cdc_provider`` there. The zip is
    the installed package (``contract.package_zip``); the modules it imports (fastavro, pyarrow)
    must be installed in the server's Python.
    """
    from airflow_cdc_provider.contract.package_zip import package_zip

    zipped = package_zip()
    try:
        spark.addArtifacts(str(zipped), pyfile=True)
    except Exception as exc:  # noqa: BLE001 - already added to this session: same name, same bytes
        if "already exists" not in str(exc).lower():
            raise
    _log.info("%s runs Python on the Spark Connect server: shipped %s", decoder.name, zipped.name)


def _missing_worker_module(exc: BaseException, decoder: Decoder) -> str | None:
    """The module named by a worker's ``ModuleNotFoundError`` in a failed Connect call, if any."""
    text = str(exc)
    if "ModuleNotFoundError" not in text:
        return None
    for module in (*decoder.worker_modules, "airflow_cdc_provider"):
        if f"No module named '{module}" in text:
            return module
    return None

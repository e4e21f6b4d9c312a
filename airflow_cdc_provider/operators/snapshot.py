"""CdcSnapshotOperator: rebuild table snapshots as of an instant from landed CDC files."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_cdc_provider.hooks.cdc_replay import CdcReplayHook, SnapshotRequest

if TYPE_CHECKING:
    from airflow.sdk import Context


def default_as_of(context: Context) -> datetime:
    """The run's data interval end; runs without a data interval fall back to when the run was due."""
    for candidate in (context.get("data_interval_end"), context.get("logical_date")):
        if candidate is not None:
            return candidate
    return context["dag_run"].run_after


class CdcSnapshotOperator(BaseOperator):
    """Rebuild a typed Parquet snapshot of every table as of an instant, with spark-submit.

    Runs the ``cdc-replay snapshot`` job (``airflow_cdc_provider/jobs/spark_app.py``) through the
    apache-spark provider's ``SparkSubmitHook`` and returns the job's ``_cdc_metrics.json`` object,
    which becomes the task's XCom ``return_value``. When the job fails, the task fails with the
    job's own error message.

    :param source_format: ``--format`` name of the landed records, e.g. ``debezium-json``
        (``cdc-replay formats`` lists them). (templated)
    :param input_paths: a path, directory or glob, or a list of them, in any filesystem Spark can
        read. (templated)
    :param output_path: the snapshot directory; it receives one folder per table,
        ``_cdc_metrics.json`` and ``_quarantine/``. (templated)
    :param as_of: the instant to rebuild: ISO-8601 with an offset, epoch milliseconds or an aware
        datetime. ``None`` or an empty rendered string means the run's data interval end. (templated)
    :param key_columns: key column name(s) for tables whose records do not name their key
        (``--key``), or a mapping ``{qualified table: column(s)}`` for per-table keys. (templated)
    :param tables: restrict the snapshot to these qualified table names (``--table``). (templated)
    :param conn_id: Airflow connection of type ``spark`` that gives the master (``local[*]``,
        ``spark://host:7077``, ``yarn``, ``k8s://...``); the task fails if it is missing.
    :param spark_conf: extra Spark properties for spark-submit (``--conf key=value``).
    :param on_error: ``quarantine`` (records that cannot be decoded go to ``_quarantine/``) or
        ``fail`` (the job fails on the first one).
    :param with_metadata: add ``_cdc_op``, ``_cdc_event_ts``, ``_cdc_position`` to every row.
    """

    template_fields: Sequence[str] = (
        "source_format",
        "input_paths",
        "output_path",
        "as_of",
        "key_columns",
        "tables",
    )
    ui_color = "#d6eaf8"

    def __init__(
        self,
        *,
        source_format: str,
        input_paths: str | list[str],
        output_path: str,
        as_of: str | int | datetime | None = None,
        key_columns: str | list[str] | dict[str, str | list[str]] | None = None,
        tables: str | list[str] | None = None,
        conn_id: str = CdcReplayHook.default_conn_name,
        spark_conf: dict[str, Any] | None = None,
        on_error: str = "quarantine",
        with_metadata: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source_format = source_format
        self.input_paths = input_paths
        self.output_path = output_path
        self.as_of = as_of
        self.key_columns = key_columns
        self.tables = tables
        self.conn_id = conn_id
        self.spark_conf = spark_conf
        self.on_error = on_error
        self.with_metadata = with_metadata

    @cached_property
    def hook(self) -> CdcReplayHook:
        return CdcReplayHook(
            conn_id=self.conn_id,
            spark_conf=self.spark_conf,
            name=f"cdc-replay-{self.dag_id}.{self.task_id}",
        )

    def execute(self, context: Context) -> dict[str, Any]:
        as_of = self.as_of if self.as_of not in (None, "") else default_as_of(context)
        request = SnapshotRequest.build(
            source_format=self.source_format,
            input_paths=self.input_paths,
            output_path=self.output_path,
            as_of=as_of,
            key_columns=self.key_columns,
            tables=self.tables,
            on_error=self.on_error,
            with_metadata=self.with_metadata,
        )
        self.log.info("Rebuilding snapshot as of %s into %s", request.as_of, request.output_path)
        return self.hook.run_snapshot(request)

    def on_kill(self) -> None:
        self.hook.on_kill()

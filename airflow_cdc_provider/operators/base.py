"""BaseCdcReplayOperator: the Airflow side every ``cdc-replay`` operator shares.

``CdcSnapshotOperator`` and ``CdcHistoryOperator`` run two commands of one job: the same landing,
decoding and output options, the same hook, XCom, asset event and lineage. This base holds that
part; each operator adds only the arguments its command takes and says which instant(s) it runs
to, so neither accepts an argument only to refuse it.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, BaseOperator

from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.hooks.cdc_connect import CONNECT_CONN_TYPE, CdcConnectHook
from airflow_cdc_provider.hooks.cdc_replay import (
    DEFAULT_DRIVER_LOG_LEVEL,
    CdcReplayHook,
    connection_type,
    normalise_log_level,
)
from airflow_cdc_provider.operators.assets import (
    asset_event_extra,
    asset_from_argument,
    snapshot_asset,
)

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context

# Templated fields of every cdc-replay operator: where the records are and where the output goes,
# then how they are decoded. Each operator puts its instant field between the two.
INPUT_FIELDS: tuple[str, ...] = ("source_format", "input_paths", "output_path")
OPTION_FIELDS: tuple[str, ...] = (
    "key_columns",
    "tables",
    "table_columns",
    "timestamp_column",
    "unavailable_values",
    "max_quarantined",
)


class BaseCdcReplayOperator(BaseOperator):
    """Submit one ``cdc-replay`` command with spark-submit and return its metrics as XCom.

    Runs the job (``airflow_cdc_provider/jobs/spark_app.py``) through ``CdcReplayHook``, which
    uses the apache-spark provider's ``SparkSubmitHook``, and returns the job's
    ``_cdc_metrics.json`` object (a list of them, one per instant, when the operator runs to
    several), which becomes the task's XCom ``return_value``. When the job fails, the task fails
    with the job's own error message. The task declares ``output_asset`` as its outlet; each run's
    asset event carries ``{"output", "as_of", "rows", "tables": {table: rows}}``
    (``{"snapshots": [...]}`` of those for several instants). With the OpenLineage provider
    installed, the run also reports the landed inputs and one output per table of each folder
    written with its row count.

    Subclasses give the instant(s) (``_instants``) and the options only their command takes
    (``_command_arguments``).

    :param source_format: ``--format`` name of the landed records, e.g. ``debezium-json``
        (``cdc-replay formats`` lists them). (templated)
    :param input_paths: a path, directory or glob, or a list of them, in any filesystem Spark can
        read. (templated)
    :param output_path: the output directory; it receives one folder per table,
        ``_cdc_metrics.json`` and ``_quarantine/``. (templated)
    :param key_columns: key column name(s) for tables whose records do not name their key
        (``--key``), or a mapping ``{qualified table: column(s)}`` for per-table keys. (templated)
    :param tables: restrict the output to these qualified table names (``--table``); ``None``
        or an empty rendered string means every table. (templated)
    :param table_columns: ``aws-dms``: the columns of headerless CSV rows per table (``--columns``),
        ``{table: column(s)}`` or a list of ``TABLE=COL,...`` strings. (templated)
    :param timestamp_column: ``aws-dms``: the column DMS adds with ``TimestampColumnName``
        (``--timestamp-column``). (templated)
    :param unavailable_values: ``debezium-json``/``debezium-avro``: the placeholder(s) the
        connector writes for values it could not read (``unavailable.value.placeholder``; ``hex:``
        and hex digits for raw bytes), a text or a list (``--unavailable-value``). A column holding
        one keeps its earlier value. ``None``: Debezium's default ``__debezium_unavailable_value``.
        (templated)
    :param conn_id: Airflow connection that says where the job runs; the task fails if it is missing.
        Type ``spark``: spark-submit to its master (``local[*]``, ``spark://host:7077``, ``yarn``,
        ``k8s://...``). Type ``spark_connect``: the job runs in the task's own process through a
        Spark Connect session (host, port, user, token, TLS), with no spark-submit and no JVM here.
    :param spark_conf: extra Spark properties: for spark-submit (``--conf key=value``), or Spark SQL
        settings of the Connect session.
    :param ship_package: whether spark-submit to a cluster master ships this package with
        ``--py-files`` (a zip built once per installed version). ``None``: the connection's
        ``ship-package`` extra decides, shipping by default.
    :param on_error: ``quarantine`` (records that cannot be decoded go to ``_quarantine/``) or
        ``fail`` (the job fails on the first one).
    :param max_quarantined: fail the task when more records than this are quarantined
        (``--max-quarantined``): a count (``100``) or a share of the records read (``"0.5%"``),
        per output. The output is then left as it was and the quarantined records are kept in
        ``.<output name>.cdc-rejected/_quarantine`` beside it. ``None`` or an empty rendered
        string: no limit. Not with ``on_error="fail"``. (templated)
    :param with_metadata: add ``_cdc_op``, ``_cdc_event_ts``, ``_cdc_position``, ``_cdc_file`` and
        ``_cdc_line`` to every row.
    :param partitions: time partitions of the landing (``--partitions``): ``auto`` (hive-style
        ``dt=``/``hour=`` folders, the default), ``none``, or a strftime folder pattern such as
        ``%Y/%m/%d``; partitions starting after the instant + ``lateness`` are not read.
    :param partition_timezone: the time zone partition folders are named in (default ``UTC``).
    :param lateness: how late an event may land after its own time (``30m``, ``1h``, ``2d``).
    :param whole_transactions: apply each transaction whole or not at all (``--whole-transactions``):
        as of T only when its last event is at or before T. Only for formats whose records carry
        transaction ids.
    :param output_asset: the Asset (or its URI) this task produces. Default: the folder of
        ``output_path`` above its first templated part (``s3a://lake/snap/{{ ds }}`` gives
        ``s3a://lake/snap``), or ``x-cdc-snapshot://<dag_id>/<task_id>`` when no part of it is
        known at parse time.
    :param driver_log_level: Spark's log level in the driver (``spark.log.level``), whose output
        is the task log: ``WARN`` (default) keeps Spark's start-up chatter out; ``INFO`` or
        ``DEBUG`` when you need it; ``None`` leaves Spark's own default.
    """

    template_fields: Sequence[str] = (*INPUT_FIELDS, *OPTION_FIELDS)
    # Logged once per folder the run writes, with its instant and the folder.
    _writing_message = "Writing %s into %s"

    def __init__(
        self,
        *,
        source_format: str,
        input_paths: str | list[str],
        output_path: str,
        key_columns: str | list[str] | dict[str, str | list[str]] | None = None,
        tables: str | list[str] | None = None,
        table_columns: dict[str, str | list[str]] | list[str] | None = None,
        timestamp_column: str | None = None,
        unavailable_values: str | list[str] | None = None,
        conn_id: str = CdcReplayHook.default_conn_name,
        spark_conf: dict[str, Any] | None = None,
        ship_package: bool | None = None,
        on_error: str = "quarantine",
        max_quarantined: int | str | None = None,
        with_metadata: bool = False,
        partitions: str = "auto",
        partition_timezone: str = "UTC",
        lateness: str = "1h",
        whole_transactions: bool = False,
        output_asset: Asset | str | None = None,
        driver_log_level: str | None = DEFAULT_DRIVER_LOG_LEVEL,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source_format = source_format
        self.input_paths = input_paths
        self.output_path = output_path
        self.key_columns = key_columns
        self.tables = tables
        self.table_columns = table_columns
        self.timestamp_column = timestamp_column
        self.unavailable_values = unavailable_values
        self.conn_id = conn_id
        self.spark_conf = spark_conf
        self.ship_package = ship_package
        self.on_error = on_error
        self.max_quarantined = max_quarantined
        self.with_metadata = with_metadata
        self.partitions = partitions
        self.partition_timezone = partition_timezone
        self.lateness = lateness
        self.whole_transactions = whole_transactions
        self.driver_log_level = normalise_log_level(driver_log_level)  # a typo fails when the DAG is parsed
        self.output_asset = self._declare_output_asset(output_asset)
        self._request: SnapshotArgs | None = None
        self._metrics: list[dict[str, Any]] | None = None

    def _declare_output_asset(self, output_asset: Asset | str | None) -> Asset:
        """The task's output Asset, added to its outlets (outlets are fixed when the DAG is parsed)."""
        dag_id = self.dag.dag_id if self.has_dag() else None
        asset = (
            asset_from_argument(output_asset)
            if output_asset is not None
            else snapshot_asset(self.output_path, dag_id, self.task_id)
        )
        if asset not in self.outlets:
            self.outlets = [*self.outlets, asset]
        return asset

    @cached_property
    def hook(self) -> CdcReplayHook | CdcConnectHook:
        """spark-submit for a ``spark`` connection; in this process for a ``spark_connect`` one."""
        if connection_type(self.conn_id) == CONNECT_CONN_TYPE:
            return CdcConnectHook(conn_id=self.conn_id, spark_conf=self.spark_conf)
        return CdcReplayHook(
            conn_id=self.conn_id,
            spark_conf=self.spark_conf,
            name=f"cdc-replay-{self.dag_id}.{self.task_id}",
            driver_log_level=self.driver_log_level,
            ship_package=self.ship_package,
        )

    @abstractmethod
    def _instants(self, context: Context) -> str | list[str]:
        """The instant (or instants) this run writes, resolved against the run's data interval."""

    @abstractmethod
    def _command_arguments(self) -> dict[str, Any]:
        """The ``SnapshotArgs.build`` arguments that only this operator's command takes."""

    def _job_arguments(self, instants: str | list[str]) -> SnapshotArgs:
        """The rendered arguments as the job's request; wrong values fail here, before spark-submit."""
        return SnapshotArgs.build(
            source_format=self.source_format,
            input_paths=self.input_paths,
            output_path=self.output_path,
            as_of=instants,
            key_columns=self.key_columns,
            tables=self.tables or None,
            table_columns=self.table_columns or None,
            timestamp_column=self.timestamp_column or None,
            unavailable_values=self.unavailable_values or None,
            on_error=self.on_error,
            max_quarantined=self.max_quarantined,
            with_metadata=self.with_metadata,
            partitions=self.partitions,
            partition_timezone=self.partition_timezone,
            lateness=self.lateness,
            whole_transactions=self.whole_transactions,
            **self._command_arguments(),
        )

    def execute(self, context: Context) -> dict[str, Any] | list[dict[str, Any]]:
        instants = self._instants(context)
        several = isinstance(instants, list)
        request = self._job_arguments(instants)
        self._request = request
        for as_of, folder in request.snapshots():
            self.log.info(self._writing_message, as_of, folder)
        written = self.hook.run_snapshot(request)
        self._metrics = written
        extra = (
            {"snapshots": [asset_event_extra(m) for m in written]}
            if several
            else asset_event_extra(written[0])
        )
        context["outlet_events"][self.output_asset].extra.update(extra)
        return written if several else written[0]

    def on_kill(self) -> None:
        self.hook.on_kill()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage | None:
        """Inputs, one output per table of each folder written and its row count (called by OpenLineage)."""
        if self._request is None or self._metrics is None:
            return None
        from airflow_cdc_provider.operators.lineage import snapshot_lineage

        return snapshot_lineage(self._request.input_paths, self._metrics)

"""CdcLandedFilesSensor: wait until the landed CDC files cover AS OF."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowSensorTimeout,
    AirflowSkipException,
)

from airflow_cdc_provider.contract.as_of import resolve_as_of_ms
from airflow_cdc_provider.landing.coverage import (
    DEFAULT_MARKER,
    STRATEGIES,
    Coverage,
    CoverageSpec,
    check_coverage,
)
from airflow_cdc_provider.triggers.landed_files import CdcLandedFilesTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context

# The trigger reports its own timeout (with what it saw); Airflow's deferral timeout is the backstop.
_DEFERRAL_GRACE = timedelta(minutes=5)


def timeout_message(timeout: float, waiting_for: str, seen: str) -> str:
    return f"Timed out after {timeout:g} s waiting for {waiting_for}. Last seen: {seen}."


class LandingCheckError(AirflowException):
    """Checking the landing raised in the triggerer (the message is the original error)."""


class CdcLandedFilesSensor(BaseSensorOperator):
    """Wait until the landed CDC files cover AS OF, by the strategy the sink supports.

    - ``marker``: the partition that covers AS OF holds a done-marker (``_SUCCESS`` or ``marker``).
      Without time partitions, the marker is expected at the landing root.
    - ``partition``: a time partition later than the one that covers AS OF exists.
    - ``event_time``: the newest landed event time, read from the last records of the
      ``newest_files`` newest files, is later than AS OF plus ``allowed_lateness``.

    "The partition that covers AS OF" holds the last millisecond before AS OF: for a daily run
    (AS OF = midnight) it is the day that just ended. Partition folders are hive style
    (``dt=``/``date=``/``ds=`` with ``YYYY-MM-DD`` or ``YYYYMMDD``, optionally ``hour=``/``hr=``
    inside), detected, or any strftime ``partition_pattern``. Works on local paths and on every URI
    Airflow's object storage serves. Pokes with ``mode="poke"`` or ``"reschedule"``, or defers to
    :class:`CdcLandedFilesTrigger` with ``deferrable=True``. Once covered it returns (XCom)
    ``{"path", "strategy", "as_of", "seen"}``. On timeout it fails with a message that says what
    it was waiting for and what it last saw.

    :param path: the landing root folder, a local path or a URI. (templated)
    :param as_of: the instant the landing must cover: ISO-8601 with an offset, epoch milliseconds
        or an aware datetime; ``None`` or an empty rendered string means the run's data interval
        end, the same default as ``CdcSnapshotOperator``. (templated)
    :param strategy: ``"marker"`` (default), ``"partition"`` or ``"event_time"``.
    :param marker: the done-marker file name for ``"marker"``; default ``_SUCCESS``. (templated)
    :param partition_pattern: strftime pattern of the partition folders relative to ``path``,
        e.g. ``"%Y/%m/%d/%H"`` or ``"dt=%Y%m%d/hour=%H"``; ``None`` detects hive-style folders. (templated)
    :param partition_timezone: the time zone the partition folder names are written in; default UTC.
    :param source_format: the ``--format`` of the landed records, needed by ``"event_time"``. (templated)
    :param allowed_lateness: for ``"event_time"``, how far past AS OF the newest event must be
        before records up to AS OF count as landed: a ``timedelta`` or seconds; default 0.
    :param newest_files: for ``"event_time"``, how many of the newest files to read; default 3.
    :param fs_conn_id: Airflow connection for the object store of a URI ``path`` (templated);
        ``None`` uses the filesystem's own defaults.
    :param deferrable: defer to the triggerer instead of poking; default
        ``[operators] default_deferrable``.
    """

    template_fields: Sequence[str] = (
        "path",
        "as_of",
        "marker",
        "partition_pattern",
        "source_format",
        "fs_conn_id",
    )
    ui_color = "#d5f5e3"

    def __init__(
        self,
        *,
        path: str,
        as_of: str | int | datetime | None = None,
        strategy: str = "marker",
        marker: str = DEFAULT_MARKER,
        partition_pattern: str | None = None,
        partition_timezone: str = "UTC",
        source_format: str | None = None,
        allowed_lateness: timedelta | float = 0,
        newest_files: int = 3,
        fs_conn_id: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        if strategy == "event_time" and not source_format:
            raise ValueError("strategy 'event_time' needs source_format (the --format of the landed records)")
        self.path = path
        self.as_of = as_of
        self.strategy = strategy
        self.marker = marker
        self.partition_pattern = partition_pattern
        self.partition_timezone = partition_timezone
        self.source_format = source_format
        lateness = (
            allowed_lateness
            if isinstance(allowed_lateness, timedelta)
            else timedelta(seconds=allowed_lateness)
        )
        self.allowed_lateness_ms = int(lateness.total_seconds() * 1000)
        self.newest_files = newest_files
        self.fs_conn_id = fs_conn_id
        self.deferrable = deferrable
        self._last_coverage: Coverage | None = None

    def coverage_spec(self, context: Context) -> CoverageSpec:
        """The rendered arguments as one check; raises for values that make no sense."""
        return CoverageSpec(
            path=str(self.path),
            as_of_ms=resolve_as_of_ms(self.as_of, context),
            strategy=self.strategy,
            marker=self.marker,
            partition_pattern=self.partition_pattern or None,
            partition_timezone=self.partition_timezone,
            source_format=self.source_format or None,
            allowed_lateness_ms=self.allowed_lateness_ms,
            newest_files=self.newest_files,
            conn_id=self.fs_conn_id or None,
        )

    def poke(self, context: Context) -> PokeReturnValue:
        spec = self.coverage_spec(context)
        coverage = check_coverage(spec)
        self._last_coverage = coverage
        if coverage.covered:
            self.log.info("Landing covers AS OF %s: %s", spec.as_of, coverage.seen)
            return PokeReturnValue(True, spec.summary(coverage))
        self.log.info("Waiting for %s; seen: %s", coverage.waiting_for, coverage.seen)
        return PokeReturnValue(False)

    def execute(self, context: Context) -> Any:
        if self.deferrable:
            self.defer(
                trigger=CdcLandedFilesTrigger.for_spec(
                    self.coverage_spec(context),
                    poke_interval=self.poke_interval,
                    deadline=time.time() + self.timeout,
                ),
                method_name="execute_complete",
                timeout=timedelta(seconds=self.timeout) + _DEFERRAL_GRACE,
            )
        try:
            return super().execute(context)
        except AirflowSensorTimeout:
            raise AirflowSensorTimeout(self._poke_timeout_message()) from None
        except AirflowSkipException as exc:
            # soft_fail turns the timeout into a skip with Airflow's generic text; keep ours.
            if exc.__cause__ is None and self._last_coverage is not None and not self._last_coverage.covered:
                raise AirflowSkipException(self._poke_timeout_message()) from None
            raise

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resume from the trigger: the XCom summary, or the trigger's timeout or error as a failure."""
        status = event.get("status")
        if status == "covered":
            self.log.info("Landing covers AS OF %s: %s", event["as_of"], event["seen"])
            return {key: value for key, value in event.items() if key != "status"}
        if status == "timeout":
            raise AirflowSensorTimeout(timeout_message(self.timeout, event["waiting_for"], event["seen"]))
        raise LandingCheckError(f"checking the landing failed: {event.get('message', event)}")

    def _poke_timeout_message(self) -> str:
        last = self._last_coverage
        if last is None:
            return (
                f"Timed out after {self.timeout:g} s before the landing under {self.path} could be checked."
            )
        return timeout_message(self.timeout, last.waiting_for, last.seen)

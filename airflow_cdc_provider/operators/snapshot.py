"""CdcSnapshotOperator: rebuild table snapshots as of an instant from landed CDC files."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_cdc_provider.contract.as_of import resolve_as_of
from airflow_cdc_provider.operators.base import INPUT_FIELDS, OPTION_FIELDS, BaseCdcReplayOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


class CdcSnapshotOperator(BaseCdcReplayOperator):
    """Rebuild a typed Parquet snapshot of every table as of an instant (or several), with spark-submit.

    Runs the ``cdc-replay snapshot`` job and returns the job's ``_cdc_metrics.json`` object (a list
    of them, one per AS OF, when ``as_of`` is a list) as the task's XCom ``return_value``; each
    run's asset event carries the snapshot's row counts (``{"snapshots": [...]}`` of them for a list
    of AS OFs). The arguments not listed here, and the hook, asset, lineage and kill handling, are
    :class:`~airflow_cdc_provider.operators.base.BaseCdcReplayOperator`'s.

    :param output_path: the snapshot directory; it receives one folder per table,
        ``_cdc_metrics.json`` and ``_quarantine/``. With a list of AS OFs, a pattern holding
        ``{as_of:FORMAT}`` (strftime, UTC), e.g. ``s3a://lake/snap/dt={as_of:%Y-%m-%d}``. (templated)
    :param as_of: the instant to rebuild: ISO-8601 with an offset, epoch milliseconds or an aware
        datetime. ``None`` or an empty rendered string means the run's data interval end. A list of
        instants rebuilds one snapshot per instant from a single scan of the landing; the task then
        returns the list of their metrics, and its asset event lists every snapshot. (templated)
    :param base_path: an earlier output of this operator written with ``keep_state`` (``--base``):
        read only the landed files it did not cover and fold their events onto its rows. Late
        events (at or before its AS OF, in files it did not read) are folded too and counted. The
        job rebuilds from the whole landing instead when the base is missing or has no state, was
        made with other options or a later AS OF, or when the new events cannot be folded onto it
        (a late DDL or truncate, a partial image older than the base's row); the snapshot is the
        same either way. The metrics say which: ``mode`` is ``"incremental"`` or ``"full"``, and
        the ``incremental`` block gives the base, its AS OF, ``applied``, the ``reason`` for a
        full rebuild and ``late_events``. Not with a list of AS OFs or ``whole_transactions``.
        (templated)
    :param keep_state: also write ``_cdc_state/`` beside the snapshot so that a later run can use
        this output as its base. Implied by ``base_path``: a run given a base writes state even
        when it falls back to a full rebuild. Not with a list of AS OFs or ``whole_transactions``.
    """

    template_fields: Sequence[str] = (*INPUT_FIELDS, "as_of", *OPTION_FIELDS, "base_path")
    ui_color = "#d6eaf8"
    _writing_message = "Rebuilding snapshot as of %s into %s"

    def __init__(
        self,
        *,
        as_of: str | int | datetime | list[str | int | datetime] | None = None,
        base_path: str | None = None,
        keep_state: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.as_of = as_of
        self.base_path = base_path
        self.keep_state = keep_state

    def _instants(self, context: Context) -> str | list[str]:
        if isinstance(self.as_of, (list, tuple)):
            return [resolve_as_of(v, context) for v in self.as_of]
        return resolve_as_of(self.as_of, context)

    def _command_arguments(self) -> dict[str, Any]:
        return {"base_path": self.base_path or None, "keep_state": self.keep_state}

"""CdcHistoryOperator: every version of every row up to an instant (SCD type 2) from landed CDC files."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_cdc_provider.contract.as_of import resolve_as_of
from airflow_cdc_provider.operators.base import INPUT_FIELDS, OPTION_FIELDS, BaseCdcReplayOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

# CdcSnapshotOperator's own arguments: a history runs to one instant and is always rebuilt from the
# landing, so there is no AS OF list to pass, no base to start from and no state to keep.
_SNAPSHOT_ONLY = ("as_of", "base_path", "keep_state")


class CdcHistoryOperator(BaseCdcReplayOperator):
    """Write a history table per source table with spark-submit (``cdc-replay history``).

    Each table's folder holds its row versions as Parquet: the table's columns (typed and ordered
    as in a snapshot), then ``_cdc_valid_from`` and ``_cdc_valid_to`` (UTC; null while the version
    is current at ``until``), ``_cdc_op`` and ``_cdc_position``. Selecting
    ``_cdc_valid_from <= T < _cdc_valid_to`` gives the snapshot as of any T up to ``until``. Returns
    the job's ``_cdc_metrics.json`` (XCom ``return_value``): a snapshot's metrics as of ``until``,
    with ``versions`` beside ``rows`` per table. The other arguments are
    :class:`~airflow_cdc_provider.operators.base.BaseCdcReplayOperator`'s; passing one of
    ``CdcSnapshotOperator``'s own (``as_of``, ``base_path``, ``keep_state``) raises ``TypeError``
    that says so, rather than Airflow's generic invalid-arguments error.

    :param until: the instant the history runs to: ISO-8601 with an offset, epoch milliseconds or
        an aware datetime; ``None`` or an empty rendered string means the run's data interval end.
        (templated)
    """

    template_fields: Sequence[str] = (*INPUT_FIELDS, "until", *OPTION_FIELDS)
    ui_color = "#d5f5e3"
    _writing_message = "Writing the history until %s into %s"

    def __init__(self, *, until: str | int | datetime | None = None, **kwargs: Any) -> None:
        for refused in _SNAPSHOT_ONLY:
            if refused in kwargs:
                raise TypeError(
                    f"CdcHistoryOperator takes until, not {refused}: a history is rebuilt from the landing"
                )
        super().__init__(**kwargs)
        self.until = until

    def _instants(self, context: Context) -> str:
        return resolve_as_of(self.until, context)

    def _command_arguments(self) -> dict[str, Any]:
        return {"history": True}

"""Whole transactions (``--whole-transactions``): a transaction applies as of T only when all of it has.

Without the option an event applies when its own time is at or before AS OF, so a snapshot may
hold half of a transaction that committed across AS OF. With it, every row change of a transaction
applies at the time of the transaction's last event: the latest event time among its landed
events. Formats that mark a transaction's last event (Qlik ``transactionLastEvent``, Shareplex's
sequence, Maxwell ``commit``, GoldenGate ``txind``) say more: a transaction whose events carry such
marks but none of which is the last has not landed whole, and is held back whatever AS OF is.

Events without a transaction id apply at their own time, as without the option. Transaction ids are
taken as they are written: one id names one transaction across all tables of the landing.

Part of the read stage: takes keyed events, gives them with the instant each applies from.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from airflow_cdc_provider.formats.events import KIND_CHANGE
from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr


def with_transaction_times(events: DataFrame) -> DataFrame:
    """``events`` with ``APPLY_MS`` (read by ``keys.applies_by``) and ``TX_FIRST``: one window over
    each transaction's row changes.

    Events outside a transaction get a partition of their own (their place in the landing), so the
    window's shuffle spreads them instead of gathering them in one task.
    """
    in_tx = (E.col("kind") == KIND_CHANGE) & E.col("tx_id").isNotNull()
    alone = ~in_tx
    partition = ", ".join(
        e.sql
        for e in (
            E.when(in_tx, E.col("tx_id")),
            E.when(alone, E.col("file")),
            E.when(alone, E.col("file_pos")),
            E.when(alone, E.col("sub_pos")),
        )
    )
    # Earliest first: a transaction with any event on time for AS OF has its first one on time.
    order = ", ".join(
        e.sql
        for e in (E.coalesce(E.col("event_ms"), E.lit(0)), E.col("file"), E.col("file_pos"), E.col("sub_pos"))
    )
    whole = (
        f"PARTITION BY {partition} ORDER BY {order} ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING"
    )

    def over_tx(aggregate: Expr) -> Expr:
        return aggregate.over(whole)

    own_time = E.coalesce(E.col("event_ms"), E.lit(0))
    marked = over_tx(E.count(E.col("tx_end"))) > 0
    ended = E.coalesce(over_tx(E.bool_or(E.col("tx_end"))), E.lit(False))
    apply_ms = (
        E.when(alone, own_time).when(marked & ~ended, E.null("bigint")).otherwise(over_tx(E.max(own_time)))
    )
    first = in_tx & (E.call("row_number").over(f"PARTITION BY {partition} ORDER BY {order}") == 1)
    return events.select("*", *E.columns(apply_ms.alias(C.APPLY_MS), first.alias(C.TX_FIRST)))

"""The ``_cdc_*`` columns a written table has after its own: what wrote each row, and where.

Takes a row's last event (``LAST``, as ``keys.event_meta`` shapes it) and, for a history, its
version's bounds (``FROM_MS``, ``TO_MS``). Gives the select list the write stage appends: with
``--with-metadata`` a snapshot's op, event time, position and landed record; a history's validity,
op and position always. The columns are the job's contract: docs/contract.md, "Snapshot columns"
and "History columns".
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from airflow_cdc_provider.replay import columns as C


def _position(last: Column) -> Column:
    """``_cdc_position``: the source's log position, else ``file:line`` in the landing."""
    return F.when(
        F.size(last["log_pos"]) > 0,
        F.array_join(F.transform(last["log_pos"], lambda p: p.cast("string")), ":"),
    ).otherwise(F.concat_ws(":", last["file"], last["line"].cast("string")))


def _lineage_columns(last: Column) -> list[Column]:
    """``_cdc_file``, ``_cdc_line``: the landed record that last wrote the row, to trace it back.

    A record without a line (an Avro container's record, a Parquet row, a raw message file) has
    its 1-based index in the file instead: its ``file_pos`` counts records from 0. Records of
    split-read files have their lines filled in before this (``salvage.with_split_lines``).
    """
    return [
        last["file"].alias(C.CDC_FILE),
        F.when(last["file"].isNotNull(), F.coalesce(last["line"], last["file_pos"] + 1)).alias(C.CDC_LINE),
    ]


def metadata_columns(last: Column) -> list[Column]:
    """A snapshot's ``--with-metadata`` columns."""
    return [
        last["op"].alias(C.CDC_OP),
        F.timestamp_millis(last["event_ms"]).alias(C.CDC_EVENT_TS),
        _position(last).alias(C.CDC_POSITION),
        *_lineage_columns(last),
    ]


def version_columns(last: Column, with_metadata: bool) -> list[Column]:
    """A history's columns after the table's own (``--with-metadata`` adds the writer's own time
    and its landed record)."""
    columns = [
        F.timestamp_millis(F.col(C.FROM_MS)).alias(C.VALID_FROM),
        F.timestamp_millis(F.col(C.TO_MS)).alias(C.VALID_TO),
        last["op"].alias(C.CDC_OP),
        _position(last).alias(C.CDC_POSITION),
    ]
    if with_metadata:
        columns += [F.timestamp_millis(last["event_ms"]).alias(C.CDC_EVENT_TS), *_lineage_columns(last)]
    return columns

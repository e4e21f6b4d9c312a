"""Write: a run's tables, quarantine, metrics (and state) into the staging folder, then commit.

Takes the run's resolved rows, their group counts, its ``Input`` and, for a history, its versions
(``versions.shown_versions``). Refuses what cannot be written (a table without a key, a record
that ``--on-error fail`` cannot quarantine, more quarantined records than ``--max-quarantined``),
types each table (``typed``), writes one Parquet folder per table, ``_quarantine/``,
``_cdc_metrics.json`` and, with ``--keep-state`` or ``--base``, ``_cdc_state/`` (``keep_state``),
and swaps the staging folder in (``output.OutputTarget.commit``). Gives the metrics. The output
layout is docs/contract.md, "Output layout".
"""

from __future__ import annotations

import logging

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from airflow_cdc_provider.contract.as_of import format_as_of
from airflow_cdc_provider.contract.metrics import QUARANTINE_DIR
from airflow_cdc_provider.contract.tables import table_folder
from airflow_cdc_provider.formats.events import position_text
from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.replay.errors import MissingKeyError, QuarantineError, QuarantineLimitError
from airflow_cdc_provider.replay.group_counts import quarantine_reasons, unavailable_values
from airflow_cdc_provider.replay.keep_state import write_state
from airflow_cdc_provider.replay.metrics import build_metrics, with_versions
from airflow_cdc_provider.replay.output import OutputTarget
from airflow_cdc_provider.replay.output_columns import metadata_columns, version_columns
from airflow_cdc_provider.replay.read import Input
from airflow_cdc_provider.replay.salvage import with_split_lines
from airflow_cdc_provider.replay.schemas import TableSchema
from airflow_cdc_provider.replay.spec import SnapshotSpec
from airflow_cdc_provider.replay.typed import (
    check_table_names,
    run_typing_query,
    table_typing,
    typed_by_versions,
    typed_value,
)
from airflow_cdc_provider.spark import progress
from airflow_cdc_provider.spark import sqlexpr as E

log = logging.getLogger(__name__)

# Tables already written for a run (``runs.many_as_ofs``), by table: (folder, columns and types).
Prewritten = dict[str, tuple[str, tuple]]


def write_output(
    spark: SparkSession,
    spec: SnapshotSpec,
    target: OutputTarget,
    read: Input,
    resolved: DataFrame,
    groups: list[Row],
    versions: DataFrame | None = None,
    prewritten: Prewritten | None = None,
) -> dict:
    """Write the run's output and commit it; return its metrics. The lines of split-read records
    the output shows are filled in first (``salvage.with_split_lines``)."""
    keyless = sorted({g["table"] for g in groups if g[C.TAG] == C.TAG_NO_KEY})
    if keyless:
        raise MissingKeyError(
            f"no key for table(s) {', '.join(keyless)}: the records do not name their key columns; "
            f"pass --key COL[,COL...] (or --key TABLE=COL,... per table)"
        )
    quarantine_count = sum(g[C.EVENTS] for g in groups if g[C.TAG] == C.TAG_QUARANTINED)
    shown = with_split_lines(
        spark,
        read.files,
        resolved,
        quarantine=quarantine_count > 0,
        last=spec.with_metadata or spec.writes_state,
        every_last=spec.with_metadata,
    )
    try:
        return _write_and_commit(spec, target, read, shown, groups, quarantine_count, versions, prewritten)
    finally:
        if shown is not resolved:
            shown.unpersist()


def _write_and_commit(
    spec: SnapshotSpec,
    target: OutputTarget,
    read: Input,
    resolved: DataFrame,
    groups: list[Row],
    quarantine_count: int,
    versions: DataFrame | None = None,
    prewritten: Prewritten | None = None,
) -> dict:
    """Write the tables (each one's rows, or its ``versions`` for a history), quarantine, metrics.

    ``prewritten``: tables already written elsewhere (``runs.many_as_ofs``), as (folder, columns):
    moved in instead of written when they have this run's columns.
    """
    progress.phase("typing", as_of_ms=spec.as_of_ms, events=sum(int(g[C.EVENTS] or 0) for g in groups))
    quarantined = resolved.where(F.col(C.TAG) == C.TAG_QUARANTINED)
    _refuse_quarantined(spec, target, quarantined, groups, quarantine_count, versions is not None)
    version_counts: dict[str, int] = {}
    if versions is not None:
        # A history's tables are typed from every version, not only the current rows.
        groups, version_counts = run_typing_query(
            lambda v: typed_by_versions(groups, v), versions, E.col(C.IMAGE).isNotNull()
        )
    tables, schemas, typing_inputs, key_columns = table_typing(read, resolved, groups)
    check_table_names(spec, tables)
    progress.phase("writing", tables=len(tables))
    table_paths = _write_tables(spec, target, tables, schemas, resolved, versions, prewritten)
    if quarantine_count:
        _write_quarantine(quarantined, target)

    unavailable = unavailable_values(resolved, groups)
    metrics = build_metrics(spec, target, groups, table_paths, read, quarantine_count, unavailable)
    if versions is not None:
        metrics = with_versions(metrics, version_counts)
    if spec.writes_state:
        write_state(spec, target, read, resolved, typing_inputs, key_columns, metrics)
    target.write_metrics(metrics)
    target.commit()
    log.info("snapshot of %d table(s) as of %s written to %s", len(tables), metrics["as_of"], target.uri)
    return metrics


def _refuse_quarantined(
    spec: SnapshotSpec,
    target: OutputTarget,
    quarantined: DataFrame,
    groups: list[Row],
    quarantine_count: int,
    history: bool,
) -> None:
    """Fail a run that quarantined records under ``--on-error fail``, or past ``--max-quarantined``."""
    if spec.on_error == "fail" and quarantine_count:
        first = quarantined.select(f"{C.FIRST}.*").orderBy("file", "file_pos", "sub_pos").first()
        raise QuarantineError(
            f"cannot decode {position_text(first['file'], first['line'], first['file_pos'], first['sub_pos'])}: "
            f"{first['reason']} (--on-error fail; rerun with --on-error quarantine to set such records aside)"
        )
    if spec.max_quarantined is not None:
        _check_quarantine_limit(spec, target, quarantined, groups, quarantine_count, history)


def _write_tables(
    spec: SnapshotSpec,
    target: OutputTarget,
    tables: list[str],
    schemas: dict[str, TableSchema],
    resolved: DataFrame,
    versions: DataFrame | None,
    prewritten: Prewritten | None,
) -> dict[str, str]:
    """One Parquet folder per table in the staging folder (or a prewritten one moved in); return
    each table's final path."""
    table_paths: dict[str, str] = {}
    for done, table in enumerate(tables):
        progress.step(done, len(tables), "tables")
        columns = schemas[table].columns
        table_paths[table] = target.table_uri(table)
        written, written_columns = (prewritten or {}).get(table, (None, None))
        adopted = written is not None and written_columns == tuple(columns.items())
        if adopted and target.adopt(table_folder(table), written):
            continue
        image = F.col(C.IMAGE)
        select = [typed_value(image, col, t).alias(col) for col, t in columns.items()]
        if versions is not None:
            rows = versions.where(F.col("table") == table)
            select += version_columns(F.col(C.LAST), spec.with_metadata)
        else:
            rows = resolved.where((F.col(C.TAG) == C.TAG_ROW) & (F.col("table") == table) & F.col(C.EXISTS))
            if spec.with_metadata:
                select += metadata_columns(F.col(C.LAST))
        rows.select(*select).write.mode("overwrite").parquet(target.table_uri(table, staging=True))
    return table_paths


def _write_quarantine(quarantined: DataFrame, target: OutputTarget) -> None:
    """``_quarantine/`` in the staging folder: one JSON line per record, in landing order."""
    quarantined.select(
        F.col(f"{C.FIRST}.file").alias("file"),
        F.col(f"{C.FIRST}.line").alias("line"),
        F.col(f"{C.FIRST}.file_pos").alias("file_pos"),
        F.col(f"{C.FIRST}.sub_pos").alias("row"),
        F.col("table"),
        F.col(f"{C.FIRST}.reason").alias("reason"),
        F.col(f"{C.FIRST}.raw").alias("record"),
    ).orderBy("file", "file_pos", "row").coalesce(1).write.mode("overwrite").json(
        target.staging_uri(QUARANTINE_DIR)
    )


def _check_quarantine_limit(
    spec: SnapshotSpec,
    target: OutputTarget,
    quarantined: DataFrame,
    groups: list[Row],
    quarantine_count: int,
    history: bool,
) -> None:
    """Fail a run past ``--max-quarantined`` before it writes anything into its output.

    The output is left as it was (nothing is swapped in) and the staging folder is deleted, so
    the quarantine is first moved to the rejected folder beside the output, where the error
    says it is: the records are what the user needs to see why.
    """
    limit = spec.max_quarantined
    read = sum(int(g[C.EVENTS] or 0) for g in groups)
    if not limit.exceeded(quarantine_count, read):
        return
    reasons = quarantine_reasons(groups)
    _write_quarantine(quarantined, target)
    kept_at = target.keep_rejected(QUARANTINE_DIR)
    what = f"the {'history until' if history else 'snapshot as of'} {format_as_of(spec.as_of_ms)}"
    raise QuarantineLimitError(limit.failure(quarantine_count, read, reasons, what, kept_at, target.uri))

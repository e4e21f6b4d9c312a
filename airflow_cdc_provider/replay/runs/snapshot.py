"""One snapshot: read -> keys -> fold -> type -> write, for one AS OF.

Takes a ``SnapshotSpec``; gives the snapshot in its output folder and returns its metrics
(``run_snapshot``). ``rebuild`` is the run itself, which the other runs (``many_as_ofs``,
``history``) call with what they already decoded or folded.

The input is scanned once: decoding, keying and the fold are one lazy plan ending in one
aggregation, whose (small) result is persisted; everything after it (quarantine, typing, tables,
metrics) reads that result, never the landed files again. Two cases read the decoded events more
than once and keep them instead: a run that writes ``_cdc_state`` (incremental bookkeeping), and a
landing with an applied truncate or column drop (found by the single pass, then folded again).
See docs/design.md, "The flow".
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Row, SparkSession

from airflow_cdc_provider.formats import get_decoder
from airflow_cdc_provider.formats.events import Q_NOT_JSON
from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.replay.fold_step import FoldedRun, fold_onto_base
from airflow_cdc_provider.replay.group_counts import group_counts, needs_table_changes, partial_updates
from airflow_cdc_provider.replay.output import OutputTarget
from airflow_cdc_provider.replay.read import Input, decode_function, read_all, read_input
from airflow_cdc_provider.replay.salvage import with_truncated_tails
from airflow_cdc_provider.replay.spec import SnapshotSpec
from airflow_cdc_provider.replay.typed import run_typing_query
from airflow_cdc_provider.replay.versions import shown_versions
from airflow_cdc_provider.replay.write import Prewritten, write_output
from airflow_cdc_provider.spark import progress


def run_snapshot(spark: SparkSession, spec: SnapshotSpec) -> dict:
    """Rebuild the snapshot described by ``spec``; return the metrics written beside it."""
    target = OutputTarget(spark, spec.output)
    target.refuse_overlap(spec.inputs)
    with target.exclusive():  # lock, check, clean leftovers; abort the staging on any failure
        return rebuild(spark, spec, target)


def rebuild(
    spark: SparkSession,
    spec: SnapshotSpec,
    target: OutputTarget,
    shared: Input | None = None,
    folded: tuple[DataFrame, list[Row]] | None = None,
    history: bool = False,
    prewritten: Prewritten | None = None,
) -> dict:
    """One snapshot; ``shared``: events decoded and kept by the caller (which releases them);
    ``folded``: their resolved fold for this AS OF and its ``group_counts``, kept by the caller;
    ``history``: write each table's versions (``shared`` must be kept) instead of its rows;
    ``prewritten``: tables the caller already wrote for this run (``runs.many_as_ofs``)."""
    partial_images = get_decoder(spec.source_format).partial_images
    decode = decode_function(spark, spec)
    read = shared or read_input(spark, spec, decode, partial_images)
    if folded is not None:
        result = FoldedRun(folded[0], folded[0], [])
    else:
        read, result = fold_onto_base(spark, spec, read, decode, partial_images)
    groups = folded[1] if folded is not None else run_typing_query(group_counts, result.resolved)
    # A full-image format whose records turned out partial (Debezium updates that left unavailable
    # values out) is folded again as a format with partial images.
    turned_partial = folded is None and not partial_images and partial_updates(groups)
    if turned_partial or (not read.kept and needs_table_changes(groups)):
        # The single pass assumed full images and no truncate or column drop (which change rows of
        # every key of a table, so the counting window and each key's state need them before they
        # run). Decode again, keep the events, and fold with the tables' changes.
        partial_images = partial_images or turned_partial
        result.release()
        if not read.kept:
            read = read_all(spark, spec, decode, read.files, read.skipped, None, None)
        read, result = fold_onto_base(spark, spec, read, decode, partial_images)
        groups = run_typing_query(group_counts, result.resolved)
    if any(g[C.TAG] == C.TAG_QUARANTINED and g["reason"] == Q_NOT_JSON for g in groups):
        if (named := with_truncated_tails(spark, read.files, result.resolved)) is not None:
            result.resolved.unpersist()
            result.resolved = named
            groups = run_typing_query(group_counts, named)
    if history:
        progress.phase("versions")
    versions = shown_versions(spark, spec, read, result.carries, partial_images) if history else None
    try:
        return write_output(spark, spec, target, read, result.resolved, groups, versions, prewritten)
    finally:
        result.release()
        if versions is not None:
            versions.unpersist()
        if read.kept and read is not shared:
            read.events.unpersist()

"""Several AS OFs: one snapshot per AS OF (runs that differ only in AS OF and output), one scan.

Takes the specs of the runs (``SnapshotSpec.each_from_args`` of several ``--as-of``); gives each
snapshot in its own output folder, written and committed on its own with the metrics a run of that
AS OF alone would write, and returns the metrics in the order of the specs. Full-image formats fold
every AS OF in the landing's one pass (``spans.fold_spans``), as a single rebuild folds its one;
otherwise, or when that fold cannot stand for each AS OF's own, the events are decoded once, kept,
and folded once per AS OF (``runs.snapshot.rebuild``). See docs/design.md, "Several AS OFs".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from airflow_cdc_provider.formats import get_decoder
from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.replay.counts import clustered_for_fold
from airflow_cdc_provider.replay.group_counts import needs_table_changes, partial_updates, span_group_counts
from airflow_cdc_provider.replay.keys import tagged_events
from airflow_cdc_provider.replay.output import OutputTarget
from airflow_cdc_provider.replay.read import (
    SKIPPED_PARTITION,
    Decode,
    Input,
    decode_function,
    ignoring_unselected_tables,
)
from airflow_cdc_provider.replay.resolve import resolve
from airflow_cdc_provider.replay.runs.snapshot import rebuild, run_snapshot
from airflow_cdc_provider.replay.schemas import SchemaDriftError
from airflow_cdc_provider.replay.shuffles import size_shuffles
from airflow_cdc_provider.replay.spans import (
    first_reading_as_ofs,
    fold_spans,
    rows_at_as_of,
    span_rows,
    with_as_of_indexes,
)
from airflow_cdc_provider.replay.spec import SnapshotSpec
from airflow_cdc_provider.replay.typed import run_typing_query, table_typing, typed_value
from airflow_cdc_provider.replay.write import Prewritten
from airflow_cdc_provider.spark import progress
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile, checkpoint_salvaging, list_landed_files

log = logging.getLogger(__name__)

# The fold of every AS OF at once: resolved spans, the (lazy) decoded events, the files as read,
# and each AS OF's group counts (by index into the sorted AS OFs).
_SpansFold = tuple[DataFrame, DataFrame, list[LandedFile], list[list[Row]]]


def run_snapshots(spark: SparkSession, specs: Sequence[SnapshotSpec]) -> list[dict]:
    """Rebuild one snapshot per spec (runs that differ only in AS OF and output) from one scan.

    Each snapshot takes the events of the files its own AS OF reads (partitions after it +
    lateness are left out, as a run of that AS OF alone leaves them) and is written and committed
    on its own, with the metrics that run would write. Full-image formats fold every AS OF in the
    landing's one pass (``_fold_as_ofs_together``), as a single rebuild folds its one; otherwise, or
    when that fold cannot stand for each AS OF's own, the events are decoded once, kept, and
    folded once per AS OF. Returns the metrics in the order of ``specs``.
    """
    if len(specs) == 1:
        return [run_snapshot(spark, specs[0])]
    first = specs[0]
    if any(replace(s, as_of_ms=first.as_of_ms, output=first.output) != first for s in specs):
        raise ValueError("run_snapshots: the runs must differ only in AS OF and output")
    targets = [OutputTarget(spark, s.output) for s in specs]
    for target in targets:
        target.refuse_overlap(first.inputs)
    decode = decode_function(spark, first)
    listed = list_landed_files(spark, list(first.inputs))
    wanted, unread = first.partitions.split(listed, max(s.as_of_ms for s in specs))
    progress.phase("listing", files=wanted, unread=unread)
    size_shuffles(spark, wanted)
    order = sorted(range(len(specs)), key=lambda k: specs[k].as_of_ms)
    reads = [{f.path for f in specs[k].partitions.split(listed, specs[k].as_of_ms)[0]} for k in order]
    # Full images only; the held-back count of whole transactions does not combine.
    combinable = not get_decoder(first.source_format).partial_images and not first.whole_transactions
    folded = (
        _fold_as_ofs_together(spark, first, decode, wanted, [specs[k].as_of_ms for k in order], reads)
        if combinable
        else None
    )
    if folded is None:
        return _rebuild_each_as_of(spark, specs, targets, decode, listed, wanted, order, reads)
    return _write_each_as_of(spark, specs, targets, listed, order, reads, folded)


def _write_each_as_of(
    spark: SparkSession,
    specs: Sequence[SnapshotSpec],
    targets: list[OutputTarget],
    listed: list[LandedFile],
    order: list[int],
    reads: list[set[str]],
    folded: _SpansFold,
) -> list[dict]:
    """Each AS OF's run from the one fold of them all (``_fold_as_ofs_together``), its tables
    written beforehand in one partitioned write per table where no row shows its landed record."""
    spans, events, decoded, groups = folded
    try:
        prewritten: list[Prewritten] = [{} for _ in specs]
        if not specs[0].with_metadata:
            typing_input = Input(events, decoded, {}, None, None, kept=False)
            prewritten = _prewrite_tables(specs, targets, order, spans, groups, typing_input)
        metrics = []
        for k, (spec, target) in enumerate(zip(specs, targets)):
            index = order.index(k)
            read = _input_of_as_of(events, decoded, listed, reads[index], kept=False)
            with target.exclusive():
                metrics.append(
                    rebuild(
                        spark,
                        spec,
                        target,
                        read,
                        (rows_at_as_of(spans, index), groups[index]),
                        prewritten=prewritten[k],
                    )
                )
        return metrics
    finally:
        spans.unpersist()
        targets[0].remove_scratch()


def _input_of_as_of(
    events: DataFrame, decoded: list[LandedFile], listed: list[LandedFile], paths: set[str], kept: bool
) -> Input:
    """What the run of one of several AS OFs reads: the files in ``paths`` of those decoded."""
    files = [f for f in decoded if f.path in paths]
    # One SQL text, not one JVM call per path: a landing of hourly files has hundreds.
    own = events if len(files) == len(decoded) else events.where(E.col("file").isin(sorted(paths)).column())
    unread = [f for f in listed if f.path not in paths]
    return Input(own, files, {SKIPPED_PARTITION: unread}, None, None, kept=kept)


def _fold_as_ofs_together(
    spark: SparkSession,
    spec: SnapshotSpec,
    decode: Decode,
    files: list[LandedFile],
    as_ofs: list[int],
    reads: list[set[str]],
) -> _SpansFold | None:
    """Every AS OF's resolved fold in one pass over the landing (``fold_spans``), materialised.

    Returns the resolved spans, the (lazy) decoded events, the files as read and each AS OF's
    ``group_counts`` (by index into the sorted ``as_ofs``); None when the one fold cannot stand
    for each AS OF's own: a truncate or column drop was applied (it changes every row of its
    table), or an event applies at an earlier AS OF than one before it in position order (the
    counting window assumes not).
    """
    decoded: list[DataFrame] = []

    def build(landed: list[LandedFile]) -> DataFrame:
        progress.phase("decoding", files=landed)  # one Spark pass with the fold of every AS OF
        decoded[:] = [decode(landed)]
        progress.phase("fold")
        staged = tagged_events(ignoring_unselected_tables(decoded[0], spec.tables))
        staged = with_as_of_indexes(staged, as_ofs, first_reading_as_ofs(spark, landed, reads))
        return resolve(span_rows(fold_spans(staged, len(as_ofs))), None)

    spans, files = checkpoint_salvaging(spark, files, build)
    try:
        by_index = run_typing_query(
            lambda r: span_group_counts(r, C.SPAN_FROM, C.SPAN_TO, C.AS_OF_INDEX), spans
        )
    except BaseException:
        spans.unpersist()
        raise
    groups = [[g for g in by_index if g[C.AS_OF_INDEX] == i] for i in range(len(as_ofs))]
    if any(needs_table_changes(g) for g in groups):
        log.info("several AS OFs: truncates or column drops; folding each AS OF on its own")
    elif any(g[C.OUT_OF_ORDER] for g in by_index):
        log.info("several AS OFs: event times run backwards across AS OFs; folding each AS OF on its own")
    elif any(partial_updates(g) for g in groups):
        log.info("several AS OFs: updates with unavailable values; folding each AS OF on its own")
    else:
        log.info("several AS OFs: one fold for all %d", len(as_ofs))
        return spans, decoded[0], files, groups
    spans.unpersist()
    return None


def _rebuild_each_as_of(
    spark: SparkSession,
    specs: Sequence[SnapshotSpec],
    targets: list[OutputTarget],
    decode: Decode,
    listed: list[LandedFile],
    wanted: list[LandedFile],
    order: list[int],
    reads: list[set[str]],
) -> list[dict]:
    """Several AS OFs folded one by one over events decoded once and kept, clustered by group and
    sorted, so that no fold shuffles or sorts them again."""
    progress.phase("decoding", files=wanted)
    decoded_events, decoded = checkpoint_salvaging(spark, wanted, decode)
    staged = tagged_events(ignoring_unselected_tables(decoded_events, specs[0].tables))
    events = clustered_for_fold(staged).persist()
    try:
        events.count()
        decoded_events.unpersist()
        metrics = []
        for k, (spec, target) in enumerate(zip(specs, targets)):
            read = _input_of_as_of(events, decoded, listed, reads[order.index(k)], kept=True)
            with target.exclusive():
                metrics.append(rebuild(spark, spec, target, read))
        return metrics
    finally:
        decoded_events.unpersist()
        events.unpersist()


def _prewrite_tables(
    specs: Sequence[SnapshotSpec],
    targets: list[OutputTarget],
    order: list[int],
    rows: DataFrame,
    groups: list[list[Row]],
    typing_input: Input,
) -> list[Prewritten]:
    """Every AS OF's tables from ``rows`` (``span_rows``, resolved) in one partitioned write per table.

    Written beside the first output, one folder per AS OF index; each AS OF's run moves its own
    in (``write``'s ``prewritten``), so the writes stay those of a run alone: same columns,
    same types, same rows. AS OFs whose table schemas differ get a write each. Returns, per spec,
    ``{table: (folder, columns)}``; empty when the outputs lie on different file systems.
    """
    scratch = targets[0].scratch_uri()
    if any(t.filesystem_id != targets[0].filesystem_id for t in targets):
        return [{} for _ in specs]
    layouts: dict[tuple[str, tuple], list[int]] = {}
    for index in range(len(specs)):
        try:
            tables, schemas, _, _ = table_typing(typing_input, rows_at_as_of(rows, index), groups[index])
        except SchemaDriftError:
            continue  # that AS OF's own run fails with it, after the snapshots before it are written
        for table in tables:
            layouts.setdefault((table, tuple(schemas[table].columns.items())), []).append(index)
    written: list[Prewritten] = [{} for _ in specs]
    for n, ((table, columns), indexes) in enumerate(sorted(layouts.items())):
        folder = f"{scratch}/{n}"
        _write_spans_table(rows, table, columns, indexes, folder)
        for index in indexes:
            written[order[index]][table] = (f"{folder}/{C.AS_OF_INDEX}={index}", columns)
    return written


def _write_spans_table(rows: DataFrame, table: str, columns: tuple, indexes: list[int], folder: str) -> None:
    """``table``'s rows at the AS OF ``indexes`` as ``columns``, one partition folder per index."""
    held = rows.where(
        (F.col(C.TAG) == C.TAG_ROW)
        & (F.col("table") == table)
        & F.col(C.EXISTS)
        & (F.col(C.SPAN_FROM) <= max(indexes))
        & (F.col(C.SPAN_TO) > min(indexes))
    )
    # Typed once per span, then repeated for each AS OF it holds at.
    image = F.col(C.IMAGE)
    typed = held.select(
        *[typed_value(image, col, t).alias(col) for col, t in columns], C.SPAN_FROM, C.SPAN_TO
    )
    exploded = typed.select(
        *[F.col(col) for col, _ in columns],
        F.explode(F.sequence(F.col(C.SPAN_FROM), F.col(C.SPAN_TO) - 1)).alias(C.AS_OF_INDEX),
    ).where(F.col(C.AS_OF_INDEX).isin(indexes))
    exploded.write.partitionBy(C.AS_OF_INDEX).parquet(folder)

"""Runs one snapshot rebuild: decode, fold, type, write atomically, count.

The input is scanned once: decoding, keying and the fold are one lazy plan ending in one
aggregation, whose (small) result is persisted; everything after it (quarantine, typing, tables,
metrics) reads that result, never the landed files again. Two cases read the decoded events more
than once and keep them instead: a run that writes ``_cdc_state`` (incremental bookkeeping), and a
landing with an applied truncate or column drop (found by the single pass, then folded again).
Several AS OFs (``run_snapshots``) are folded together in that one pass where ``fold_spans`` can
stand for each one's fold; otherwise the events are decoded once, kept, and folded once per AS OF.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from airflow_cdc_provider.contract.as_of import format_as_of
from airflow_cdc_provider.contract.metrics import QUARANTINE_DIR, STATE_DIR, STATE_FILE
from airflow_cdc_provider.contract.tables import check_unambiguous, table_folder
from airflow_cdc_provider.formats import get_decoder
from airflow_cdc_provider.formats.events import (
    IGNORED_TABLE_FILTER,
    KIND_CHANGE,
    KIND_IGNORED,
    Q_NOT_JSON,
    Q_TRUNCATED,
    position_text,
    table_matches,
)
from airflow_cdc_provider.replay.base_state import (
    ROWS_DIR,
    BaseState,
    base_rows_as_keyed,
    carried_as_resolved,
    split_base_rows,
    state_rows,
    unreplayable_partials,
)
from airflow_cdc_provider.replay.fold import (
    OUT_OF_ORDER,
    SPAN_FROM,
    SPAN_TO,
    TAG_NO_KEY,
    TAG_QUARANTINED,
    TAG_ROW,
    TAG_TRUNCATE,
    VISIBLE,
    at_index,
    clustered_for_fold,
    fold,
    fold_spans,
    keyed_events,
    ordering,
    span_rows,
    staged_events,
    table_changes,
    with_buckets,
    with_keys,
)
from airflow_cdc_provider.replay.history import FROM_MS, TO_MS, VALID_FROM, VALID_TO, row_versions
from airflow_cdc_provider.replay.metrics import (
    build_metrics,
    final_row,
    group_counts,
    needs_table_changes,
    partial_updates,
    quarantine_reasons,
    span_group_counts,
    unavailable_values,
    with_versions,
)
from airflow_cdc_provider.replay.output import OutputTarget
from airflow_cdc_provider.replay.plan import (
    SKIPPED_IN_BASE,
    SKIPPED_PARTITION,
    Input,
    decode_json,
    keys_json,
    read_all,
    read_input,
    size_shuffles,
)
from airflow_cdc_provider.replay.resolve import (
    chain_carries,
    observe_partial_moves,
    resolve,
    with_table_changes,
)
from airflow_cdc_provider.replay.schemas import (
    SchemaDriftError,
    SchemaInputs,
    key_columns_of,
    schema_inputs,
    table_schemas,
    typed_value,
)
from airflow_cdc_provider.replay.spec import SnapshotSpec
from airflow_cdc_provider.replay.transactions import with_transaction_times
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import (
    LandedFile,
    checkpoint_salvaging,
    list_landed_files,
    split_lines,
    unterminated_last_records,
)
from airflow_cdc_provider.spark.sqlexpr import Expr

log = logging.getLogger(__name__)


class ReplayError(RuntimeError):
    """A run that cannot produce a correct snapshot; the message says what to do."""


class MissingKeyError(ReplayError):
    pass


class QuarantineError(ReplayError):
    """``--on-error fail`` and a record could not be decoded."""


class QuarantineLimitError(ReplayError):
    """More records were quarantined than ``--max-quarantined`` allows; the output was not replaced."""


_T = TypeVar("_T")


class DuplicateColumnError(ReplayError):
    """A row's image names one column twice (a JSON object that repeats a key)."""


def _counted(count: Callable[[DataFrame], _T], rows: DataFrame, typed: Expr | None = None) -> _T:
    """``count(rows)``: a query that types rows (``group_counts``, ``span_group_counts``, the
    history's ``_typed_by_versions``). A row image that names a column twice fails Spark's typing
    with ``VARIANT_DUPLICATE_KEY``, which names neither record nor column; that failure is replaced
    by one that does. ``typed`` selects the rows the query types (default: the final rows).
    Nothing is checked up front: the search runs only when the typing has already failed."""
    try:
        return count(rows)
    except Exception as error:
        if "VARIANT_DUPLICATE_KEY" not in str(error):
            raise
        raise _duplicate_column(rows, final_row() if typed is None else typed) from error


def _duplicate_column(rows: DataFrame, typed: Expr) -> DuplicateColumnError:
    image = E.col("image")
    repeated = E.size(E.array_distinct(E.map_keys(image))) < E.size(image)
    found = (
        rows.where((typed & repeated).column())
        .select("table", E.map_keys(image).alias("names").column(), "last")
        .limit(1)
        .collect()
    )
    if not found:
        return DuplicateColumnError("a row image names a column twice (Spark: VARIANT_DUPLICATE_KEY)")
    row = found[0]
    names, last = row["names"], row["last"]
    twice = next(name for i, name in enumerate(names) if name in names[:i])
    where = (
        position_text(last["file"], last["line"], last["file_pos"], last["sub_pos"])
        if last is not None and last["file"]
        else "the base's state"
    )
    return DuplicateColumnError(
        f"{where}: the row of table {row['table']} names column `{twice}` twice, and a row holds one "
        "value per column. Remove the repeated key from that record (or the record), then run again."
    )


def _select_tables(events: DataFrame, tables: tuple[str, ...]) -> DataFrame:
    if not tables:
        return events
    t = F.col("table")
    selected = table_matches(E.col("table"), tables).column()
    drop = (F.col("kind") == KIND_CHANGE) | (F.col("kind") == KIND_IGNORED)
    drop = drop & t.isNotNull() & ~selected
    return events.withColumns(
        {
            "reason": F.when(drop, F.lit(IGNORED_TABLE_FILTER)).otherwise(F.col("reason")),
            "kind": F.when(drop, F.lit(KIND_IGNORED)).otherwise(F.col("kind")),
        }
    )


def _position(last: F.Column) -> F.Column:
    """``_cdc_position``: the source's log position, else ``file:line`` in the landing."""
    return F.when(
        F.size(last["log_pos"]) > 0,
        F.array_join(F.transform(last["log_pos"], lambda p: p.cast("string")), ":"),
    ).otherwise(F.concat_ws(":", last["file"], last["line"].cast("string")))


def _lineage_columns(last: F.Column) -> list[F.Column]:
    """``_cdc_file``, ``_cdc_line``: the landed record that last wrote the row, to trace it back.

    A record without a line (an Avro container's record, a Parquet row, a raw message file) has
    its 1-based index in the file instead: its ``file_pos`` counts records from 0. Records of
    split-read files have their lines filled in before this (``_with_split_lines``).
    """
    return [
        last["file"].alias("_cdc_file"),
        F.when(last["file"].isNotNull(), F.coalesce(last["line"], last["file_pos"] + 1)).alias("_cdc_line"),
    ]


def _metadata_columns(last: F.Column) -> list[F.Column]:
    return [
        last["op"].alias("_cdc_op"),
        F.timestamp_millis(last["event_ms"]).alias("_cdc_event_ts"),
        _position(last).alias("_cdc_position"),
        *_lineage_columns(last),
    ]


def _version_columns(last: F.Column, with_metadata: bool) -> list[F.Column]:
    """A history's columns after the table's own (``--with-metadata`` adds the writer's own time
    and its landed record)."""
    columns = [
        F.timestamp_millis(F.col(FROM_MS)).alias(VALID_FROM),
        F.timestamp_millis(F.col(TO_MS)).alias(VALID_TO),
        last["op"].alias("_cdc_op"),
        _position(last).alias("_cdc_position"),
    ]
    if with_metadata:
        columns += [F.timestamp_millis(last["event_ms"]).alias("_cdc_event_ts"), *_lineage_columns(last)]
    return columns


def _typed_by_versions(groups: list, found: DataFrame) -> tuple[list, dict[str, int]]:
    """``groups`` whose row shapes (value types, column orders) are those of every version, and
    the number of versions per table: one query."""
    shapes = {
        r["table"]: r
        for r in found.groupBy("table")
        .agg(
            F.count(F.lit(1)).alias("versions"),
            F.schema_of_variant_agg(F.to_variant_object("image")).alias("row_schema"),
            F.collect_set(F.map_keys("image")).alias("sequences"),
        )
        .collect()
    }
    typed = []
    for g in groups:
        if g["_tag"] == TAG_ROW and g["table"] in shapes:
            shape = shapes[g["table"]]
            g = Row(**{**g.asDict(), "row_schema": shape["row_schema"], "sequences": shape["sequences"]})
        typed.append(g)
    return typed, {table: r["versions"] for table, r in shapes.items()}


def run_snapshot(spark: SparkSession, spec: SnapshotSpec) -> dict:
    """Rebuild the snapshot described by ``spec``; return the metrics written beside it."""
    target = OutputTarget(spark, spec.output)
    target.refuse_overlap(spec.inputs)
    with target.exclusive():  # lock, check, clean leftovers; abort the staging on any failure
        return _rebuild(spark, spec, target)


def run_snapshots(spark: SparkSession, specs: Sequence[SnapshotSpec]) -> list[dict]:
    """Rebuild one snapshot per spec (runs that differ only in AS OF and output) from one scan.

    Each snapshot takes the events of the files its own AS OF reads (partitions after it +
    lateness are left out, as a run of that AS OF alone leaves them) and is written and committed
    on its own, with the metrics that run would write. Full-image formats fold every AS OF in the
    landing's one pass (``_fold_every_as_of``), as a single rebuild folds its one; otherwise, or
    when that fold cannot stand for each AS OF's own, the events are decoded once, kept, and
    folded once per AS OF. Returns the metrics in the order of ``specs``.
    """
    if len(specs) == 1:
        return [run_snapshot(spark, specs[0])]
    first = specs[0]
    if any(replace(s, as_of_ms=first.as_of_ms, output=first.output) != first for s in specs):
        raise ValueError("run_snapshots: the runs must differ only in AS OF and output")
    if first.writes_state:
        raise ValueError("several AS OFs cannot be combined with --base or --keep-state")
    targets = [OutputTarget(spark, s.output) for s in specs]
    for target in targets:
        target.refuse_overlap(first.inputs)
    decode = _decoding(spark, first)
    listed = list_landed_files(spark, list(first.inputs))
    wanted, _ = first.partitions.split(listed, max(s.as_of_ms for s in specs))
    size_shuffles(spark, wanted)
    order = sorted(range(len(specs)), key=lambda k: specs[k].as_of_ms)
    reads = [{f.path for f in specs[k].partitions.split(listed, specs[k].as_of_ms)[0]} for k in order]
    # Full images only; the held-back count of whole transactions does not combine.
    combinable = not get_decoder(first.source_format).partial_images and not first.whole_transactions
    folded = (
        _fold_every_as_of(spark, first, decode, wanted, [specs[k].as_of_ms for k in order], reads)
        if combinable
        else None
    )
    if folded is None:
        return _fold_each_as_of(spark, specs, targets, decode, listed, wanted, order, reads)
    spans, events, decoded, groups = folded
    try:
        prewritten: list[dict] = [{} for _ in specs]
        if not first.with_metadata:
            typing = Input(events, decoded, {}, None, None, kept=False)
            prewritten = _write_tables_once(specs, targets, order, spans, groups, typing)
        metrics = []
        for k, (spec, target) in enumerate(zip(specs, targets)):
            index = order.index(k)
            read = _read_at(events, decoded, listed, reads[index], kept=False)
            with target.exclusive():
                metrics.append(
                    _rebuild(
                        spark,
                        spec,
                        target,
                        read,
                        (at_index(spans, index), groups[index]),
                        prewritten=prewritten[k],
                    )
                )
        return metrics
    finally:
        spans.unpersist()
        targets[0].remove_scratch()


def _read_at(
    events: DataFrame, decoded: list[LandedFile], listed: list[LandedFile], paths: set[str], kept: bool
) -> Input:
    """What the run of one of several AS OFs reads: the files in ``paths`` of those decoded."""
    files = [f for f in decoded if f.path in paths]
    # One SQL text, not one JVM call per path: a landing of hourly files has hundreds.
    own = events if len(files) == len(decoded) else events.where(E.col("file").isin(sorted(paths)).column())
    unread = [f for f in listed if f.path not in paths]
    return Input(own, files, {SKIPPED_PARTITION: unread}, None, None, kept=kept)


def _fold_every_as_of(
    spark: SparkSession,
    spec: SnapshotSpec,
    decode,
    files: list[LandedFile],
    as_ofs: list[int],
    reads: list[set[str]],
) -> tuple[DataFrame, DataFrame, list[LandedFile], list[list]] | None:
    """Every AS OF's resolved fold in one pass over the landing (``fold_spans``), materialised.

    Returns the resolved spans, the (lazy) decoded events, the files as read and each AS OF's
    ``group_counts`` (by index into the sorted ``as_ofs``); None when the one fold cannot stand
    for each AS OF's own: a truncate or column drop was applied (it changes every row of its
    table), or an event applies at an earlier AS OF than one before it in position order (the
    counting window assumes not).
    """
    decoded: list[DataFrame] = []

    def build(landed: list[LandedFile]) -> DataFrame:
        decoded[:] = [decode(landed)]
        staged = staged_events(_select_tables(decoded[0], spec.tables))
        staged = with_buckets(staged, as_ofs, _visible_from(spark, landed, reads))
        return resolve(span_rows(fold_spans(staged, len(as_ofs))), None)

    spans, files = checkpoint_salvaging(spark, files, build)
    try:
        by_index = _counted(lambda r: span_group_counts(r, SPAN_FROM, SPAN_TO, "_index"), spans)
    except BaseException:
        spans.unpersist()
        raise
    groups = [[g for g in by_index if g["_index"] == i] for i in range(len(as_ofs))]
    if any(needs_table_changes(g) for g in groups):
        log.info("several AS OFs: truncates or column drops; folding each AS OF on its own")
    elif any(g[OUT_OF_ORDER] for g in by_index):
        log.info("several AS OFs: event times run backwards across AS OFs; folding each AS OF on its own")
    elif any(partial_updates(g) for g in groups):
        log.info("several AS OFs: updates with unavailable values; folding each AS OF on its own")
    else:
        log.info("several AS OFs: one fold for all %d", len(as_ofs))
        return spans, decoded[0], files, groups
    spans.unpersist()
    return None


def _fold_each_as_of(
    spark: SparkSession,
    specs: Sequence[SnapshotSpec],
    targets: list[OutputTarget],
    decode,
    listed: list[LandedFile],
    wanted: list[LandedFile],
    order: list[int],
    reads: list[set[str]],
) -> list[dict]:
    """Several AS OFs folded one by one over events decoded once and kept, clustered by group and
    sorted, so that no fold shuffles or sorts them again."""
    decoded_events, decoded = checkpoint_salvaging(spark, wanted, decode)
    events = clustered_for_fold(staged_events(_select_tables(decoded_events, specs[0].tables))).persist()
    try:
        events.count()
        decoded_events.unpersist()
        metrics = []
        for k, (spec, target) in enumerate(zip(specs, targets)):
            read = _read_at(events, decoded, listed, reads[order.index(k)], kept=True)
            with target.exclusive():
                metrics.append(_rebuild(spark, spec, target, read))
        return metrics
    finally:
        decoded_events.unpersist()
        events.unpersist()


def _write_tables_once(
    specs: Sequence[SnapshotSpec],
    targets: list[OutputTarget],
    order: list[int],
    rows: DataFrame,
    groups: list[list],
    typing: Input,
) -> list[dict[str, tuple[str, tuple]]]:
    """Every AS OF's tables from ``rows`` (``span_rows``, resolved) in one partitioned write per table.

    Written beside the first output, one folder per AS OF index; each AS OF's run moves its own
    in (``_write_shown``'s ``prewritten``), so the writes stay those of a run alone: same columns,
    same types, same rows. AS OFs whose table schemas differ get a write each. Returns, per spec,
    ``{table: (folder, columns)}``; empty when the outputs lie on different file systems.
    """
    scratch = targets[0].scratch_uri()
    if any(t.fs.getUri() != targets[0].fs.getUri() for t in targets):
        return [{} for _ in specs]
    layouts: dict[tuple[str, tuple], list[int]] = {}
    for index in range(len(specs)):
        try:
            tables, schemas, _, _ = _table_typing(typing, at_index(rows, index), groups[index])
        except SchemaDriftError:
            continue  # that AS OF's own run fails with it, after the snapshots before it are written
        for table in tables:
            layouts.setdefault((table, tuple(schemas[table].columns.items())), []).append(index)
    written: list[dict[str, tuple[str, tuple]]] = [{} for _ in specs]
    for n, ((table, columns), indexes) in enumerate(sorted(layouts.items())):
        held = rows.where(
            (F.col("_tag") == TAG_ROW)
            & (F.col("table") == table)
            & F.col("exists")
            & (F.col(SPAN_FROM) <= max(indexes))
            & (F.col(SPAN_TO) > min(indexes))
        )
        # Typed once per span, then repeated for each AS OF it holds at.
        image = F.col("image")
        typed = held.select(
            *[typed_value(image, col, t).alias(col) for col, t in columns], SPAN_FROM, SPAN_TO
        )
        exploded = typed.select(
            *[F.col(col) for col, _ in columns],
            F.explode(F.sequence(F.col(SPAN_FROM), F.col(SPAN_TO) - 1)).alias("_index"),
        ).where(F.col("_index").isin(indexes))
        folder = f"{scratch}/{n}"
        exploded.write.partitionBy("_index").parquet(folder)
        for index in indexes:
            written[order[index]][table] = (f"{folder}/_index={index}", columns)
    return written


def run_history(spark: SparkSession, spec: SnapshotSpec) -> dict:
    """Write every version of every row up to ``spec.as_of_ms`` (``--until``); return the metrics.

    The events are decoded once and kept: the fold at ``--until`` gives the metrics, the
    quarantine and the current rows, and ``history.row_versions`` reads the same events again.
    """
    if spec.writes_state:
        raise ValueError("history cannot be combined with --base or --keep-state")
    target = OutputTarget(spark, spec.output)
    target.refuse_overlap(spec.inputs)
    with target.exclusive():
        listed, after = spec.partitions.split(list_landed_files(spark, list(spec.inputs)), spec.as_of_ms)
        read = read_all(spark, spec, _decoding(spark, spec), listed, {SKIPPED_PARTITION: after}, None, None)
        try:
            return _rebuild(spark, spec, target, read, history=True)
        finally:
            read.events.unpersist()


def _visible_from(spark: SparkSession, files: list[LandedFile], reads: list[set[str]]) -> DataFrame | None:
    """``file, _visible``: the first AS OF (index) that reads each file some AS OF leaves unread."""
    later = [(f.path, next(i for i, paths in enumerate(reads) if f.path in paths)) for f in files]
    later = [(path, index) for path, index in later if index > 0]
    if not later:
        return None
    return spark.createDataFrame(later, f"file string, {VISIBLE} int")


def _decoding(spark: SparkSession, spec: SnapshotSpec):
    """The run's decode step: landed files (and context files) to keyed canonical events."""
    decoder = get_decoder(spec.source_format)

    def decode(landed: list[LandedFile], context: list[LandedFile] = ()) -> DataFrame:
        options = replace(spec.decode_options, context_files=tuple(context))
        events = with_keys(decoder.decode(spark, landed, options), spec.keys)
        return with_transaction_times(events) if spec.whole_transactions else events

    return decode


def _rebuild(
    spark: SparkSession,
    spec: SnapshotSpec,
    target: OutputTarget,
    shared: Input | None = None,
    folded: tuple[DataFrame, list] | None = None,
    history: bool = False,
    prewritten: dict[str, tuple[str, tuple]] | None = None,
) -> dict:
    """One snapshot; ``shared``: events decoded and kept by the caller (which releases them);
    ``folded``: their resolved fold for this AS OF and its ``group_counts``, kept by the caller;
    ``history``: write each table's versions (``shared`` must be kept) instead of its rows;
    ``prewritten``: tables the caller already wrote for this run (``_write_tables_once``)."""
    partial_images = get_decoder(spec.source_format).partial_images
    decode = _decoding(spark, spec)
    read = shared or read_input(spark, spec, decode, partial_images)
    if folded is not None:
        result = _Folded(folded[0], folded[0], [])
    else:
        read, result = _fold_onto_base(spark, spec, read, decode, partial_images)
    groups = folded[1] if folded is not None else _counted(group_counts, result.resolved)
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
        read, result = _fold_onto_base(spark, spec, read, decode, partial_images)
        groups = _counted(group_counts, result.resolved)
    if any(g["_tag"] == TAG_QUARANTINED and g["reason"] == Q_NOT_JSON for g in groups):
        if (named := _cut_short_tails(spark, read.files, result.resolved)) is not None:
            result.resolved.unpersist()
            result.resolved = named
            groups = _counted(group_counts, named)
    versions = _versions(spark, spec, read, result, partial_images) if history else None
    try:
        return _write(spark, spec, target, read, result.resolved, groups, versions, prewritten)
    finally:
        result.release()
        if versions is not None:
            versions.unpersist()
        if read.kept and read is not shared:
            read.events.unpersist()


def _fold_onto_base(
    spark: SparkSession, spec: SnapshotSpec, read: Input, decode, partial_images: bool
) -> tuple[Input, _Folded]:
    """``_fold``, and the input it folded: with a base, everything again (a full rebuild) when a
    partial image sorts before the base's row of its key, which holds the row, not each column's
    history."""
    result = _fold(spark, spec, read, decode, partial_images)
    if read.base is None or not partial_images or not (older := unreplayable_partials(result.folded)):
        return read, result
    why = f"{older} key(s) have a partial image older than the base's row of the key (late or out of order)"
    result.release()
    read.events.unpersist()
    listed = [f for group in (read.files, read.skipped.get(SKIPPED_IN_BASE, [])) for f in group]
    read = read_all(spark, spec, decode, sorted(listed, key=lambda f: f.path), read.skipped, read.base, why)
    return read, _fold(spark, spec, read, decode, partial_images)


def _versions(
    spark: SparkSession, spec: SnapshotSpec, read: Input, result, partial_images: bool
) -> DataFrame:
    """The run's versions (``history.row_versions``), line numbers filled in, materialised once.

    Partial key changes carry into the versions the rows the fold's ``chain_carries`` rebuilt."""
    found = row_versions(
        _select_tables(read.events, spec.tables), spec.as_of_ms, partial_images, result.carries
    )
    shown = _with_split_lines(
        spark, read.files, found, quarantine=False, last=True, every_last=spec.with_metadata
    )
    return shown if shown is not found else found.localCheckpoint(eager=True)


@dataclass
class _Folded:
    """A run's fold: ``resolved`` (materialised, one row per group) and the frames kept for it."""

    resolved: DataFrame
    folded: DataFrame
    kept: list[DataFrame]
    changes: DataFrame | None = None  # table_changes of kept events
    carries: DataFrame | None = None  # resolve.chain_carries, when some key changed through a partial image

    def release(self) -> None:
        for frame in (self.resolved, *self.kept):
            frame.unpersist()


def _fold(spark: SparkSession, spec: SnapshotSpec, read: Input, decode, partial_images: bool) -> _Folded:
    """Fold the run's events and resolve each group's final row, materialised once.

    With kept events the tables' truncates and column drops are computed first. Lazy events make
    this the run's only pass over the landing (decode, key, one shuffle, window, aggregation), so
    it is where a damaged compressed file shows up: ``checkpoint_salvaging`` reads it again as
    far as it goes. With a base, only the base rows of keys this run's events touch join the
    fold; the others (``carried``) pass through unchanged. Formats with partial images keep the
    fold; its checkpoint also counts the keys that moved through a partial image, and only when
    there are some are their carried rows rebuilt (``chain_carries``: a few small jobs).
    """
    size_shuffles(spark, read.files)
    kept: list[DataFrame] = []
    folded_ref: list[DataFrame] = []
    changes_ref: list[DataFrame] = []
    carries_ref: list[DataFrame | None] = [None]

    def build(files: list[LandedFile]) -> DataFrame:
        if not read.kept and (read.events is None or files != read.files):  # first, or a salvaging retry
            read.files, read.events = files, decode(files)
        events = _select_tables(read.events, spec.tables)
        keyed = keyed_events(events, spec.as_of_ms)
        carried = None
        if read.base is not None:
            keyed = keyed.withColumn("_base", F.lit(False))
            touched, carried = split_base_rows(spark, read.base, keyed, read.whole_tables)
            keyed = keyed.unionByName(base_rows_as_keyed(touched, keyed))
        changes = None
        if read.kept:
            # Tiny (truncates and column drops only), read by the fold and by resolve: computed once.
            changes = table_changes(events, spec.as_of_ms).localCheckpoint(eager=True)
            kept.append(changes)
            changes_ref[:] = [changes]
        folded = fold(keyed, changes, partial_images)
        carries = None
        if partial_images:
            folded, moving = observe_partial_moves(folded)
            folded = folded.localCheckpoint(eager=True)
            kept.append(folded)
            if moving.get["groups"]:
                carries = chain_carries(with_table_changes(folded, changes))
                kept.append(carries)
        folded_ref[:] = [folded]
        carries_ref[:] = [carries]
        resolved = resolve(folded, changes, carries)
        if carried is not None:
            resolved = resolved.unionByName(carried_as_resolved(carried, resolved))
        return resolved

    # Checkpointing the per-key result lets the small jobs after it plan against it alone.
    if read.kept:
        resolved = build(read.files).localCheckpoint(eager=True)
    else:
        resolved, read.files = checkpoint_salvaging(spark, read.files, build)
    return _Folded(resolved, folded_ref[0], kept, changes_ref[0] if changes_ref else None, carries_ref[0])


def _cut_short_tails(spark: SparkSession, files: list[LandedFile], resolved: DataFrame) -> DataFrame | None:
    """``resolved`` with split-read files' unparsable last lines named ``truncated`` (None: none were).

    A whole-read file knows whether its last line ended with a line break; a split does not, so
    such a line is first set aside as ``not JSON``. Only runs when the counts show one.
    """
    first = F.col("first")
    not_json = (F.col("_tag") == TAG_QUARANTINED) & (first["reason"] == Q_NOT_JSON)
    if not any(f.split_read for f in files):
        return None
    paths = {
        r["file"] for r in resolved.where(not_json).select(first["file"].alias("file")).distinct().collect()
    }
    tails = unterminated_last_records(spark, files, paths).collect()
    if not tails:
        return None
    cut = F.broadcast(
        spark.createDataFrame([(t["file"], t["file_pos"]) for t in tails], "_t_file string, _t_pos long")
    )
    at_tail = (first["file"] == F.col("_t_file")) & (first["file_pos"] == F.col("_t_pos"))
    named = (
        resolved.join(cut, at_tail, "left")
        .withColumn(
            "first",
            F.when(not_json & at_tail, first.withField("reason", F.lit(Q_TRUNCATED))).otherwise(first),
        )
        .drop("_t_file", "_t_pos")
    )
    return named.localCheckpoint(eager=True)


def _with_split_lines(
    spark: SparkSession,
    files: list[LandedFile],
    resolved: DataFrame,
    quarantine: bool,
    last: bool,
    every_last: bool = False,
) -> DataFrame:
    """``resolved`` with the line numbers of split-read records filled in where a run shows them.

    ``quarantine``: the quarantined records' (``first``); ``last``: each row's last event (for
    ``--with-metadata``, ``_cdc_state`` and a history's versions), where it has no log position
    to show instead; ``every_last``: every row's, log position or not (``_cdc_line``). Costs a
    text-only read of the split files involved, when any is asked about.
    """
    if not (quarantine or last) or not any(f.split_read for f in files):
        return resolved
    fields = [("first", TAG_QUARANTINED)] * quarantine + [("last", TAG_ROW)] * (last or every_last)
    wanted = None
    for field, tag in fields:
        ev = F.col(field)
        unpositioned = field == "last" and not every_last
        shown = F.coalesce(F.size(ev["log_pos"]) <= 0, F.lit(True)) if unpositioned else F.lit(True)
        asked = resolved.where(
            (F.col("_tag") == tag) & ev.isNotNull() & ev["line"].isNull() & ev["file"].isNotNull() & shown
        ).select(ev["file"].alias("file"), ev["file_pos"].alias("file_pos"))
        wanted = asked if wanted is None else wanted.unionByName(asked)
    if wanted.isEmpty():
        return resolved
    lines = split_lines(spark, files, wanted.distinct()).localCheckpoint(eager=True)
    out = resolved
    for field, _tag in fields:
        found = lines.select(
            F.col("file").alias("_l_file"), F.col("file_pos").alias("_l_pos"), F.col("line").alias("_l_line")
        )
        ev = F.col(field)
        out = (
            out.join(
                F.broadcast(found),
                (ev["file"] == F.col("_l_file")) & (ev["file_pos"] == F.col("_l_pos")) & ev["line"].isNull(),
                "left",
            )
            .withColumn(
                field,
                F.when(ev.isNull(), ev).otherwise(
                    ev.withField("line", F.coalesce(ev["line"], F.col("_l_line")))
                ),
            )
            .drop("_l_file", "_l_pos", "_l_line")
        )
    filled = out.localCheckpoint(eager=True)
    lines.unpersist()
    return filled


def _write(
    spark,
    spec: SnapshotSpec,
    target: OutputTarget,
    read: Input,
    resolved: DataFrame,
    groups: list,
    versions: DataFrame | None = None,
    prewritten: dict[str, tuple[str, tuple]] | None = None,
) -> dict:
    keyless = sorted({g["table"] for g in groups if g["_tag"] == TAG_NO_KEY})
    if keyless:
        raise MissingKeyError(
            f"no key for table(s) {', '.join(keyless)}: the records do not name their key columns; "
            f"pass --key COL[,COL...] (or --key TABLE=COL,... per table)"
        )
    quarantine_count = sum(g["n"] for g in groups if g["_tag"] == TAG_QUARANTINED)
    shown = _with_split_lines(
        spark,
        read.files,
        resolved,
        quarantine=quarantine_count > 0,
        last=spec.with_metadata or spec.writes_state,
        every_last=spec.with_metadata,
    )
    try:
        return _write_shown(spark, spec, target, read, shown, groups, quarantine_count, versions, prewritten)
    finally:
        if shown is not resolved:
            shown.unpersist()


def _table_typing(
    read: Input, resolved: DataFrame, groups: list
) -> tuple[list[str], dict, SchemaInputs, dict]:
    """The run's tables, their schemas, what typed them and their key columns (``table_schemas``)."""
    events = read.events
    base_tables = read.base.tables if read.base is not None else {}
    tables = sorted(
        {g["table"] for g in groups if g["_tag"] in (TAG_ROW, TAG_TRUNCATE) and g["table"]} | set(base_tables)
    )

    def first_seen(table: str, col: str, spark_type: str) -> tuple:
        """(position, file, type) of the first event declaring ``col`` as ``spark_type`` (error path only)."""
        hit = (
            events.where((F.col("table") == table) & (F.col("types")[col] == spark_type))
            .select(
                F.min_by(
                    F.struct(ordering().column().alias("o"), F.col("file").alias("f")), ordering().column()
                ).alias("m")
            )
            .first()["m"]
        )
        if hit is None:
            return ((), "an unknown file", spark_type)
        o = hit["o"]
        return (
            (tuple(o["log_pos"] or ()), o["event_ms"] or 0, hit["f"], o["file_pos"]),
            hit["f"],
            spark_type,
        )

    base_inputs = None
    if read.base is not None:
        base_inputs = SchemaInputs(
            signatures=[
                (t, [tuple(c) for c in sig]) for t, info in base_tables.items() for sig in info["signatures"]
            ],
            dropped={t: set(info["dropped"]) for t, info in base_tables.items()},
        )
    typing_inputs = schema_inputs(resolved, groups, base_inputs)
    key_columns = {t: info["key_columns"] for t, info in base_tables.items()} | key_columns_of(groups)
    schemas = table_schemas(groups, tables, first_seen, key_columns, typing_inputs)
    return tables, schemas, typing_inputs, key_columns


def _check_table_names(spec: SnapshotSpec, tables: list[str]) -> None:
    """Refuse a dotted table name in an option that named tables whose parts differ."""
    check_unambiguous(spec.tables, tables, "--table")
    check_unambiguous(spec.decode_options.table_keys, tables, "--key")
    check_unambiguous(spec.decode_options.table_columns, tables, "--columns")


def _write_shown(
    spark,
    spec: SnapshotSpec,
    target: OutputTarget,
    read: Input,
    resolved: DataFrame,
    groups: list,
    quarantine_count: int,
    versions: DataFrame | None = None,
    prewritten: dict[str, tuple[str, tuple]] | None = None,
) -> dict:
    """Write the tables (each one's rows, or its ``versions`` for a history), quarantine, metrics.

    ``prewritten``: tables already written elsewhere (``_write_tables_once``), as (folder, columns):
    moved in instead of written when they have this run's columns.
    """
    quarantined = resolved.where(F.col("_tag") == TAG_QUARANTINED)
    if spec.on_error == "fail" and quarantine_count:
        first = quarantined.select("first.*").orderBy("file", "file_pos", "sub_pos").first()
        raise QuarantineError(
            f"cannot decode {position_text(first['file'], first['line'], first['file_pos'], first['sub_pos'])}: "
            f"{first['reason']} (--on-error fail; rerun with --on-error quarantine to set such records aside)"
        )
    if spec.max_quarantined is not None:
        _check_quarantine_limit(spec, target, quarantined, groups, quarantine_count, versions is not None)

    version_counts: dict[str, int] = {}
    if versions is not None:
        # A history's tables are typed from every version, not only the current rows.
        groups, version_counts = _counted(
            lambda v: _typed_by_versions(groups, v), versions, E.col("image").isNotNull()
        )
    tables, schemas, typing_inputs, key_columns = _table_typing(read, resolved, groups)
    _check_table_names(spec, tables)
    table_paths: dict[str, str] = {}
    for table in tables:
        columns = schemas[table].columns
        table_paths[table] = target.table_uri(table)
        written, written_columns = (prewritten or {}).get(table, (None, None))
        adopted = written is not None and written_columns == tuple(columns.items())
        if adopted and target.adopt(table_folder(table), written):
            continue
        image = F.col("image")
        select = [typed_value(image, col, t).alias(col) for col, t in columns.items()]
        if versions is not None:
            rows = versions.where(F.col("table") == table)
            select += _version_columns(F.col("last"), spec.with_metadata)
        else:
            rows = resolved.where((F.col("_tag") == TAG_ROW) & (F.col("table") == table) & F.col("exists"))
            if spec.with_metadata:
                select += _metadata_columns(F.col("last"))
        rows.select(*select).write.mode("overwrite").parquet(target.table_uri(table, staging=True))

    if quarantine_count:
        _write_quarantine(quarantined, target)

    unavailable = unavailable_values(resolved, groups)
    metrics = build_metrics(spec, target, groups, table_paths, read, quarantine_count, unavailable)
    if versions is not None:
        metrics = with_versions(metrics, version_counts)
    if spec.writes_state:
        _write_state(spec, target, read, resolved, typing_inputs, key_columns, metrics)
    target.write_metrics(metrics)
    target.commit()
    log.info("snapshot of %d table(s) as of %s written to %s", len(tables), metrics["as_of"], target.uri)
    return metrics


def _write_quarantine(quarantined: DataFrame, target: OutputTarget) -> None:
    """``_quarantine/`` in the staging folder: one JSON line per record, in landing order."""
    quarantined.select(
        F.col("first.file").alias("file"),
        F.col("first.line").alias("line"),
        F.col("first.file_pos").alias("file_pos"),
        F.col("first.sub_pos").alias("row"),
        F.col("table"),
        F.col("first.reason").alias("reason"),
        F.col("first.raw").alias("record"),
    ).orderBy("file", "file_pos", "row").coalesce(1).write.mode("overwrite").json(
        target.staging_uri(QUARANTINE_DIR)
    )


def _check_quarantine_limit(
    spec: SnapshotSpec,
    target: OutputTarget,
    quarantined: DataFrame,
    groups: list,
    quarantine_count: int,
    history: bool,
) -> None:
    """Fail a run past ``--max-quarantined`` before it writes anything into its output.

    The output is left as it was (nothing is swapped in) and the staging folder is deleted, so
    the quarantine is first moved to the rejected folder beside the output, where the error
    says it is: the records are what the user needs to see why.
    """
    limit = spec.max_quarantined
    read = sum(int(g["n"] or 0) for g in groups)
    if not limit.exceeded(quarantine_count, read):
        return
    reasons = quarantine_reasons(groups)
    _write_quarantine(quarantined, target)
    kept_at = target.keep_rejected(QUARANTINE_DIR)
    what = f"the {'history until' if history else 'snapshot as of'} {format_as_of(spec.as_of_ms)}"
    raise QuarantineLimitError(limit.failure(quarantine_count, read, reasons, what, kept_at, target.uri))


def _lines_complete(spec: SnapshotSpec, read: Input) -> bool:
    """Whether every row of the state carries its last event's line: filled for all of them with
    ``--with-metadata``; otherwise exact only where no file was read in splits, in this run and
    in its base."""
    if spec.with_metadata:
        return True
    unsplit = not any(f.split_read for f in read.files)
    return unsplit and (read.base is None or read.base.lines_complete)


def _write_state(
    spec: SnapshotSpec,
    target: OutputTarget,
    read: Input,
    resolved: DataFrame,
    typing_inputs: SchemaInputs,
    key_columns: dict[str, list[str]],
    metrics: dict,
) -> None:
    """``_cdc_state/``: what a later ``--base`` run starts from (see replay/base_state.py)."""
    state_rows(resolved).write.mode("overwrite").parquet(target.staging_uri(STATE_DIR, ROWS_DIR))
    base = read.base
    files = dict(base.files) if base is not None else {}
    for landed in read.files:
        files[landed.path] = [landed.size, read.horizons.get(landed.path)]
    tables = {}
    for table, entry in metrics["tables"].items():
        tables[table] = {
            "signatures": sorted(
                {tuple(map(tuple, sig)) for t, sig in typing_inputs.signatures if t == table}
            ),
            "dropped": sorted(typing_inputs.dropped.get(table, ())),
            "key_columns": key_columns.get(table, []),
            "last_event_ms": entry["last_event_ms"],
        }
    state = BaseState(
        uri=target.final_uri(STATE_DIR),
        format=spec.source_format,
        as_of_ms=spec.as_of_ms,
        keys=keys_json(spec.keys),
        tables_filter=sorted(spec.tables),
        tables=tables,
        files=files,
        decode=decode_json(spec),
        lines_complete=_lines_complete(spec, read),
    )
    target.write_text(f"{STATE_DIR}/{STATE_FILE}", state.to_json())

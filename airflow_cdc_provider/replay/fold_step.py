"""The fold step of one run: its events (and its base's rows) keyed, folded and resolved, once.

Takes the run's ``Input`` (events lazy or kept) and decode step. Gives a ``FoldedRun``: the
resolved rows, materialised (one row per group), and the frames kept for them. With lazy events
this is the run's only pass over the landing (decode, key, one shuffle, window, aggregation), so it
is where a damaged compressed file shows up: ``checkpoint_salvaging`` reads it again as far as it
goes. Stages: ``keys`` -> ``counts``/``fold`` -> ``resolve``, with ``table_changes`` for kept events
and ``base_state`` for an incremental run. See docs/design.md, "Replay semantics".
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.replay.base_state import (
    base_rows_as_keyed,
    carried_as_resolved,
    split_base_rows,
    unreplayable_partials,
)
from airflow_cdc_provider.replay.fold import fold
from airflow_cdc_provider.replay.keys import with_as_of_flags
from airflow_cdc_provider.replay.read import (
    SKIPPED_IN_BASE,
    Decode,
    Input,
    ignoring_unselected_tables,
    read_all,
)
from airflow_cdc_provider.replay.resolve import (
    chain_carries,
    observe_partial_moves,
    partial_moves_seen,
    resolve,
    with_table_changes,
)
from airflow_cdc_provider.replay.shuffles import size_shuffles
from airflow_cdc_provider.replay.spec import SnapshotSpec
from airflow_cdc_provider.replay.table_changes import table_changes
from airflow_cdc_provider.spark import progress
from airflow_cdc_provider.spark.reader import LandedFile, checkpoint_salvaging


@dataclass
class FoldedRun:
    """A run's fold: ``resolved`` (materialised, one row per group) and the frames kept for it."""

    resolved: DataFrame
    folded: DataFrame
    kept: list[DataFrame]
    changes: DataFrame | None = None  # table_changes of kept events
    carries: DataFrame | None = None  # resolve.chain_carries, when some key changed through a partial image

    def release(self) -> None:
        for frame in (self.resolved, *self.kept):
            frame.unpersist()


def fold_onto_base(
    spark: SparkSession, spec: SnapshotSpec, read: Input, decode: Decode, partial_images: bool
) -> tuple[Input, FoldedRun]:
    """``fold_and_resolve``, and the input it folded: with a base, everything again (a full
    rebuild) when a partial image sorts before the base's row of its key, which holds the row, not
    each column's history."""
    result = fold_and_resolve(spark, spec, read, decode, partial_images)
    if read.base is None or not partial_images or not (older := unreplayable_partials(result.folded)):
        return read, result
    why = f"{older} key(s) have a partial image older than the base's row of the key (late or out of order)"
    result.release()
    read.events.unpersist()
    listed = [f for group in (read.files, read.skipped.get(SKIPPED_IN_BASE, [])) for f in group]
    read = read_all(spark, spec, decode, sorted(listed, key=lambda f: f.path), read.skipped, read.base, why)
    return read, fold_and_resolve(spark, spec, read, decode, partial_images)


def fold_and_resolve(
    spark: SparkSession, spec: SnapshotSpec, read: Input, decode: Decode, partial_images: bool
) -> FoldedRun:
    """Fold the run's events and resolve each group's final row, materialised once.

    With kept events the tables' truncates and column drops are computed first. Lazy events are
    decoded here (``read`` then holds them and the files as read). With a base, only the base rows
    of keys this run's events touch join the fold; the others (``carried``) pass through unchanged.
    Formats with partial images keep the fold; its checkpoint also counts the keys that moved
    through a partial image, and only when there are some are their carried rows rebuilt
    (``chain_carries``: a few small jobs).
    """
    size_shuffles(spark, read.files)
    kept: list[DataFrame] = []
    folded_ref: list[DataFrame] = []
    changes_ref: list[DataFrame] = []
    carries_ref: list[DataFrame | None] = [None]

    def build(files: list[LandedFile]) -> DataFrame:
        if not read.kept and (read.events is None or files != read.files):  # first, or a salvaging retry
            progress.phase("decoding", files=files)  # one Spark pass with the fold below
            read.files, read.events = files, decode(files)
        progress.phase("fold")
        events = ignoring_unselected_tables(read.events, spec.tables)
        keyed, carried = _with_base_rows(spark, read, with_as_of_flags(events, spec.as_of_ms))
        changes = None
        if read.may_change_tables:
            # Tiny (truncates and column drops only), read by the fold and by resolve: computed once.
            changes = table_changes(events, spec.as_of_ms).localCheckpoint(eager=True)
            kept.append(changes)
            changes_ref[:] = [changes]
        folded, carries = _fold_and_carry(keyed, changes, partial_images, kept)
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
    return FoldedRun(resolved, folded_ref[0], kept, changes_ref[0] if changes_ref else None, carries_ref[0])


def _with_base_rows(spark: SparkSession, read: Input, keyed: DataFrame) -> tuple[DataFrame, DataFrame | None]:
    """``keyed`` with the base's rows of the keys it touches, and the base's other rows (None
    without a base), which pass the fold by."""
    if read.base is None:
        return keyed, None
    keyed = keyed.withColumn(C.BASE_ROW, F.lit(False))
    touched, carried = split_base_rows(spark, read.base, keyed, read.whole_tables)
    return keyed.unionByName(base_rows_as_keyed(touched, keyed)), carried


def _fold_and_carry(
    keyed: DataFrame, changes: DataFrame | None, partial_images: bool, kept: list[DataFrame]
) -> tuple[DataFrame, DataFrame | None]:
    """The fold, and the rows partial key changes carry (None: none moved); what is materialised
    for them is added to ``kept``."""
    folded = fold(keyed, changes, partial_images)
    carries = None
    if partial_images:
        folded, moving = observe_partial_moves(folded)
        folded = folded.localCheckpoint(eager=True)
        kept.append(folded)
        if partial_moves_seen(moving, folded):
            carries = chain_carries(with_table_changes(folded, changes))
            kept.append(carries)
    return folded, carries

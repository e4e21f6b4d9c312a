"""Read: which landed files a run reads, and how they are decoded into keyed canonical events.

Takes a ``SnapshotSpec``; gives an ``Input`` (the decoded events, lazy or kept, the files behind
them, the base it starts from) and the run's decode step (``decode_function``: the format's decoder,
``keys.with_keys`` and, under ``--whole-transactions``, ``transactions.with_transaction_times``).
Damaged files are read as far as they go (``spark.reader.checkpoint_salvaging``); what only shows
after the fold is mended in ``salvage``.

A full run lists, prunes (time partitions after AS OF + lateness) and decodes every file. With
``--base`` only the files the base did not cover are decoded, unless this run's events could not
be folded onto the base; the ``incremental`` block of the metrics says which happened and why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_cdc_provider.contract.as_of import format_as_of
from airflow_cdc_provider.contract.unavailable import placeholders
from airflow_cdc_provider.formats import get_decoder
from airflow_cdc_provider.formats.events import (
    CANONICAL_EVENT_SCHEMA,
    IGNORED_TABLE_FILTER,
    KIND_CHANGE,
    KIND_IGNORED,
    table_matches,
)
from airflow_cdc_provider.replay.base_state import (
    IGNORED_IN_BASE,
    BaseState,
    applied_by_base,
    file_horizons,
    read_base_state,
    scan_new_events,
)
from airflow_cdc_provider.replay.keys import KeyConfig, with_keys
from airflow_cdc_provider.replay.shuffles import size_shuffles
from airflow_cdc_provider.replay.spec import SnapshotSpec
from airflow_cdc_provider.replay.transactions import with_transaction_times
from airflow_cdc_provider.spark import progress
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import (
    LandedFile,
    checkpoint_salvaging,
    list_landed_files,
)

log = logging.getLogger(__name__)

SKIPPED_PARTITION = "partition starts after AS OF + lateness"
SKIPPED_IN_BASE = "already applied by the base"

# The decode step of a run (``decode_function``): landed files (and context files) to keyed events.
Decode = Callable[..., DataFrame]


@dataclass
class Input:
    """What one run reads and how: the decoded events, the files behind them, the base it starts from.

    ``kept``: the events are materialised (``localCheckpoint``) because the run reads them more than
    once (an incremental run's bookkeeping, the files' newest event times for ``_cdc_state``). A
    plain rebuild leaves them lazy: the fold's shuffle is then the only pass over the landing.
    """

    events: DataFrame | None  # None until the fold's build decodes a lazy rebuild's files
    files: list[LandedFile]
    skipped: dict[str, list[LandedFile]]
    base: BaseState | None
    incremental: dict | None  # the metrics' "incremental" block when --base was given
    horizons: dict[str, int | None] = field(default_factory=dict)
    whole_tables: list[str] = field(default_factory=list)  # tables whose base rows are all folded again
    kept: bool = True

    @property
    def may_change_tables(self) -> bool:
        """Kept events may hold an applied truncate or column drop: not so on a base whose new
        events hold no truncate or DDL at all (``scan_new_events`` found no ``whole_tables``)."""
        return self.kept and (self.base is None or bool(self.whole_tables))


def _base_mismatch(spec: SnapshotSpec, state: BaseState) -> str | None:
    if state.format != spec.source_format:
        return f"the base was built from --format {state.format}, this run reads {spec.source_format}"
    if state.as_of_ms > spec.as_of_ms:
        return f"AS OF {format_as_of(spec.as_of_ms)} is before the base's {format_as_of(state.as_of_ms)}"
    if state.keys != keys_json(spec.keys):
        return "--key differs from the base's"
    if state.tables_filter != sorted(spec.tables):
        return "--table differs from the base's"
    if state.decode.get(_UNAVAILABLE) != decode_json(spec).get(_UNAVAILABLE):
        return "--unavailable-value differs from the base's"
    if state.decode != decode_json(spec):
        return "--columns or --timestamp-column differs from the base's"
    if spec.with_metadata and not state.lines_complete:
        return (
            "--with-metadata shows each row's line (_cdc_line), and the base's state lacks the lines of "
            "records in files read in splits (written without --with-metadata, or by an earlier version)"
        )
    return None


def keys_json(keys: KeyConfig) -> list:
    return [list(keys.default), sorted([name, list(cols)] for name, cols in keys.per_table)]


_UNAVAILABLE = "unavailable_values"


def decode_json(spec: SnapshotSpec) -> dict:
    """The format options that change what a file decodes to, as the state records them."""
    options = spec.decode_options
    settings: dict = {}
    if options.table_columns:
        settings["columns"] = {table: list(cols) for table, cols in sorted(options.table_columns.items())}
    if options.timestamp_column:
        settings["timestamp_column"] = options.timestamp_column
    if options.unavailable_values != placeholders(()):  # recorded when not Debezium's default
        settings[_UNAVAILABLE] = [value.hex() for value in options.unavailable_values]
    return settings


def read_input(spark: SparkSession, spec: SnapshotSpec, decode: Decode, partial_images: bool) -> Input:
    """List, prune and decode the landed files; with ``--base``, only those the base did not cover.

    A rebuild that writes no state decodes in the fold's build (``kept`` false, ``events`` None):
    a decoder may read the landing while planning (Qlik's MD messages), and a damaged compressed
    file must surface where ``checkpoint_salvaging`` catches it. Otherwise the events are decoded
    and kept once. Reads everything (a full rebuild) when
    the base cannot be used or this run's events could not be folded onto it; the ``incremental``
    block says which happened and why.
    """
    listed, after_as_of = spec.partitions.split(list_landed_files(spark, list(spec.inputs)), spec.as_of_ms)
    progress.phase("listing", files=listed, unread=after_as_of)
    skipped = {SKIPPED_PARTITION: after_as_of}
    if not spec.writes_state:
        return Input(None, listed, skipped, None, None, kept=False)
    state, why_full = read_base_state(spark, spec.base) if spec.base else (None, None)
    if state is not None:
        why_full = _base_mismatch(spec, state)
    if state is not None and why_full is None:
        covered = [f for f in listed if state.covers(f)]
        fresh = [f for f in listed if f not in covered]
        progress.phase("decoding", files=fresh)
        size_shuffles(spark, fresh)  # decoded here, before the fold sizes its shuffles
        events, fresh = (
            checkpoint_salvaging(spark, fresh, lambda files: decode(files, covered))
            if fresh
            else (_no_events(spark, spec.keys), [])
        )
        reread = {f.path for f in fresh if state.reread(f)}
        scan = scan_new_events(events, state, reread, partial_images)
        why_full = scan.why_full
        if why_full is None:
            horizons = scan.horizons
            in_base = applied_by_base(state, reread) & F.col("kind").isin(KIND_CHANGE, KIND_IGNORED)
            marked = (
                events.withColumns(
                    {
                        "kind": F.when(in_base, F.lit(KIND_IGNORED)).otherwise(F.col("kind")),
                        "reason": F.when(in_base, F.lit(IGNORED_IN_BASE)).otherwise(F.col("reason")),
                    }
                )
                if reread
                else events
            )
            skipped[SKIPPED_IN_BASE] = covered
            incremental = {
                "base": spec.base,
                "base_as_of": format_as_of(state.as_of_ms),
                "applied": True,
                "reason": None,
                "late_events": scan.late,
            }
            return Input(marked, fresh, skipped, state, incremental, horizons, scan.whole_tables)
        events.unpersist()
    return read_all(spark, spec, decode, listed, skipped, state, why_full)


def read_all(
    spark: SparkSession,
    spec: SnapshotSpec,
    decode: Decode,
    listed: list[LandedFile],
    skipped: dict[str, list[LandedFile]],
    state: BaseState | None,
    why_full: str | None,
) -> Input:
    """Every file of ``listed`` decoded and kept: a full rebuild (``why_full``: why a ``--base`` run
    could not start from its base ``state``)."""
    if why_full is not None:
        log.warning("incremental run from %s falls back to a full rebuild: %s", spec.base, why_full)
    progress.phase("decoding", files=listed)
    size_shuffles(spark, listed)  # decoded here, before the fold sizes its shuffles
    events, files = checkpoint_salvaging(spark, listed, decode)
    incremental = (
        {
            "base": spec.base,
            "base_as_of": None if state is None else format_as_of(state.as_of_ms),
            "applied": False,
            "reason": why_full,
            "late_events": None,
        }
        if spec.base
        else None
    )
    horizons = file_horizons(events) if spec.writes_state else {}
    return Input(events, files, {SKIPPED_PARTITION: skipped[SKIPPED_PARTITION]}, None, incremental, horizons)


def _no_events(spark: SparkSession, keys: KeyConfig) -> DataFrame:
    return with_keys(spark.createDataFrame([], CANONICAL_EVENT_SCHEMA), keys)


def decode_function(spark: SparkSession, spec: SnapshotSpec) -> Decode:
    """The run's decode step: landed files (and context files) to keyed canonical events; none
    for no files (an AS OF before every partition reads none)."""
    decoder = get_decoder(spec.source_format)

    def decode(landed: list[LandedFile], context: Sequence[LandedFile] = ()) -> DataFrame:
        options = replace(spec.decode_options, context_files=tuple(context))
        events = (
            with_keys(decoder.decode(spark, landed, options), spec.keys)
            if landed
            else _no_events(spark, spec.keys)
        )
        return with_transaction_times(events) if spec.whole_transactions else events

    return decode


def ignoring_unselected_tables(events: DataFrame, tables: tuple[str, ...]) -> DataFrame:
    """``events`` with the row changes and ignored records of tables ``--table`` did not select
    ignored as ``IGNORED_TABLE_FILTER`` (no ``--table``: all selected)."""
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

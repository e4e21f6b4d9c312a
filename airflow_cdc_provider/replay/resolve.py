"""After the fold: each key's final row (part of the fold stage, see docs/design.md).

Takes the fold's rows (``fold.fold``, or ``spans.span_rows``: one per group) and the tables'
changes (``table_changes``). Gives the resolved rows: per row group ``EXISTS``, the final
``IMAGE`` and its ``UNKNOWN`` columns; the other groups pass through.

Runs on the aggregated rows (one per key). Most keys take the latest reset as it is; only keys
with partial images, moves to another key, truncates or column drops are merged in position order
by the higher-order functions here, over that key's own few entries.

A key change whose image is partial carries the row as it stood under the old key just before
the change. That row may itself start from what an earlier such change carried into the old key
(a chain: A to B, then B to C), so ``chain_carries`` rebuilds the carries in rounds over the few
keys such changes touch, until none waits on another; a change it cannot rebuild within
``CHAIN_ROUNDS`` rounds is quarantined rather than written with the columns it did not name lost.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StructType

from airflow_cdc_provider.formats.events import IMAGE_TYPE, OP_DELETE, empty_image
from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.replay.images import by_ord, merged_image
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.observed import observed_figure
from airflow_cdc_provider.spark.sqlexpr import Expr

# Rounds ``chain_carries`` takes at most: a chain of more partial key changes than this (with no
# full image between them) is not rebuilt; its changes are quarantined with ``Q_UNREBUILT``.
CHAIN_ROUNDS = 64
Q_UNREBUILT = "key change whose row under the old key could not be rebuilt"
# Observed, not columns: the row groups that move partially (``observe_partial_moves``), and the
# carries a round of ``chain_carries`` left unsettled.
MOVING_GROUPS = "groups"
_UNSETTLED = "n"


@dataclass(frozen=True)
class _GroupState:
    """A row group's state at some position, as ``_state_before`` rebuilds it."""

    exists: Expr
    image: Expr
    known: Expr  # false: the fold kept too little of the group's history to tell
    rebuilt: Expr  # false: it starts from a carried row that is not rebuilt (``chain_carries``)


def _state_before(
    limit: Expr | None, carries: Expr | None = None, keep_resets: bool = False, folded_reset_type=None
) -> _GroupState:
    """The state of a row group just before position ``limit`` (at the end if None).

    The base is the latest of the last reset, truncate and move to another key before ``limit``;
    partial images after it are merged on top, each from the row its key change carried
    (``carries``), if any. Unless the fold kept every reset (``keep_resets``), it kept only a
    key's latest one, so the state before a position earlier than it is not ``known``.
    """

    def before(o: Expr) -> Expr:
        return E.lit(True) if limit is None else (o < limit)

    reset = E.col(C.RESET)
    if keep_resets:
        reset = E.aggregate(
            E.filter(C.RESETS, lambda r: before(r["ord"])),
            E.null(folded_reset_type),
            lambda acc, r: E.when(acc.isNull() | (r["ord"] > acc["ord"]), r).otherwise(acc),
        )
    reset_in = reset.isNotNull() & before(reset["ord"])
    trunc = E.array_max(E.filter(E.coalesce(E.col(C.TRUNCS), E.array()), before))
    moved = E.array_max(E.filter(E.transform(C.MOVES_OUT, lambda m: m["ord"]), before))
    base_ord = E.greatest(E.when(reset_in, reset["ord"]), trunc, moved)
    base_exists = reset_in & (base_ord == reset["ord"]) & (reset["op"] != OP_DELETE)
    base_image = E.when(base_exists, E.coalesce(reset["after"], empty_image())).otherwise(empty_image())
    partials = E.filter(
        E.col(C.PARTIALS), lambda p: (base_ord.isNull() | (p["ord"] > base_ord)) & before(p["ord"])
    )

    def carried(p: Expr) -> tuple[Expr, Expr]:
        """The row ``p``'s key change carried (null: none), and whether it is not rebuilt yet."""
        if carries is None:
            return E.null(IMAGE_TYPE), E.lit(False)
        found = E.try_element_at(E.filter(carries, lambda c: c["ord"] == p["ord"]), 1)
        return found["image"], E.coalesce(~found["settled"], E.lit(False))

    with_base = E.transform(
        partials,
        lambda p: E.struct(
            p["ord"].alias("ord"),
            p["after"].alias("after"),
            carried(p)[0].alias("base"),
            carried(p)[1].alias("pending"),
        ),
    )
    later = E.array_sort(with_base, by_ord)
    image = merged_image(base_image, base_ord, later, E.col(C.DROPS))
    known = ~(reset.isNotNull() & ~reset_in)
    rebuilt = ~E.exists(later, lambda p: p["pending"])
    return _GroupState(base_exists | (E.size(later) > 0), image, known, rebuilt)


def moves_partially() -> Expr:
    """A row group that moves to another key through a partial image: it carries its row there."""
    return (E.col(C.TAG) == C.TAG_ROW) & E.coalesce(
        E.exists(C.MOVES_OUT, lambda m: m["partial"]), E.lit(False)
    )


def _moving_groups() -> Column:
    return E.count(E.when(moves_partially(), E.lit(1))).alias(MOVING_GROUPS).column()


def observe_partial_moves(folded: DataFrame) -> tuple[DataFrame, Observation]:
    """``folded`` counting its row groups that move partially (``MOVING_GROUPS``) in the action that first
    computes it: whether ``chain_carries`` is needed is then known without a Spark job of its own."""
    seen = Observation()
    return folded.observe(seen, _moving_groups()), seen


def partial_moves_seen(seen: Observation, materialised: DataFrame) -> int:
    """How many row groups of the materialised fold move partially (``observe_partial_moves``)."""
    return observed_figure(seen, MOVING_GROUPS, materialised, _moving_groups())


def _partial_moves(sources: DataFrame) -> DataFrame:
    """``sources`` with one row per partial move (``MOVE``)."""
    return sources.select(
        "*", F.explode(E.filter(C.MOVES_OUT, lambda m: m["partial"]).column()).alias(C.MOVE)
    )


def _carry(image: Expr, settled: Expr) -> Expr:
    """One carried row: the move's position and record, the row it carries, whether that is rebuilt."""
    move = E.col(C.MOVE)
    return E.struct(
        move["ord"].alias("ord"),
        image.alias("image"),
        settled.alias("settled"),
        move["line"].alias("line"),
        move["raw"].alias("raw"),
    )


def _carries_of(sources: DataFrame, reset_type) -> DataFrame:
    """``table, _key, c``: one row per partial key change of ``sources``, ``c`` the row it carries to
    its new key ``_key``.

    Such an update names only the columns it changes, so the row under its new key starts from
    the row as it stood under the old key just before the move. That row starts in turn from the
    carries into the old key (``carries``, null for none); a carry is ``settled`` when none it
    starts from is pending. Needs a fold with ``keep_resets`` (``reset_type``: its ``reset``'s).
    """
    moves = _partial_moves(sources)
    state = _state_before(
        E.col(f"{C.MOVE}.ord"), E.col(C.CARRIES), keep_resets=True, folded_reset_type=reset_type
    )
    return moves.where((state.known & state.exists).column()).select(
        "table",
        *E.columns(E.col(f"{C.MOVE}.to").alias(C.KEY), _carry(state.image, state.rebuilt).alias(C.CARRY)),
    )


def _pending_carries(sources: DataFrame) -> DataFrame:
    """Every partial key change of ``sources`` as a carry not yet rebuilt: the first round's input."""
    return _partial_moves(sources).select(
        "table",
        *E.columns(
            E.col(f"{C.MOVE}.to").alias(C.KEY), _carry(E.null(IMAGE_TYPE), E.lit(False)).alias(C.CARRY)
        ),
    )


# What ``_carries_of`` reads of a row group moving partially, beside the carries into it.
_SOURCE_LISTS = (C.RESETS, C.PARTIALS, C.MOVES_OUT, C.TRUNCS, C.DROPS)


def _regrouped(sources: DataFrame, carried: DataFrame) -> DataFrame:
    """One row per key: the lists of ``sources`` (null for a key that only receives) and the carries
    into it (``carried``, ``_carries_of``): one aggregation, the round's only shuffle."""
    rows = sources.unionByName(carried, allowMissingColumns=True)
    return rows.groupBy("table", C.KEY).agg(
        *[F.first(name, ignorenulls=True).alias(name) for name in _SOURCE_LISTS],
        F.collect_list(C.CARRY).alias(C.CARRIES),
    )


def chain_carries(rows: DataFrame, rounds: int | None = None) -> DataFrame:
    """``table, _key, carries``: the rows every partial key change in ``rows`` (``with_table_changes``
    of a fold with ``keep_resets``) carries to its new key, chains followed; materialised.

    Each round rebuilds every carry from the previous round's carries into its old key, so round
    n settles each change with fewer than n partial key changes before it along its chain (a full
    image or a delete ends a chain). It stops when none is pending, or after ``rounds`` (default
    ``CHAIN_ROUNDS``); what is still pending then stays unsettled and ``resolve`` quarantines it.
    Only the groups that move partially take part, so a round is a small job (one shuffle)
    however large the landing, and a landing without chains takes one round.
    """
    limit = max(1, CHAIN_ROUNDS if rounds is None else rounds)
    reset_type = rows.schema[C.RESET].dataType
    sources = (
        rows.where(moves_partially().column())
        .select("table", C.KEY, *_SOURCE_LISTS)
        .coalesce(1)
        .localCheckpoint(eager=False)
    )
    state = _regrouped(sources, _pending_carries(sources))
    unsettled = E.sum(E.size(E.filter(C.CARRIES, lambda c: ~c["settled"]))).alias(_UNSETTLED)
    for _ in range(limit):
        pending = Observation()
        rebuilt = _regrouped(sources, _carries_of(state, reset_type)).observe(pending, unsettled.column())
        previous, state = state, rebuilt.localCheckpoint(eager=True)
        previous.unpersist()
        if not observed_figure(pending, _UNSETTLED, state, unsettled.column()):
            break
    sources.unpersist()
    return state.select("table", C.KEY, C.CARRIES)


def with_table_changes(folded: DataFrame, changes: DataFrame | None) -> DataFrame:
    """``folded`` with its table's ``truncs`` and ``drops`` (``table_changes``; null when None)."""
    if changes is not None:
        return folded.join(F.broadcast(changes), on="table", how="left")
    ord_type = folded.schema[C.RESET].dataType["ord"].dataType
    return folded.select(
        "*",
        *E.columns(
            E.null(ArrayType(ord_type)).alias(C.TRUNCS),
            E.null(folded.schema[C.DDL_CHANGES].dataType).alias(C.DROPS),
        ),
    )


# The fold's lists and the tables' changes, read by ``resolve`` and by nothing after it.
_MERGED_FROM = (C.RESET, C.RESETS, C.PARTIALS, C.MOVES_OUT, C.TRUNCS, C.DROPS, C.CARRIES)


def resolve(folded: DataFrame, changes: DataFrame | None, carries: DataFrame | None = None) -> DataFrame:
    """Per row group: ``exists`` and the final ``image`` (other tags pass through).

    ``changes`` is ``table_changes`` of the fold's events, or None when no truncate or column drop
    was applied. ``carries``: ``chain_carries`` of the fold, when some key changed through a
    partial image; a row that starts from a carry it could not rebuild is not written, and the
    key changes whose carry that is are quarantined instead of applied (``unrebuilt_changes``).
    """
    rows = with_table_changes(folded, changes)
    if carries is not None:
        rows = rows.join(carries, on=["table", C.KEY], how="left")
        state = _state_before(None, E.col(C.CARRIES))
        exists, image = state.exists & state.rebuilt, state.image
        rows = _without_unrebuilt(rows)
    else:
        state = _state_before(None)
        exists, image = state.exists, state.image
    # Most keys only ever see full images: their row is the latest one, no walk needed.
    reset = E.col(C.RESET)
    simple = (
        (E.size(C.PARTIALS) == 0)
        & (E.size(C.MOVES_OUT) == 0)
        & E.coalesce(E.size(C.TRUNCS) == 0, E.lit(True))
        & E.coalesce(E.size(C.DROPS) == 0, E.lit(True))
    )
    exists = E.when(simple, E.coalesce(reset["op"] != OP_DELETE, E.lit(False))).otherwise(exists)
    image = E.when(
        simple,
        E.when(reset["op"] != OP_DELETE, E.coalesce(reset["after"], empty_image())).otherwise(empty_image()),
    ).otherwise(image)
    is_row = E.col(C.TAG) == C.TAG_ROW
    resolved = rows.select(
        "*",
        *E.columns(
            E.when(is_row, exists).otherwise(E.lit(False)).alias(C.EXISTS),
            E.when(is_row, image).alias(C.IMAGE),
        ),
    )
    resolved = resolved.select(
        "*", unknown_columns(E.col(C.EXISTS), E.col(C.IMAGE)).alias(C.UNKNOWN).column()
    )
    # What only the merge reads is left out: a kept result is then about half the size.
    resolved = resolved.drop(*[c for c in _MERGED_FROM if c in resolved.columns])
    if carries is None:
        return resolved
    return resolved.unionByName(unrebuilt_changes(carries, resolved.schema))


def _unrebuilt(carries: Expr) -> Expr:
    """The carries of ``carries`` (a row group's, or null) that ``chain_carries`` left unsettled."""
    return E.filter(E.coalesce(carries, E.array()), lambda c: ~c["settled"])


def _without_unrebuilt(rows: DataFrame) -> DataFrame:
    """``rows`` (joined with their carries) no longer counting as applied the key changes into them
    whose carry is not rebuilt: ``unrebuilt_changes`` counts them as quarantined."""
    lost = E.size(_unrebuilt(E.col(C.CARRIES)))
    counts = E.col(C.COUNTS)
    return rows.withColumns(
        {
            C.EVENTS: (E.col(C.EVENTS) - lost).column(),
            C.COUNTS: counts.column().withField(C.UPDATES, (counts[C.UPDATES] - lost).column()),
        }
    )


def unrebuilt_changes(carries: DataFrame, schema: StructType) -> DataFrame:
    """The key changes whose carry ``chain_carries`` left unsettled, as quarantined records of ``schema``
    (``resolve``'s): one each, with reason ``Q_UNREBUILT`` and the record as landed."""
    entries = carries.select("table", F.explode(_unrebuilt(E.col(C.CARRIES)).column()).alias(C.CARRY))
    c = E.col(C.CARRY)
    ord_ = c["ord"]
    first = E.struct(
        E.nullif(ord_["file"], E.lit("")).alias("file"),
        ord_["file_pos"].alias("file_pos"),
        c["line"].alias("line"),
        ord_["sub_pos"].alias("sub_pos"),
        E.lit(Q_UNREBUILT).alias("reason"),
        c["raw"].alias("raw"),
    )
    given = {
        "table": E.col("table"),
        C.TAG: E.lit(C.TAG_QUARANTINED),
        C.KEY: E.array(ord_["file"], ord_["file_pos"].cast("string"), ord_["sub_pos"].cast("string")),
        C.EVENTS: E.lit(1),
        C.EVENTS_AFTER_AS_OF: E.lit(0),
        C.UNPOSITIONED: E.lit(0),
        C.TYPE_SIGS: E.array(),
        C.DDL_CHANGES: E.array(),
        C.FIRST: first,
        C.EXISTS: E.lit(False),
    }
    return entries.select(
        *E.columns(
            [
                (given[f.name] if f.name in given else E.null(f.dataType)).cast(f.dataType).alias(f.name)
                for f in schema.fields
            ]
        )
    )


def unknown_columns(exists: Expr, image: Expr) -> Expr:
    """The columns of a resolved row that hold null only because their value was unavailable.

    A placeholder left its column out of its image (``unavailable``), so the merge kept the
    column's earlier value. A column that one of the row's images named so and that the row still
    lacks found none: no event of the key before it wrote the column (nor the base). Null when
    there is no such column, so that rows never touched by a placeholder cost one null test.
    """
    reset = E.col(C.RESET)
    none = E.array().cast("array<string>")
    from_reset = E.when(reset["op"] != OP_DELETE, reset["unavailable"])
    from_partials = E.flatten(E.transform(C.PARTIALS, lambda p: E.coalesce(p["unavailable"], none)))
    named = E.when(E.size(C.PARTIALS) == 0, from_reset).otherwise(
        E.concat(E.coalesce(from_reset, none), from_partials)
    )
    return E.when(exists & (E.size(named) > 0), E.nullif(E.array_except(named, E.map_keys(image)), none))

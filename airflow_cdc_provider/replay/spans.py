"""Several AS OFs in one fold: each group's state as spans of AS OFs, from one window per group.

Takes tagged events (``keys.tagged_events``) of the files some AS OF reads, the sorted AS OFs and,
per file, the first AS OF whose run reads it. Gives ``fold``'s rows for every AS OF at once: one
row per group and span ``[SPAN_FROM, SPAN_TO)`` of AS OF indexes over which its state holds
(``fold_spans``, shaped for ``resolve`` by ``span_rows``), and the rows of one AS OF among them
(``rows_at_as_of``). The same terms as ``fold`` (``fold.EventTerms``), as running aggregates of a
window ordered by the AS OF an event first applies at. See docs/design.md, "Several AS OFs".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_cdc_provider.formats.events import KIND_CHANGE
from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.replay.counts import (
    GROUP,
    counting_order,
    group_hash,
    group_partition,
    with_count_flags,
)
from airflow_cdc_provider.replay.fold import EventTerms, event_terms, full_image_lists
from airflow_cdc_provider.replay.keys import event_meta, is_ddl, on_time
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile
from airflow_cdc_provider.spark.sqlexpr import Expr

# What counting the events read gives (``_reads``), in its order.
_READ_NAMES = (C.EVENTS, C.CHANGES_READ, C.UNPOSITIONED, C.FIRST, C.KEY_NAMES)


def fold_spans(staged: DataFrame, as_of_count: int) -> DataFrame:
    """``fold``'s result for each of several AS OFs in one pass, as spans ``[SPAN_FROM, SPAN_TO)`` of
    AS OF indexes: the counting window and one window of running aggregates per group, both over
    its events ordered by AS OF index and then position: one shuffle, one sort.

    ``staged`` is ``tagged_events`` output with two indexes into the AS OFs (sorted,
    ``with_as_of_indexes``): ``READ_FROM``, the first one whose run reads the event's file, and
    ``APPLIES_FROM``, the first one it applies at (``as_of_count``: none). An event is counted as
    read from ``READ_FROM`` on and applies from ``APPLIES_FROM`` on; each distinct index at which a
    group's state changes starts a span, which lasts until the next one. A group has no span before
    its first file is read, so ``rows_at_as_of`` is then a filter, not an aggregation. The result
    holds for every AS OF provided no group has an event that applies at an earlier AS OF than one
    before it in position order (``OUT_OF_ORDER`` counts them; the counting window assumes it).
    """
    is_change = E.col("kind") == KIND_CHANGE
    applies = E.col(C.APPLIES_FROM) < as_of_count
    keyed = staged.withColumn(C.GROUP_HASH, group_hash().column()).select(
        "*",
        *E.columns((is_change & applies).alias(C.APPLIED), (is_ddl() & applies).alias(C.DDL_APPLIED)),
    )
    t = event_terms(keyed)
    points = _points(keyed)
    here = E.col(C.POINT_KIND) != 0  # applies at this row's point
    # The counting window's order (AS OF index, then position): one sort serves both windows.
    flagged = with_count_flags(points, None, spans=here)
    window = _running_state(flagged, t, here)
    # Points shared by several rows: the last of them holds the whole state.
    window = window.where((E.col(C.NEXT).isNull() | (E.col(C.NEXT) != E.col(C.POINT))).column())
    return _spans(window, as_of_count)


def _points(keyed: DataFrame) -> DataFrame:
    """Each event as one or two rows of the window, at the AS OF index (``POINT``) where it is read
    or applies (``POINT_KIND``)."""
    visible, bucket = E.col(C.READ_FROM), E.col(C.APPLIES_FROM)
    # Where an event sits: 0 read here (READ_FROM > 0), applies later (a second row, 1); 2 read and
    # applies here; 3 applies here, read from the first AS OF on (READ_FROM 0: one row, most events).
    kinds = (
        E.when(visible == bucket, E.array(E.lit(2)))
        .when(visible == 0, E.array(E.lit(3)))
        .otherwise(E.array(E.lit(0), E.lit(1)))
    )
    # Shuffled before the rows are doubled (the windows need no shuffle of their own).
    points = keyed.repartition(*GROUP).select("*", F.explode(kinds.column()).alias(C.POINT_KIND))
    kind = E.col(C.POINT_KIND)
    return points.withColumn(C.POINT, E.when(kind == 0, visible).otherwise(bucket).column())


def _running_state(flagged: DataFrame, t: EventTerms, here: Expr) -> DataFrame:
    """Per window row: the group's state up to its point, and what the events read give."""
    kind = E.col(C.POINT_KIND)
    read_here = (kind == 0) | (kind == 2)  # read at this row's point
    read_first = kind == 3  # read from index 0, whatever this row's point
    order = f"{group_partition()} ORDER BY {E.col(C.POINT).sql}, {counting_order()}"
    upto = f"{order} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
    whole = f"{order} ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING"

    def running(aggregate: Expr) -> Expr:
        return aggregate.over(upto)

    def over_all(aggregate: Expr) -> Expr:
        return aggregate.over(whole)

    return flagged.select(
        *GROUP,
        C.POINT,
        *E.columns(
            E.call("lead", C.POINT).over(order).alias(C.NEXT),
            over_all(E.min(C.POINT)).alias(C.FIRST_POINT),
            *_applied_state(t, here, running),
            *[
                a.alias(f"{C.READ_HERE_PREFIX}{n}")
                for a, n in zip(_reads(t, read_here, running), _READ_NAMES)
            ],
            *[
                a.alias(f"{C.READ_FIRST_PREFIX}{n}")
                for a, n in zip(_reads(t, read_first, over_all), _READ_NAMES)
            ],
            over_all(E.count(E.when(read_first, E.lit(1)))).alias(C.READ_FIRST_ROWS),
            over_all(E.count(E.when(E.col(C.OUT_OF_ORDER), E.lit(1)))).alias(C.OUT_OF_ORDER),
        ),
    )


def _applied_state(t: EventTerms, here: Expr, running: Callable[[Expr], Expr]) -> list[Expr]:
    """The fold's state up to each point, from the rows that apply there (``here``)."""
    applied = here & E.col(C.APPLIED)
    return [
        running(E.max(E.when(here & t.moved_away, t.ord))).alias(C.LAST_MOVE),
        running(E.max_by(E.when(here & t.reset, t.resetting), E.when(here & t.reset, t.ord))).alias(C.RESET),
        E.struct(
            *[
                E.coalesce(running(E.sum(E.when(here, E.col(C.count_flag(name))))), E.lit(0))
                .cast("long")
                .alias(name)
                for name in C.COUNT_FIELDS
            ]
        ).alias(C.COUNTS),
        running(E.max_by(E.when(applied, event_meta()), E.when(applied, t.ord))).alias(C.LAST),
        running(E.max(E.when(applied, E.col("event_ms")))).alias(C.LAST_EVENT_MS),
        running(E.collect_set(E.when(here, t.typed))).alias(C.TYPE_SIGS),
        running(E.collect_list(E.when(here, t.ddl))).alias(C.DDL_CHANGES),
        running(E.count(E.when(applied & ~E.col(C.MOVED_AWAY), E.lit(1)))).alias(C.CHANGES_APPLIED),
    ]


def _reads(t: EventTerms, where: Expr, frame: Callable[[Expr], Expr]) -> list[Expr]:
    """What counting the events read gives (``_READ_NAMES``): sums, and the first listed record and
    key names."""
    is_change = E.col("kind") == KIND_CHANGE
    return [
        frame(E.count(E.when(where & t.counted, E.lit(1)))),
        frame(E.count(E.when(where & is_change & t.counted, E.lit(1)))),
        frame(E.count(E.when(where & t.unpositioned, E.lit(1)))),
        frame(E.min(E.when(where & t.listed, E.struct(t.ord.alias("o"), t.listing.alias("v"))))),
        frame(
            E.min(
                E.when(
                    where & E.col(C.KEY_COLS).isNotNull(),
                    E.struct(t.counting.alias("o"), E.col(C.KEY_COLS).alias("v")),
                )
            )
        ),
    ]


def _spans(window: DataFrame, as_of_count: int) -> DataFrame:
    """The window's last row per point as spans: from its point to the next one."""
    # A group read from index 0 whose state first changes later also has a span [0, first point):
    # its events read, nothing applied.
    point = E.col(C.POINT)
    opens_early = (point == E.col(C.FIRST_POINT)) & (point > 0) & (E.col(C.READ_FIRST_ROWS) > 0)
    window = window.select(
        "*",
        F.explode(
            E.when(opens_early, E.array(E.lit(True), E.lit(False))).otherwise(E.array(E.lit(False))).column()
        ).alias(C.EARLY),
    )
    spans = window.select(*GROUP, *E.columns(_span_columns(window)))
    # Events that apply at no AS OF (index as_of_count) only end the span before them.
    return (
        spans.where((E.col(C.SPAN_FROM) < as_of_count).column())
        .withColumn(C.SPAN_TO, E.coalesce(E.col(C.NEXT), E.lit(as_of_count)).column())
        .drop(C.NEXT)
    )


def _span_columns(window: DataFrame) -> list[Expr]:
    """A span's row as ``fold`` shapes it: an early span has nothing applied."""
    early = E.col(C.EARLY)
    point = E.col(C.POINT)

    def applied_only(name: str, empty: Expr) -> Expr:
        return E.when(early, empty).otherwise(E.col(name)).alias(name)

    def read_total(name: str) -> Expr:
        z, r = E.col(f"{C.READ_FIRST_PREFIX}{name}"), E.col(f"{C.READ_HERE_PREFIX}{name}")
        if name in (C.FIRST, C.KEY_NAMES):
            return E.when(early, z).otherwise(E.least(z, r))["v"].alias(name)
        return E.when(early, z).otherwise(z + r)

    schema = window.schema
    zero_counts = E.struct(*[E.lit(0).cast("long").alias(name) for name in C.COUNT_FIELDS])
    changes_read = read_total(C.CHANGES_READ)
    changes_applied = E.when(early, E.lit(0)).otherwise(E.col(C.CHANGES_APPLIED))
    return [
        E.when(early, E.lit(0)).otherwise(point).alias(C.SPAN_FROM),
        E.when(early, point).otherwise(E.col(C.NEXT)).alias(C.NEXT),
        applied_only(C.LAST_MOVE, E.null(schema[C.LAST_MOVE].dataType.simpleString())),
        read_total(C.EVENTS).alias(C.EVENTS),
        (changes_read - changes_applied).alias(C.EVENTS_AFTER_AS_OF),
        read_total(C.UNPOSITIONED).alias(C.UNPOSITIONED),
        applied_only(C.RESET, E.null(schema[C.RESET].dataType.simpleString())),
        applied_only(C.COUNTS, zero_counts),
        applied_only(C.LAST, E.null(schema[C.LAST].dataType.simpleString())),
        applied_only(C.LAST_EVENT_MS, E.null("bigint")),
        applied_only(C.TYPE_SIGS, E.array().cast(schema[C.TYPE_SIGS].dataType.simpleString())),
        applied_only(C.DDL_CHANGES, E.array().cast(schema[C.DDL_CHANGES].dataType.simpleString())),
        read_total(C.FIRST),
        read_total(C.KEY_NAMES),
        E.col(C.OUT_OF_ORDER),
    ]


def span_rows(spans: DataFrame) -> DataFrame:
    """``fold_spans`` shaped as ``fold``'s rows (``SPAN_FROM``, ``SPAN_TO`` and ``OUT_OF_ORDER`` kept):
    ready for ``resolve``."""
    return full_image_lists(spans).drop(C.GROUP_HASH)


def rows_at_as_of(rows: DataFrame, index: int) -> DataFrame:
    """The rows of ``span_rows`` (or anything made from them row by row) that hold at AS OF ``index``."""
    current = (E.col(C.SPAN_FROM) <= index) & (E.lit(index) < E.col(C.SPAN_TO))
    return rows.where(current.column()).drop(C.SPAN_FROM, C.SPAN_TO)


def first_reading_as_ofs(
    spark: SparkSession, files: list[LandedFile], reads: list[set[str]]
) -> DataFrame | None:
    """``file, READ_FROM``: the first AS OF (index) that reads each file some AS OF leaves unread."""
    later = [(f.path, next(i for i, paths in enumerate(reads) if f.path in paths)) for f in files]
    later = [(path, index) for path, index in later if index > 0]
    if not later:
        return None
    return spark.createDataFrame(later, f"file string, {C.READ_FROM} int")


def with_as_of_indexes(events: DataFrame, as_ofs: Sequence[int], visible: DataFrame | None) -> DataFrame:
    """``events`` with ``READ_FROM`` and ``APPLIES_FROM`` for the AS OFs ``as_ofs`` (sorted) of ``fold_spans``.

    ``visible``: ``first_reading_as_ofs`` for files that some of the AS OFs do not read (None: all
    read every file). An event applies from the first AS OF at or after its own time that reads its file.
    """
    if visible is not None:
        events = events.join(F.broadcast(visible), "file", "left").withColumn(
            C.READ_FROM, F.coalesce(F.col(C.READ_FROM), F.lit(0))
        )
    else:
        events = events.withColumn(C.READ_FROM, F.lit(0))
    earlier = E.lit(0)  # how many AS OFs come before the event's own time
    for as_of_ms in as_ofs:
        earlier = earlier + E.when(on_time(as_of_ms), E.lit(0)).otherwise(E.lit(1))
    return events.withColumn(C.APPLIES_FROM, E.greatest(earlier, E.col(C.READ_FROM)).column())

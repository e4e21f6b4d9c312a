"""The fold: every rule of DESIGN.md section 4, as one window and one aggregation per (table, key).

Canonical events are keyed, split into what is applied and what is only counted, and grouped
once. A window over each key's events in position order marks what each one adds to the counts
(exact duplicates, deletes of unknown keys, updates that create their row); the aggregation over
the same partitions and sort then keeps per key
  * the latest "resetting" event (insert, snapshot read, full-image update, delete) by position,
    picked with ``max_by``, and the counts as sums: buffers of a fixed size, whatever the key's history;
  * for formats with partial images (Shareplex ``data``, Qlik ``columnMask``) also the partial
    updates, merged after the fold column by column in position order: latest writer wins.
Non-row records travel through the same aggregation under group tags, so one shuffle of one scan
yields the snapshot, the quarantine and every count; a table's DDL events (one group) also
yield the columns it added and dropped before AS OF (``ddl_changes``).

Several AS OFs share one fold where they can (``fold_spans``): the same terms, as running
aggregates of one window per key ordered by the AS OF an event first applies at: spans of AS OFs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, BooleanType, StringType, StructField, StructType

from airflow_cdc_provider.formats.events import (
    IGNORED_DDL,
    IMAGE_TYPE,
    KIND_CHANGE,
    KIND_IGNORED,
    KIND_QUARANTINED,
    OP_DELETE,
    OP_INSERT,
    OP_READ,
    OP_TRUNCATE,
    OP_UPDATE,
    Q_MISSING_KEY,
    empty_image,
    table_matches,
)
from airflow_cdc_provider.replay.transactions import APPLY_MS, TX_FIRST
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr

# Group tags.
TAG_ROW = "R"  # a keyed row change
TAG_TRUNCATE = "T"
TAG_IGNORED = "I"
TAG_QUARANTINED = "Q"
TAG_NO_KEY = "K"  # row changes of a table nobody gave a key for: a configuration error
# A row change on time for AS OF whose transaction is not (``--whole-transactions``).
HELD_BACK = "_held_back"
# Several AS OFs (``fold_spans``): the first AS OF (by index) an event applies at, and whether an
# event before it in position order applies only at a later one.
BUCKET = "_b"
VISIBLE = "_visible"  # the first AS OF (by index) whose run reads the event's file
OUT_OF_ORDER = "_out_of_order"
SPAN_FROM, SPAN_TO = "_span_from", "_span_to"  # the AS OF indexes a group's folded state holds for

# Op codes in the counting list.
_OP_CODE = {OP_INSERT: 1, OP_READ: 1, OP_UPDATE: 2, OP_DELETE: 3}
OP_CODE_MOVED_IN = 4


@dataclass(frozen=True)
class KeyConfig:
    """``--key``: default key columns, and per-table overrides (``TABLE=COL,COL``)."""

    default: tuple[str, ...] = ()
    per_table: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def for_table(self, table: Expr, value) -> Expr:
        """``value(cols)`` for the key columns configured for ``table`` (``value(())`` for none)."""
        out = value(self.default)
        for name, cols in self.per_table:
            out = E.when(table_matches(table, (name,)), value(cols)).otherwise(out)
        return out

    def names(self, table: Expr) -> Expr:
        """The key column names configured for ``table`` (null when none)."""
        return self.for_table(table, lambda cols: E.lit(list(cols)) if cols else E.null("array<string>"))


def ordering() -> Expr:
    """Source log position, then event time, then place in the landing (file, record, row)."""
    return E.struct(
        E.col("log_pos"),
        E.col("event_ms"),
        E.col("file"),
        E.col("file_pos"),
        E.coalesce(E.col("sub_pos"), E.lit(0)).alias("sub_pos"),
    )


def event_meta() -> Expr:
    """What ``--with-metadata`` (and a history's versions) say about the event that wrote a row."""
    return E.struct(
        E.col("op"),
        E.col("event_ms"),
        E.col("log_pos"),
        E.nullif(E.col("file"), E.lit("")).alias("file"),  # base rows without a file carry ""
        E.col("line"),
        E.col("file_pos"),
        E.col("sub_pos"),
    )


def content_hash() -> Expr:
    """Identity of an exact duplicate: same table, same position, same record as landed."""
    return E.xxhash64("table", "log_pos", "event_ms", "raw", "sub_pos")


def _key_values(image: Expr, fallback: Expr, record_cols: Expr, keys: KeyConfig) -> Expr:
    """Key values as strings (variants cannot be grouped): from ``image``, else from ``fallback``.

    Key columns named by ``--key`` are known when the plan is built, so their lookups are plain
    expressions; so is a record's own single key column. Only records that name several key
    columns need a (slower, interpreted) per-record walk.
    """

    def one(c: Expr) -> Expr:
        v = E.when(E.map_contains_key(image, c), image[c]).otherwise(fallback[c])
        return E.when(E.is_variant_null(v), E.lit(None)).otherwise(E.to_json(v))

    def static(cols: tuple[str, ...]) -> Expr:
        return E.array(*[one(E.lit(c)) for c in cols]) if cols else E.null("array<string>")

    configured = keys.for_table(E.col("table"), static)
    # Spark runs a lambda interpreted; a record naming one key column (the common case) reads it directly.
    return (
        E.when(record_cols.isNull(), configured)
        .when(E.size(record_cols) == 1, E.array(one(record_cols[0])))
        .otherwise(E.transform(record_cols, one))
    )


def _new_key(keys: KeyConfig) -> Expr:
    """The key a row change leaves its row under (a delete's comes from its before image)."""
    after_or_before = E.coalesce(E.col("after"), empty_image())
    before_or_after = E.coalesce(E.col("before"), empty_image())
    record_cols = E.col("key_cols")
    return E.when(
        E.col("op") == OP_DELETE, _key_values(before_or_after, after_or_before, record_cols, keys)
    ).otherwise(_key_values(after_or_before, before_or_after, record_cols, keys))


def _lacks_key() -> Expr:
    is_row = (E.col("kind") == KIND_CHANGE) & (E.col("op") != OP_TRUNCATE)
    new_key = E.col("_new_key")
    # A one-column key (the common case) is read directly; longer keys go through an ascending
    # sort_array, which puts nulls first: no lambda per event (array_compact runs one), but it
    # copies the array into objects, a few percent of the decode when every key took it.
    any_null = E.when(E.size(new_key) == 1, new_key[0].isNull()).otherwise(
        E.try_element_at(E.sort_array(new_key), 1).isNull()
    )
    return E.coalesce(
        is_row & E.col("_key_cols").isNotNull() & (E.size(new_key) > 0) & any_null,
        E.lit(False),
    )


def type_signature(types: Expr) -> Expr:
    """An event's declared types as one ``array<string>``: the names, then the types in the same order.

    Every typed event adds one to its group's set (``type_sigs``): a flat array of strings is hashed
    and compared as bytes, where ``map_entries`` builds an object per column for each event.
    """
    return E.concat(E.map_keys(types), E.map_values(types))


def signature_pairs(signature: Sequence[str]) -> list[tuple[str, str]]:
    """A ``type_signature`` read back: (column, declared type) in the order the event declared them."""
    half = len(signature) // 2
    return list(zip(signature[:half], signature[half:]))


def _is_ddl() -> Expr:
    return (E.col("kind") == KIND_IGNORED) & (E.col("reason") == IGNORED_DDL)


def with_keys(events: DataFrame, keys: KeyConfig) -> DataFrame:
    """Decoded events as the run keeps them: keys attached, and only what is read after keying.

    The keys (``_key_cols``, ``_new_key``, and ``_old_key`` where a before image could move the row)
    are computed once, here, so that neither the held events nor the fold walk the images again.
    The before image is kept only for DDL events (the columns they drop) and the record's text only
    for what the fold will quarantine, or may (a key change with a partial image, whose row under
    the old key ``resolve.chain_carries`` might fail to rebuild); a content hash stands in for it in
    duplicate detection.
    """
    old_key = _key_values(E.col("before"), E.coalesce(E.col("after"), empty_image()), E.col("key_cols"), keys)
    keyed = events.select(
        "*",
        *E.columns(
            E.coalesce(E.col("key_cols"), keys.names(E.col("table"))).alias("_key_cols"),
            _new_key(keys).alias("_new_key"),
            E.when(E.col("before").isNotNull(), old_key).alias("_old_key"),
            content_hash().alias("_content_hash"),
        ),
    )
    moves_partially = E.coalesce(E.col("partial") & (E.col("_old_key") != E.col("_new_key")), E.lit(False))
    return keyed.withColumns(
        {
            "raw": E.when(
                (E.col("kind") == KIND_QUARANTINED) | _lacks_key() | moves_partially, E.col("raw")
            ).column(),
            "before": E.when(_is_ddl(), E.col("before")).column(),
        }
    )


def on_time(as_of_ms: int) -> Expr:
    """Whether an event's own time is at or before AS OF (no time: always)."""
    return E.coalesce(E.col("event_ms"), E.lit(0)) <= as_of_ms


def applies_by(events: DataFrame, as_of_ms: int) -> Expr:
    """Whether an event of ``events`` applies as of AS OF: by its own time, or by its transaction's
    (``transactions.APPLY_MS``, null when it never applies) under ``--whole-transactions``."""
    if APPLY_MS in events.columns:
        return E.coalesce(E.col(APPLY_MS) <= as_of_ms, E.lit(False))
    return on_time(as_of_ms)


def keyed_events(events: DataFrame, as_of_ms: int) -> DataFrame:
    """Attach group tag and key to every event of ``with_keys``, split key-changing updates in two,
    and flag what AS OF applies. ``events`` may already be ``staged_events`` (several AS OFs)."""
    staged = events if "_tag" in events.columns else staged_events(events)
    is_change = E.col("kind") == KIND_CHANGE
    applied = applies_by(staged, as_of_ms)
    held_back = (
        []
        if APPLY_MS not in staged.columns
        else [(is_change & ~applied & on_time(as_of_ms)).alias(HELD_BACK)]
    )
    return staged.select(
        "*",
        *E.columns(
            (is_change & applied).alias("_applied"),
            (_is_ddl() & applied).alias("_ddl_applied"),
            (is_change & ~applied).alias("_after_as_of"),
            *held_back,
        ),
    )


def staged_events(events: DataFrame) -> DataFrame:
    """The part of ``keyed_events`` no AS OF changes: group tag, key, the two halves of a key change."""
    missing_key = _lacks_key()
    kind = E.when(missing_key, E.lit(KIND_QUARANTINED)).otherwise(E.col("kind"))
    reason = E.when(missing_key, E.lit(Q_MISSING_KEY)).otherwise(E.col("reason"))
    # Position fields stay top-level columns (``sub_pos`` never null): the window sorts by them as
    # they are, so the shuffle carries them once (a struct of them would be copied beside them).
    staged = events.withColumns(
        {
            "kind": kind.column(),
            "reason": reason.column(),
            "sub_pos": E.coalesce(E.col("sub_pos"), E.lit(0)).column(),
        }
    )

    is_change = E.col("kind") == KIND_CHANGE
    is_row = is_change & (E.col("op") != OP_TRUNCATE)
    tag = (
        E.when(E.col("kind") == KIND_IGNORED, E.lit(TAG_IGNORED))
        .when(E.col("kind") == KIND_QUARANTINED, E.lit(TAG_QUARANTINED))
        .when(E.col("op") == OP_TRUNCATE, E.lit(TAG_TRUNCATE))
        .when(E.col("_key_cols").isNull(), E.lit(TAG_NO_KEY))
        .otherwise(E.lit(TAG_ROW))
    )
    group_key = (
        E.when(tag == TAG_ROW, E.col("_new_key"))
        .when(tag == TAG_IGNORED, E.array(E.col("reason")))
        .when(
            tag == TAG_QUARANTINED,
            E.array(
                E.col("file"),
                E.col("file_pos").cast("string"),
                E.coalesce(E.col("sub_pos"), E.lit(0)).cast("string"),
            ),
        )
        .otherwise(E.array().cast("array<string>"))
    )
    key_moved = E.coalesce(
        is_row & (E.col("op") == OP_UPDATE) & (E.col("_old_key") != E.col("_new_key")), False
    )
    keyed = staged.select(
        "*",
        *E.columns(
            tag.alias("_tag"),
            group_key.alias("_group_key"),
            E.col("_content_hash").alias("_hash"),
            key_moved.alias("_key_moved"),
        ),
    )
    # A key-changing update also deletes the old key, at the same position (never counted itself).
    split = E.when(E.col("_key_moved"), E.array(E.lit(False), E.lit(True))).otherwise(E.array(E.lit(False)))
    keyed = keyed.select("*", F.explode(split.column()).alias("_moved_away"))
    moved_away = E.col("_moved_away")
    partial = E.coalesce(E.col("partial"), E.lit(False))
    return keyed.withColumns(
        {
            "_key": E.when(moved_away, E.col("_old_key")).otherwise(E.col("_group_key")).column(),
            "op": E.when(moved_away, E.lit(OP_DELETE)).otherwise(E.col("op")).column(),
            "after": E.when(moved_away, E.null(IMAGE_TYPE)).otherwise(E.col("after")).column(),
            "partial": E.when(moved_away, E.lit(False)).otherwise(partial).column(),
            "_moved_partially": (moved_away & partial).column(),
        }
    ).drop("_group_key")


def clustered_for_fold(staged: DataFrame) -> DataFrame:
    """``staged_events`` hashed, partitioned and sorted as the fold's window and aggregation need
    them: kept so, the fold of each of several AS OFs runs without a shuffle or a sort of its own."""
    hashed = staged.withColumn("_group_hash", _group_hash().column())
    return hashed.repartition(*_GROUP).sortWithinPartitions(*_GROUP, *_COUNTING_FIELDS)


def ddl_change(ord_: Expr) -> Expr:
    """A DDL event as a table's schema sees it: its position, the columns it adds and drops."""
    none = E.array().cast("array<string>")
    return E.struct(
        ord_.alias("ord"),
        E.coalesce(E.map_keys("types"), none).alias("added"),
        E.coalesce(E.map_keys("before"), none).alias("cols"),
    )


def table_changes(events: DataFrame, as_of_ms: int) -> DataFrame:
    """``table, truncs, drops``: each table's applied truncate positions and column drops (tiny).

    Both change every row of a table, so the counting window and each key's state need them.
    Read straight from the canonical events: neither needs a key.
    """
    applied = applies_by(events, as_of_ms)
    is_trunc = applied & (E.col("kind") == KIND_CHANGE) & (E.col("op") == OP_TRUNCATE)
    is_drop = applied & _is_ddl() & (E.size(E.map_keys(E.coalesce(E.col("before"), empty_image()))) > 0)
    return (
        events.where((is_trunc | is_drop).column())
        .groupBy("table")
        .agg(
            *E.columns(
                E.collect_list(E.when(is_trunc, ordering())).alias("truncs"),
                E.collect_list(E.when(is_drop, ddl_change(ordering()))).alias("drops"),
            )
        )
    )


_COUNTING_FIELDS = ("log_pos", "event_ms", "_hash", "file", "file_pos", "sub_pos")


def _counting_order() -> str:
    """Position order in which exact duplicates sit next to each other (SQL ``ORDER BY`` list).

    The content hash sorts right after the source position and event time, before the landing
    position: two deliveries of one event share the former and differ in the latter.
    """
    return ", ".join(E.col(f).sql for f in _COUNTING_FIELDS)


def _op_code() -> Expr:
    code = E.when(E.col("op").isin(OP_INSERT, OP_READ), E.lit(_OP_CODE[OP_INSERT]))
    code = code.when(E.col("op") == OP_UPDATE, E.lit(_OP_CODE[OP_UPDATE]))
    code = code.when(E.col("op") == OP_DELETE, E.lit(_OP_CODE[OP_DELETE])).otherwise(E.lit(0))
    # The new-key half of a key-changing update: an update of a row that existed (under its old key).
    return E.when(E.col("_key_moved") & ~E.col("_moved_away"), E.lit(OP_CODE_MOVED_IN)).otherwise(code)


_GROUP = ("_group_hash", "table", "_tag", "_key")


def _group_partition() -> str:
    """The fold's windows run per group (SQL ``PARTITION BY``)."""
    return f"PARTITION BY {', '.join(E.col(g).sql for g in _GROUP)}"


def _group_hash() -> Expr:
    # A leading 64-bit hash makes the sort compare longs before table names and key arrays.
    return E.xxhash64("table", "_tag", "_key")


def _count_flags(
    keyed: DataFrame,
    changes: DataFrame | None,
    whole_key: dict[str, Expr] | None = None,
    spans: Expr | None = None,
) -> DataFrame:
    """Per applied row change, what it adds to the counts, from the events before it in position order.

    A window over each key's events (its sort shared with the fold's aggregation) stands in for
    walking a per-key list: an event is an exact duplicate when it repeats the previous counted
    event; a delete or update finds no row when the previous applied event was a delete (or there
    was none), or a truncate of the table came after it. ``changes`` is None when no truncate was
    applied (the single-pass fold).

    ``spans`` (``fold_spans``): the rows are ordered by AS OF index (``_point``) before position, so
    that the spans window shares this sort, and only the rows where ``spans`` holds (one per event,
    at the index it applies at) are counted. The order is position order unless an event applies
    at an earlier index than one before it in position order: ``OUT_OF_ORDER`` flags those events.
    """
    only = spans if spans is not None else E.lit(True)
    applied = E.col("_applied") & only
    from_base = E.col("_base") if "_base" in keyed.columns else E.lit(False)
    counted = applied & ~E.col("_moved_away") & ~from_base
    spec = f"{_group_partition()} ORDER BY {'`_point`, ' if spans is not None else ''}{_counting_order()}"
    window = f"{spec} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING"

    def previous(value: Expr) -> Expr:
        return E.call("last", value, True).over(window)

    with_truncs = (
        keyed.join(F.broadcast(changes.select("table", "truncs")), "table", "left")
        if changes is not None
        else keyed
    )
    columns = [
        _op_code().alias("_op_code"),
        counted.alias("_counted"),
        previous(E.when(counted, E.col("_hash"))).alias("_prev_hash"),
        previous(E.when(applied, _op_code())).alias("_prev_op"),
    ]
    if spans is not None:
        # An event that comes, in position order, before one that sorts ahead of it by AS OF index.
        position = E.struct(*[E.col(f) for f in _COUNTING_FIELDS])
        later_max = E.max(E.when(only, position)).over(window)
        columns.append(E.coalesce(only & (later_max > position), E.lit(False)).alias(OUT_OF_ORDER))
    if changes is not None:
        columns.append(previous(E.when(applied, ordering())).alias("_prev_ord"))
    # ``whole_key`` aggregates over all of a key's events, in the same window operator (same spec).
    whole = f"{spec} ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING"
    columns += [aggregate.over(whole).alias(name) for name, aggregate in (whole_key or {}).items()]
    staged = with_truncs.select("*", *E.columns(columns))
    truncated_since = E.lit(False)
    if changes is not None:
        ord_, prev_ord = ordering(), E.col("_prev_ord")
        truncated_since = E.when(
            E.col("truncs").isNotNull(),
            E.exists("truncs", lambda t: (t < ord_) & (prev_ord.isNull() | (t > prev_ord))),
        ).otherwise(E.lit(False))
    existed = E.col("_prev_op").isNotNull() & (E.col("_prev_op") != _OP_CODE[OP_DELETE]) & ~truncated_since
    op = E.col("_op_code")
    dup = E.col("_counted") & E.coalesce(E.col("_prev_hash") == E.col("_hash"), E.lit(False))
    count = E.col("_counted") & ~dup
    deleting = count & (op == _OP_CODE[OP_DELETE])

    def flag(condition: Expr) -> Expr:
        return E.when(condition, E.lit(1)).otherwise(E.lit(0))

    helpers = [
        c
        for c in staged.columns
        if c not in keyed.columns and c != OUT_OF_ORDER and c not in (whole_key or {})
    ]
    return staged.select(
        "*",
        *E.columns(
            flag(count & (op == _OP_CODE[OP_INSERT])).alias("_c_inserts"),
            flag(count & ((op == _OP_CODE[OP_UPDATE]) | (op == OP_CODE_MOVED_IN))).alias("_c_updates"),
            flag(deleting & existed).alias("_c_deletes"),
            flag(dup).alias("_c_duplicates"),
            flag(deleting & ~existed).alias("_c_deletes_unknown"),
            flag(count & (op == _OP_CODE[OP_UPDATE]) & ~existed).alias("_c_updates_unknown"),
            flag(count & E.coalesce(E.col("partial"), E.lit(False))).alias("_c_partial_updates"),
        ),
    ).drop(*helpers)


# ``partial_updates``: partial images of a format whose images are full unless a record says
# otherwise (a Debezium update that left unavailable values out); the run then folds them as such.
COUNTS = (
    "inserts",
    "updates",
    "deletes",
    "duplicates",
    "deletes_unknown",
    "updates_unknown",
    "partial_updates",
)


def fold(keyed: DataFrame, changes: DataFrame | None, partial_images: bool = False) -> DataFrame:
    """One window and one aggregation per (table, tag, key): the folded state plus its counts.

    ``changes`` is ``table_changes`` of the events, or None for a single pass that assumes no
    truncate was applied (``needs_table_changes`` of its counts says whether that held). For
    full-image formats every aggregation buffer has a fixed size: the latest reset (``max_by``),
    the last move to another key, counts as sums. Formats with partial images (``partial_images``)
    also keep lists: their moves to another key, the partial updates after the latest reset, and,
    for a key that moves, every reset and partial update, so that a key change carries the row's
    state at that moment (``_kept_in_lists``). Rows flagged ``_base`` (an incremental
    run's starting state) are applied but never counted; ``base_ord`` is then the position of the
    base's row of each key.
    """
    flagged, aggregates = _fold_aggregates(keyed, changes, partial_images)
    folded = flagged.groupBy(*_GROUP).agg(*E.columns(aggregates))
    if not partial_images:
        folded = _full_image_lists(folded)
    return folded.drop("_group_hash")


@dataclass(frozen=True)
class _Terms:
    """What each event contributes to its group's folded state, shared by ``fold`` and ``fold_spans``."""

    ord: Expr  # position order
    partial_update: Expr  # an applied update carrying only some columns
    reset: Expr  # an applied insert, read, full-image update or delete
    resetting: Expr  # what a reset leaves: struct(ord, op, after, unavailable)
    moved_away: Expr  # the old-key half of an applied key change
    typed: Expr  # the type signature of an applied row change or DDL event, else null
    ddl: Expr  # an applied DDL event's ``ddl_change``, else null
    listed: Expr  # ignored and quarantined records: their first is reported
    listing: Expr  # what the report of a listed record says
    counting: Expr  # the counting order's fields: the first event in it names the key columns
    counted: Expr  # read by the run: not a key change's second half, not a base row
    unpositioned: Expr  # counted, and its log position unreadable


def _terms(keyed: DataFrame) -> _Terms:
    applied = E.col("_applied")
    from_base = E.col("_base") if "_base" in keyed.columns else E.lit(False)
    ddl = E.col("_ddl_applied")
    partial_update = applied & (E.col("op") == OP_UPDATE) & E.col("partial")
    not_moved = ~E.col("_moved_away")
    ord_ = ordering()
    counted = not_moved & ~from_base
    return _Terms(
        ord=ord_,
        partial_update=partial_update,
        # The old-key half of a key change is kept apart (``moves_out``), not as a reset, so that the
        # row's state just before it can still be rebuilt and carried to the new key.
        reset=applied & ~partial_update & (E.col("op") != OP_TRUNCATE) & not_moved,
        resetting=E.struct(ord_.alias("ord"), E.col("op"), E.col("after"), E.col("unavailable")),
        moved_away=applied & E.col("_moved_away"),
        typed=E.when((applied | ddl) & E.col("types").isNotNull(), type_signature(E.col("types"))),
        ddl=E.when(ddl & (E.col("types").isNotNull() | E.col("before").isNotNull()), ddl_change(ord_)),
        listed=E.col("_tag").isin(TAG_IGNORED, TAG_QUARANTINED),
        listing=E.struct(
            E.nullif(E.col("file"), E.lit("")).alias("file"),  # base rows without a file carry ""
            E.col("file_pos"),
            E.col("line"),
            E.col("sub_pos"),
            E.col("reason"),
            E.col("raw"),
        ),
        counting=E.struct(*[E.col(f) for f in _COUNTING_FIELDS]),
        counted=counted,
        unpositioned=E.col("log_pos_unreadable") & counted,
    )


def _fold_aggregates(
    keyed: DataFrame, changes: DataFrame | None, partial_images: bool
) -> tuple[DataFrame, list[Expr]]:
    """The fold's flagged events and its aggregations."""
    t = _terms(keyed)
    applied = E.col("_applied")
    ord_ = t.ord
    # Events kept by ``clustered_for_fold`` carry the hash their partitioning and sort are built on.
    hashed = (
        keyed if "_group_hash" in keyed.columns else keyed.withColumn("_group_hash", _group_hash().column())
    )
    # Partial-image formats: what a key's lists must keep (not for incremental runs, whose partials
    # older than the base's row must stay visible to ``unreplayable_partials``).
    pruned = partial_images and "_base" not in keyed.columns
    flagged = _count_flags(hashed, changes, _key_list_bounds(t) if pruned else None)
    # A partial move also names its record: ``resolve`` quarantines it if its row cannot be rebuilt.
    partially = E.col("_moved_partially")
    move = E.struct(
        ord_.alias("ord"),
        E.col("_new_key").alias("to"),
        partially.alias("partial"),
        E.when(partially, E.col("line")).alias("line"),
        E.when(partially, E.col("raw")).alias("raw"),
    )
    if partial_images:
        kept_reset, kept_partial = _kept_in_lists(t) if pruned else (t.reset, t.partial_update)
        lists = [
            E.collect_list(E.when(kept_reset, t.resetting)).alias("resets"),
            E.collect_list(
                E.when(kept_partial, E.struct(ord_.alias("ord"), E.col("after"), E.col("unavailable")))
            ).alias("partials"),
            E.collect_list(E.when(t.moved_away, move)).alias("moves_out"),
        ]
    else:
        lists = [E.max(E.when(t.moved_away, ord_)).alias("_last_move")]
    if "_base" in keyed.columns:
        lists.append(E.max(E.when(E.col("_base"), ord_)).alias("base_ord"))
    if HELD_BACK in keyed.columns:
        held = E.col(HELD_BACK) & ~E.col("_moved_away")
        lists += [
            E.count(E.when(held, E.lit(1))).alias("held_back"),
            E.count(E.when(held & E.col(TX_FIRST), E.lit(1))).alias("held_back_transactions"),
        ]
    return flagged, [
        *lists,
        E.count(E.when(t.counted, E.lit(1))).alias("n"),
        E.count(E.when(E.col("_after_as_of") & ~E.col("_moved_away"), E.lit(1))).alias("after_as_of"),
        E.count(E.when(t.unpositioned, E.lit(1))).alias("unpositioned"),
        E.max_by(E.when(t.reset, t.resetting), E.when(t.reset, ord_)).alias("reset"),
        E.struct(*[E.sum(f"_c_{name}").cast("long").alias(name) for name in COUNTS]).alias("counts"),
        E.max_by(E.when(applied, event_meta()), E.when(applied, ord_)).alias("last"),
        E.max(E.when(applied, E.col("event_ms"))).alias("last_event_ms"),
        E.collect_set(t.typed).alias("type_sigs"),
        E.collect_list(t.ddl).alias("ddl_changes"),
        E.min_by(E.when(t.listed, t.listing), E.when(t.listed, ord_)).alias("first"),
        E.first(E.col("_key_cols"), E.lit(True)).alias("key_names"),
    ]


def _key_list_bounds(t: _Terms) -> dict[str, Expr]:
    """Per key, over all its events: whether it ever moves to another key, and its latest reset."""
    return {"_key_moves": E.max(t.moved_away), "_last_reset": E.max(E.when(t.reset, t.ord))}


def _kept_in_lists(t: _Terms) -> tuple[Expr, Expr]:
    """Which resets and partial images a key's lists keep (``_key_list_bounds`` read).

    ``resets`` serve only to rebuild a row just before a move to another key, so a key that never
    moves keeps none (its ``reset`` is the latest). A partial image before the key's latest reset
    is overwritten by it, unless a move needs the state before that reset. So the lists no longer
    grow with every event of a hot key.
    """
    moves, last_reset = E.col("_key_moves"), E.col("_last_reset")
    after_last_reset = last_reset.isNull() | (t.ord > last_reset)
    return t.reset & moves, t.partial_update & (moves | after_last_reset)


def _full_image_lists(folded: DataFrame) -> DataFrame:
    """Full images: the list shapes ``resolve`` reads, made from the fixed-size buffers."""
    ord_type = folded.schema["reset"].dataType["ord"].dataType
    partial_type = StructType(
        [
            StructField("ord", ord_type),
            StructField("after", IMAGE_TYPE),
            StructField("unavailable", ArrayType(StringType())),
        ]
    )
    move_type = StructType(
        [
            StructField("ord", ord_type),
            StructField("to", ArrayType(StringType())),
            StructField("partial", BooleanType()),
        ]
    )
    last_move = E.struct(
        E.col("_last_move").alias("ord"),
        E.null("array<string>").alias("to"),
        E.lit(False).alias("partial"),
    )
    folded = folded.withColumns(
        {
            "partials": E.array().cast(ArrayType(partial_type)).column(),
            "moves_out": E.when(E.col("_last_move").isNotNull(), E.array(last_move))
            .otherwise(E.array().cast(ArrayType(move_type)))
            .column(),
        }
    ).drop("_last_move")
    return folded


def fold_spans(staged: DataFrame, as_of_count: int) -> DataFrame:
    """``fold``'s result for each of several AS OFs in one pass, as spans ``[SPAN_FROM, SPAN_TO)`` of
    AS OF indexes: the counting window and one window of running aggregates per group, both over
    its events ordered by AS OF index and then position: one shuffle, one sort.

    ``staged`` is ``staged_events`` output with two indexes into the AS OFs (sorted, ``with_buckets``): ``VISIBLE``,
    the first one whose run reads the event's file, and ``BUCKET``, the first one it applies at
    (``as_of_count``: none). An event is counted as read from ``VISIBLE`` on and applies from
    ``BUCKET`` on; each distinct index at which a group's state changes starts a span, which lasts
    until the next one. A group has no span before its first file is read, so ``at_index`` is then
    a filter, not an aggregation. The result holds for every AS OF provided no group has an event
    that applies at an earlier AS OF than one before it in position order (``OUT_OF_ORDER`` counts
    them; the counting window assumes it).
    """
    is_change = E.col("kind") == KIND_CHANGE
    applies = E.col(BUCKET) < as_of_count
    keyed = staged.withColumn("_group_hash", _group_hash().column()).select(
        "*",
        *E.columns((is_change & applies).alias("_applied"), (_is_ddl() & applies).alias("_ddl_applied")),
    )
    t = _terms(keyed)
    visible, bucket = E.col(VISIBLE), E.col(BUCKET)
    # Where an event sits: 0 read here (VISIBLE > 0), applies later (a second row, 1); 2 read and
    # applies here; 3 applies here, read from the first AS OF on (VISIBLE 0: one row, most events).
    kinds = (
        E.when(visible == bucket, E.array(E.lit(2)))
        .when(visible == 0, E.array(E.lit(3)))
        .otherwise(E.array(E.lit(0), E.lit(1)))
    )
    # Shuffled before the rows are doubled (the windows need no shuffle of their own).
    points = keyed.repartition(*_GROUP).select("*", F.explode(kinds.column()).alias("_kind"))
    kind = E.col("_kind")
    points = points.withColumn("_point", E.when(kind == 0, visible).otherwise(bucket).column())
    here = kind != 0  # applies at this row's point
    read_here = (kind == 0) | (kind == 2)  # read at this row's point
    read_first = kind == 3  # read from index 0, whatever this row's point
    # The counting window's order (AS OF index, then position): one sort serves both windows.
    flagged = _count_flags(points, None, spans=here)
    order = f"{_group_partition()} ORDER BY `_point`, {_counting_order()}"
    upto = f"{order} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
    whole = f"{order} ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING"

    def running(aggregate: Expr) -> Expr:
        return aggregate.over(upto)

    def over_all(aggregate: Expr) -> Expr:
        return aggregate.over(whole)

    def reads(where: Expr, frame) -> list[Expr]:
        """What counting the events read gives: sums, and the first listed record and key names."""
        return [
            frame(E.count(E.when(where & t.counted, E.lit(1)))),
            frame(E.count(E.when(where & is_change & t.counted, E.lit(1)))),
            frame(E.count(E.when(where & t.unpositioned, E.lit(1)))),
            frame(E.min(E.when(where & t.listed, E.struct(t.ord.alias("o"), t.listing.alias("v"))))),
            frame(
                E.min(
                    E.when(
                        where & E.col("_key_cols").isNotNull(),
                        E.struct(t.counting.alias("o"), E.col("_key_cols").alias("v")),
                    )
                )
            ),
        ]

    read_names = ("n", "changes", "unpositioned", "first", "key_names")
    applied = here & E.col("_applied")
    window = flagged.select(
        *_GROUP,
        "_point",
        *E.columns(
            E.call("lead", "_point").over(order).alias("_next"),
            over_all(E.min("_point")).alias("_first_point"),
            running(E.max(E.when(here & t.moved_away, t.ord))).alias("_last_move"),
            running(E.max_by(E.when(here & t.reset, t.resetting), E.when(here & t.reset, t.ord))).alias(
                "reset"
            ),
            E.struct(
                *[
                    E.coalesce(running(E.sum(E.when(here, E.col(f"_c_{name}")))), E.lit(0))
                    .cast("long")
                    .alias(name)
                    for name in COUNTS
                ]
            ).alias("counts"),
            running(E.max_by(E.when(applied, event_meta()), E.when(applied, t.ord))).alias("last"),
            running(E.max(E.when(applied, E.col("event_ms")))).alias("last_event_ms"),
            running(E.collect_set(E.when(here, t.typed))).alias("type_sigs"),
            running(E.collect_list(E.when(here, t.ddl))).alias("ddl_changes"),
            running(E.count(E.when(applied & ~E.col("_moved_away"), E.lit(1)))).alias("_changes_applied"),
            *[a.alias(f"_r_{n}") for a, n in zip(reads(read_here, running), read_names)],
            *[a.alias(f"_z_{n}") for a, n in zip(reads(read_first, over_all), read_names)],
            over_all(E.count(E.when(read_first, E.lit(1)))).alias("_z_rows"),
            over_all(E.count(E.when(E.col(OUT_OF_ORDER), E.lit(1)))).alias(OUT_OF_ORDER),
        ),
    )
    # Points shared by several rows: the last of them holds the whole state.
    window = window.where((E.col("_next").isNull() | (E.col("_next") != E.col("_point"))).column())
    # A group read from index 0 whose state first changes later also has a span [0, first point):
    # its events read, nothing applied.
    point = E.col("_point")
    opens_early = (point == E.col("_first_point")) & (point > 0) & (E.col("_z_rows") > 0)
    window = window.select(
        "*",
        F.explode(
            E.when(opens_early, E.array(E.lit(True), E.lit(False))).otherwise(E.array(E.lit(False))).column()
        ).alias("_early"),
    )
    early = E.col("_early")

    def applied_only(name: str, empty: Expr) -> Expr:
        return E.when(early, empty).otherwise(E.col(name)).alias(name)

    def read_total(name: str) -> Expr:
        z, r = E.col(f"_z_{name}"), E.col(f"_r_{name}")
        if name in ("first", "key_names"):
            return E.when(early, z).otherwise(E.least(z, r))["v"].alias(name)
        return E.when(early, z).otherwise(z + r)

    schema = window.schema
    zero_counts = E.struct(*[E.lit(0).cast("long").alias(name) for name in COUNTS])
    changes_read = read_total("changes")
    changes_applied = E.when(early, E.lit(0)).otherwise(E.col("_changes_applied"))
    spans = window.select(
        *_GROUP,
        *E.columns(
            E.when(early, E.lit(0)).otherwise(point).alias(SPAN_FROM),
            E.when(early, point).otherwise(E.col("_next")).alias("_next"),
            applied_only("_last_move", E.null(schema["_last_move"].dataType.simpleString())),
            read_total("n").alias("n"),
            (changes_read - changes_applied).alias("after_as_of"),
            read_total("unpositioned").alias("unpositioned"),
            applied_only("reset", E.null(schema["reset"].dataType.simpleString())),
            applied_only("counts", zero_counts),
            applied_only("last", E.null(schema["last"].dataType.simpleString())),
            applied_only("last_event_ms", E.null("bigint")),
            applied_only("type_sigs", E.array().cast(schema["type_sigs"].dataType.simpleString())),
            applied_only("ddl_changes", E.array().cast(schema["ddl_changes"].dataType.simpleString())),
            read_total("first"),
            read_total("key_names"),
            E.col(OUT_OF_ORDER),
        ),
    )
    # Events that apply at no AS OF (index as_of_count) only end the span before them.
    return (
        spans.where((E.col(SPAN_FROM) < as_of_count).column())
        .withColumn(SPAN_TO, E.coalesce(E.col("_next"), E.lit(as_of_count)).column())
        .drop("_next")
    )


def span_rows(spans: DataFrame) -> DataFrame:
    """``fold_spans`` shaped as ``fold``'s rows (``SPAN_FROM``, ``SPAN_TO`` and ``OUT_OF_ORDER`` kept):
    ready for ``resolve``."""
    return _full_image_lists(spans).drop("_group_hash")


def at_index(rows: DataFrame, index: int) -> DataFrame:
    """The rows of ``span_rows`` (or anything made from them row by row) that hold at AS OF ``index``."""
    current = (E.col(SPAN_FROM) <= index) & (E.lit(index) < E.col(SPAN_TO))
    return rows.where(current.column()).drop(SPAN_FROM, SPAN_TO)


def with_buckets(events: DataFrame, as_ofs: Sequence[int], visible: DataFrame | None) -> DataFrame:
    """``events`` with ``VISIBLE`` and ``BUCKET`` for the AS OFs ``as_ofs`` (sorted) of ``fold_spans``.

    ``visible``: ``file, _visible`` for files that some of the AS OFs do not read (None: all read
    every file). An event applies from the first AS OF at or after its own time that reads its file.
    """
    if visible is not None:
        events = events.join(F.broadcast(visible), "file", "left").withColumn(
            VISIBLE, F.coalesce(F.col(VISIBLE), F.lit(0))
        )
    else:
        events = events.withColumn(VISIBLE, F.lit(0))
    earlier = E.lit(0)  # how many AS OFs come before the event's own time
    for as_of_ms in as_ofs:
        earlier = earlier + E.when(on_time(as_of_ms), E.lit(0)).otherwise(E.lit(1))
    return events.withColumn(BUCKET, E.greatest(earlier, E.col(VISIBLE)).column())

"""Keys: decoded canonical events -> events keyed, tagged by group, flagged for AS OF.

Takes the canonical events of ``formats/events.py`` and the ``--key`` configuration. Gives, in
three steps the run applies in order: ``with_keys`` (key columns, new and old key values, a content
hash: computed once, so neither kept events nor the fold walk the images again), ``tagged_events``
(the group each event folds into, a key change split into its two halves: what no AS OF changes)
and ``with_as_of_flags`` (what applies at one AS OF). Also the position order every stage sorts by
(``ordering``). The rules are those of docs/design.md (the fold) and docs/contract.md (keys).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_cdc_provider.formats.events import (
    IGNORED_DDL,
    IMAGE_TYPE,
    KIND_CHANGE,
    KIND_IGNORED,
    KIND_QUARANTINED,
    OP_DELETE,
    OP_TRUNCATE,
    OP_UPDATE,
    Q_MISSING_KEY,
    empty_image,
    table_matches,
)
from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr


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
    """A row change of a keyed table with a null key value: quarantined as ``Q_MISSING_KEY``."""
    is_row = (E.col("kind") == KIND_CHANGE) & (E.col("op") != OP_TRUNCATE)
    new_key = E.col(C.NEW_KEY)
    # A one-column key (the common case) is read directly; longer keys go through an ascending
    # sort_array, which puts nulls first: no lambda per event (array_compact runs one), but it
    # copies the array into objects, a few percent of the decode when every key took it.
    any_null = E.when(E.size(new_key) == 1, new_key[0].isNull()).otherwise(
        E.try_element_at(E.sort_array(new_key), 1).isNull()
    )
    return E.coalesce(
        is_row & E.col(C.KEY_COLS).isNotNull() & (E.size(new_key) > 0) & any_null,
        E.lit(False),
    )


def is_ddl() -> Expr:
    """A DDL event (ignored, but it adds and drops columns)."""
    return (E.col("kind") == KIND_IGNORED) & (E.col("reason") == IGNORED_DDL)


def with_keys(events: DataFrame, keys: KeyConfig) -> DataFrame:
    """Decoded events as the run keeps them: keys attached, and only what is read after keying.

    The keys (``KEY_COLS``, ``NEW_KEY``, and ``OLD_KEY`` where a before image could move the row)
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
            E.coalesce(E.col("key_cols"), keys.names(E.col("table"))).alias(C.KEY_COLS),
            _new_key(keys).alias(C.NEW_KEY),
            E.when(E.col("before").isNotNull(), old_key).alias(C.OLD_KEY),
            content_hash().alias(C.CONTENT_HASH),
        ),
    )
    moves_partially = E.coalesce(E.col("partial") & (E.col(C.OLD_KEY) != E.col(C.NEW_KEY)), E.lit(False))
    return keyed.withColumns(
        {
            "raw": E.when(
                (E.col("kind") == KIND_QUARANTINED) | _lacks_key() | moves_partially, E.col("raw")
            ).column(),
            "before": E.when(is_ddl(), E.col("before")).column(),
        }
    )


def _group_tag() -> Expr:
    """Which kind of group an event folds into (``TAG_*``)."""
    return (
        E.when(E.col("kind") == KIND_IGNORED, E.lit(C.TAG_IGNORED))
        .when(E.col("kind") == KIND_QUARANTINED, E.lit(C.TAG_QUARANTINED))
        .when(E.col("op") == OP_TRUNCATE, E.lit(C.TAG_TRUNCATE))
        .when(E.col(C.KEY_COLS).isNull(), E.lit(C.TAG_NO_KEY))
        .otherwise(E.lit(C.TAG_ROW))
    )


def _group_key(tag: Expr) -> Expr:
    """The group's key under ``tag``: the row's key, the ignored reason, or the record's place."""
    return (
        E.when(tag == C.TAG_ROW, E.col(C.NEW_KEY))
        .when(tag == C.TAG_IGNORED, E.array(E.col("reason")))
        .when(
            tag == C.TAG_QUARANTINED,
            E.array(
                E.col("file"),
                E.col("file_pos").cast("string"),
                E.coalesce(E.col("sub_pos"), E.lit(0)).cast("string"),
            ),
        )
        .otherwise(E.array().cast("array<string>"))
    )


def tagged_events(events: DataFrame) -> DataFrame:
    """The part of ``with_as_of_flags`` no AS OF changes: group tag, key, the two halves of a key change."""
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
    tag = _group_tag()
    key_moved = E.coalesce(
        is_row & (E.col("op") == OP_UPDATE) & (E.col(C.OLD_KEY) != E.col(C.NEW_KEY)), False
    )
    keyed = staged.select(
        "*",
        *E.columns(
            tag.alias(C.TAG),
            _group_key(tag).alias(C.GROUP_KEY),
            E.col(C.CONTENT_HASH).alias(C.HASH),
            key_moved.alias(C.KEY_MOVED),
        ),
    )
    return _split_key_changes(keyed)


def _split_key_changes(keyed: DataFrame) -> DataFrame:
    """A key-changing update also deletes the old key, at the same position (never counted itself)."""
    split = E.when(E.col(C.KEY_MOVED), E.array(E.lit(False), E.lit(True))).otherwise(E.array(E.lit(False)))
    keyed = keyed.select("*", F.explode(split.column()).alias(C.MOVED_AWAY))
    moved_away = E.col(C.MOVED_AWAY)
    partial = E.coalesce(E.col("partial"), E.lit(False))
    return keyed.withColumns(
        {
            C.KEY: E.when(moved_away, E.col(C.OLD_KEY)).otherwise(E.col(C.GROUP_KEY)).column(),
            "op": E.when(moved_away, E.lit(OP_DELETE)).otherwise(E.col("op")).column(),
            "after": E.when(moved_away, E.null(IMAGE_TYPE)).otherwise(E.col("after")).column(),
            "partial": E.when(moved_away, E.lit(False)).otherwise(partial).column(),
            C.MOVED_PARTIALLY: (moved_away & partial).column(),
        }
    ).drop(C.GROUP_KEY)


def on_time(as_of_ms: int) -> Expr:
    """Whether an event's own time is at or before AS OF (no time: always)."""
    return E.coalesce(E.col("event_ms"), E.lit(0)) <= as_of_ms


def applies_by(events: DataFrame, as_of_ms: int) -> Expr:
    """Whether an event of ``events`` applies as of AS OF: by its own time, or by its transaction's
    (``APPLY_MS``, null when it never applies) under ``--whole-transactions``."""
    if C.APPLY_MS in events.columns:
        return E.coalesce(E.col(C.APPLY_MS) <= as_of_ms, E.lit(False))
    return on_time(as_of_ms)


def with_as_of_flags(events: DataFrame, as_of_ms: int) -> DataFrame:
    """Attach group tag and key to every event of ``with_keys``, split key-changing updates in two,
    and flag what AS OF applies. ``events`` may already be ``tagged_events`` (several AS OFs)."""
    staged = events if C.TAG in events.columns else tagged_events(events)
    is_change = E.col("kind") == KIND_CHANGE
    applied = applies_by(staged, as_of_ms)
    held_back = (
        []
        if C.APPLY_MS not in staged.columns
        else [(is_change & ~applied & on_time(as_of_ms)).alias(C.HELD_BACK_BY_TX)]
    )
    return staged.select(
        "*",
        *E.columns(
            (is_change & applied).alias(C.APPLIED),
            (is_ddl() & applied).alias(C.DDL_APPLIED),
            (is_change & ~applied).alias(C.AFTER_AS_OF),
            *held_back,
        ),
    )

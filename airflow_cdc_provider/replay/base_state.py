"""Incremental rebuilds: what a snapshot keeps so a later run can start from it (``--base``).

A typed Parquet snapshot cannot be folded further exactly: typing is lossy (a Debezium decimal's
Base64 text, an epoch-number timestamp) and the key a row is grouped by is the text of its *raw*
value. So a run asked to (``--keep-state``) also writes ``_cdc_state/``: every key the fold applied
an event to, live or deleted, as the fold left it (raw image, key, last applied event and its
position) plus ``state.json`` with what typing and the next run need: the declared type signatures
and dropped columns of each table, and every landed file read with its size and newest event time.

A run with ``--base`` then reads only files the base did not cover and folds their events together
with the base's row of each key they touch, placed at the position of that key's last applied
event; rows of untouched keys are carried over unchanged (``split_base_rows``). So a
late event (at or before the base's AS OF, in a file the base did not read) or one whose log
position sorts before the base's lands where a full rebuild would put it: after the base's row it
applies, before it it is superseded, as it would be. The base's row holds only the result of its
events, not each column's history; so it falls back to a full rebuild, and says why in the
metrics, where that is not enough: a partial image (or a key change carrying one) older than the
base's row of its key, a late DDL or truncate, or a base made with other settings.

Takes a base output's ``_cdc_state/`` and this run's decoded events; gives what the read stage
decides from them (``read_base_state``, ``scan_new_events``) and the base's rows shaped for the fold
(``split_base_rows``, ``base_rows_as_keyed``, ``carried_as_resolved``). ``keep_state`` writes the
state; ``state_rows`` is its rows. See docs/contract.md, "``_cdc_state``".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from airflow_cdc_provider.contract.metrics import STATE_DIR, STATE_FILE
from airflow_cdc_provider.formats.events import (
    IGNORED_DDL,
    KIND_CHANGE,
    KIND_IGNORED,
    OP_DELETE,
    OP_TRUNCATE,
    empty_image,
    position_text,
)
from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.replay.keys import on_time
from airflow_cdc_provider.spark.filesystem import job_filesystem
from airflow_cdc_provider.spark.reader import LandedFile

ROWS_DIR = "rows"
STATE_VERSION = 1
IGNORED_IN_BASE = "applied by the base snapshot"  # an event the base already applied (re-read file)


@dataclass
class BaseState:
    """The ``state.json`` of a snapshot plus where its rows live."""

    uri: str
    format: str
    as_of_ms: int
    keys: list[Any]
    tables_filter: list[str]
    tables: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # signatures, dropped, key_columns, last_event_ms
    files: dict[str, list[Any]] = field(default_factory=dict)  # path -> [size, newest event ms or None]
    decode: dict[str, Any] = field(default_factory=dict)  # format options that change decoding
    # Every row's last event carries its line (``_cdc_line``), also in files read in splits.
    lines_complete: bool = False

    @property
    def rows_uri(self) -> str:
        return f"{self.uri}/{ROWS_DIR}"

    def covers(self, landed: LandedFile) -> bool:
        """The base read this file, as it is now, and applied every event in it."""
        seen = self.files.get(landed.path)
        return seen is not None and seen[0] == landed.size and (seen[1] is None or seen[1] <= self.as_of_ms)

    def reread(self, landed: LandedFile) -> bool:
        """The base read this file, as it is now, but some of its events were after its AS OF."""
        seen = self.files.get(landed.path)
        return seen is not None and seen[0] == landed.size and not self.covers(landed)

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": STATE_VERSION,
                "format": self.format,
                "as_of_ms": self.as_of_ms,
                "keys": self.keys,
                "tables_filter": self.tables_filter,
                "tables": self.tables,
                "files": self.files,
                "decode": self.decode,
                "lines_complete": self.lines_complete,
            },
            sort_keys=True,
        )


def read_base_state(spark: SparkSession, base_output: str) -> tuple[BaseState | None, str | None]:
    """``(state, None)``, or ``(None, why it cannot be used)`` when the base has no usable state."""
    uri = f"{base_output.rstrip('/')}/{STATE_DIR}"
    fs = job_filesystem(spark)
    state_file = f"{uri}/{STATE_FILE}"
    if not fs.exists(state_file):
        return (
            None,
            f"the base {base_output} has no {STATE_DIR}/{STATE_FILE} (missing, or written without --keep-state)",
        )
    text = fs.read_text(state_file)
    data = json.loads(text)
    if data.get("version") != STATE_VERSION:
        return (
            None,
            f"the base's state has version {data.get('version')}, this job reads version {STATE_VERSION}",
        )
    return BaseState(
        uri=uri,
        format=data["format"],
        as_of_ms=int(data["as_of_ms"]),
        keys=data["keys"],
        tables_filter=data["tables_filter"],
        tables=data["tables"],
        files=data["files"],
        decode=data.get("decode", {}),
        lines_complete=bool(data.get("lines_complete", False)),
    ), None


def split_base_rows(
    spark: SparkSession, state: BaseState, keyed: DataFrame, whole_tables: list[str]
) -> tuple[DataFrame, DataFrame]:
    """``(rows to fold, rows to carry)``: the base's rows this run's events touch, and the others.

    Only keys a new row change names (under its new or old key) can change, so only their base
    rows are folded again; the rest pass through as they are (``carried_as_resolved``). A truncate
    or DDL changes every row of its table, so such tables (``whole_tables``) are folded whole.
    Keeps an incremental run's cost tied to what changed rather than to the size of the base.
    """
    rows = spark.read.parquet(state.rows_uri)
    if C.UNKNOWN not in rows.columns:  # a state written before unavailable values were counted
        rows = rows.withColumn(C.UNKNOWN, F.lit(None).cast("array<string>"))
    touched = (
        keyed.where(F.col(C.TAG) == C.TAG_ROW)
        .select("table", C.KEY)
        .distinct()
        .withColumn(C.TOUCHED, F.lit(True))
    )
    marked = rows.join(touched, on=["table", C.KEY], how="left")
    refold = F.col(C.TOUCHED).isNotNull() | F.col("table").isin(whole_tables)
    return marked.where(refold).drop(C.TOUCHED), marked.where(~refold).drop(C.TOUCHED)


def base_rows_as_keyed(rows: DataFrame, keyed: DataFrame) -> DataFrame:
    """Base rows (``_cdc_state/rows``) shaped like ``keys.with_as_of_flags`` output: one full-image reset (or delete) per key.

    Each is applied (it is the state at the base's AS OF) and never counted as an event. It sits at
    the position of the key's last applied event, and ``op``/``event_ms``/``log_pos``/``file``/
    ``line`` are that event's, so ``--with-metadata`` shows what a full rebuild shows.
    """
    last = F.col(C.LAST)
    values = {
        "table": F.col("table"),
        "kind": F.lit(KIND_CHANGE),
        "op": last["op"],
        "event_ms": last["event_ms"],
        "log_pos": last["log_pos"],
        "file": F.coalesce(last["file"], F.lit("")),  # never null, like an event's
        "file_pos": F.coalesce(last["file_pos"], F.lit(-1).cast("bigint")),
        "sub_pos": F.coalesce(last["sub_pos"], F.lit(0)),
        "line": last["line"],
        "after": F.when(F.col(C.EXISTS), F.col(C.IMAGE)),
        "partial": F.lit(False),
        # The columns the base's row holds null because their value was unavailable: still unknown.
        "unavailable": F.col(C.UNKNOWN),
        "key_cols": F.col(C.KEY_NAMES),
        C.KEY_COLS: F.col(C.KEY_NAMES),
        C.NEW_KEY: F.col(C.KEY),
        C.OLD_KEY: F.col(C.KEY),
        C.TAG: F.lit(C.TAG_ROW),
        C.KEY: F.col(C.KEY),
        C.APPLIED: F.lit(True),
        C.DDL_APPLIED: F.lit(False),
        C.AFTER_AS_OF: F.lit(False),
        C.KEY_MOVED: F.lit(False),
        C.MOVED_AWAY: F.lit(False),
        C.MOVED_PARTIALLY: F.lit(False),
        C.BASE_ROW: F.lit(True),
    }
    return _shaped(rows, values, keyed.schema)


def carried_as_resolved(rows: DataFrame, resolved: DataFrame) -> DataFrame:
    """Base rows no new event touched, shaped like ``resolve`` output: unchanged, nothing counted."""
    values = {
        "table": F.col("table"),
        C.TAG: F.lit(C.TAG_ROW),
        C.KEY: F.col(C.KEY),
        C.EVENTS: F.lit(0),
        C.EVENTS_AFTER_AS_OF: F.lit(0),
        C.LAST: F.col(C.LAST),
        C.LAST_EVENT_MS: F.col(f"{C.LAST}.event_ms"),
        C.KEY_NAMES: F.col(C.KEY_NAMES),
        C.EXISTS: F.col(C.EXISTS),
        C.IMAGE: F.when(F.col(C.EXISTS), F.col(C.IMAGE)).otherwise(empty_image().column()),
        C.UNKNOWN: F.col(C.UNKNOWN),
    }
    return _shaped(rows, values, resolved.schema)


def _nullable(data_type: DataType) -> DataType:
    """``data_type`` with every nested field nullable: a stored value may lack what an event always has."""
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(data_type.keyType, _nullable(data_type.valueType), True)
    return data_type


def _shaped(rows: DataFrame, values: dict, schema) -> DataFrame:
    """``rows`` as ``schema``'s columns, in order: the given values, null for the rest."""
    return rows.select(
        *[
            (values[f.name] if f.name in values else F.lit(None)).cast(_nullable(f.dataType)).alias(f.name)
            for f in schema.fields
        ]
    )


def state_rows(resolved: DataFrame) -> DataFrame:
    """What ``_cdc_state/rows`` holds: every key an event was applied to, untyped, with its last event.

    Deleted keys stay (``exists`` false, ``last`` the delete) so that a late event older than the
    delete is superseded by it, as in a full rebuild.
    """
    last = F.col(C.LAST)
    return resolved.where((F.col(C.TAG) == C.TAG_ROW) & last.isNotNull()).select(
        "table",
        C.KEY,
        C.EXISTS,
        F.when(F.col(C.EXISTS), F.col(C.IMAGE)).alias(C.IMAGE),
        C.UNKNOWN,
        C.KEY_NAMES,
        F.struct(
            F.when(F.col(C.EXISTS), last["op"]).otherwise(F.lit(OP_DELETE)).alias("op"),
            *[
                last[name].alias(name)
                for name in ("event_ms", "log_pos", "file", "line", "file_pos", "sub_pos")
            ],
        ).alias(C.LAST),
    )


def _newest_event_ms() -> Column:
    """A file's horizon: its newest event time (0 for records without one)."""
    return F.max(F.coalesce(F.col("event_ms"), F.lit(0)))


def file_horizons(events: DataFrame) -> dict[str, int | None]:
    """Newest event time of each landed file read (0 for records without one)."""
    rows = events.groupBy("file").agg(_newest_event_ms().alias(C.NEWEST_MS)).collect()
    return {r["file"]: r[C.NEWEST_MS] for r in rows}


def _in_files(paths: set[str]) -> Column:
    return F.col("file").isin(list(paths)) if paths else F.lit(False)


def _by_base_as_of(state: BaseState) -> Column:
    return on_time(state.as_of_ms).column()


def applied_by_base(state: BaseState, reread_paths: set[str]) -> Column:
    """Events the base applied: at or before its AS OF, in files it read (re-read for later events)."""
    return _in_files(reread_paths) & _by_base_as_of(state)


@dataclass(frozen=True)
class NewEvents:
    """What an incremental run learns from its decoded events before folding them."""

    late: int  # row changes at or before the base's AS OF, in files the base did not read
    why_full: str | None  # why they cannot be folded onto the base (a full rebuild is needed)
    whole_tables: list[str]  # tables with a truncate or DDL: every base row of theirs is folded again
    horizons: dict[str, int | None]  # each file's newest event time (``file_horizons``)


def scan_new_events(
    events: DataFrame, state: BaseState, reread_paths: set[str], partial_images: bool
) -> NewEvents:
    """One pass over this run's decoded events: late changes, unreplayable ones, tables changed
    whole, and each file's horizon (one small aggregation per file, summed here).

    ``events`` are those decoded from files the base did not cover; ``reread_paths`` the files it
    read before (re-read because they also held later events). Late DDL and truncates (and, for
    formats with partial images, any truncate) change rows the base's summary cannot replay.
    """
    late = ~_in_files(reread_paths) & _by_base_as_of(state)
    is_change = F.col("kind") == KIND_CHANGE
    is_truncate = is_change & (F.col("op") == OP_TRUNCATE)
    is_ddl = (F.col("kind") == KIND_IGNORED) & (F.col("reason") == IGNORED_DDL)
    structural = (is_ddl & late) | (is_truncate & (late | F.lit(partial_images)))
    per_file = (
        events.groupBy("file")
        .agg(
            _newest_event_ms().alias(C.NEWEST_MS),
            F.count(F.when(is_change & late & ~is_truncate, 1)).alias(C.LATE),
            F.count(F.when(structural, 1)).alias(C.STRUCTURAL),
            F.min_by(F.struct("file", "line", "file_pos", "op"), F.when(structural, F.col("file_pos"))).alias(
                C.FIRST_STRUCTURAL
            ),
            F.collect_set(
                F.when((is_ddl | is_truncate) & ~applied_by_base(state, reread_paths), F.col("table"))
            ).alias(C.WHOLE_TABLES),
        )
        .collect()
    )
    horizons = {r["file"]: r[C.NEWEST_MS] for r in per_file}
    late_count = sum(r[C.LATE] for r in per_file)
    whole_tables = sorted({t for r in per_file for t in r[C.WHOLE_TABLES]})
    structural_count = sum(r[C.STRUCTURAL] for r in per_file)
    if structural_count:
        firsts = [r[C.FIRST_STRUCTURAL] for r in per_file if r[C.FIRST_STRUCTURAL] is not None]
        f = min(firsts, key=lambda s: (s["file_pos"], s["file"]))
        what = "truncate" if f["op"] == OP_TRUNCATE else "DDL"
        why = (
            f"{structural_count} DDL or truncate event(s) the base's rows cannot replay "
            f"(first: {what} in {position_text(f['file'], f['line'], f['file_pos'])})"
        )
        return NewEvents(late_count, why, whole_tables, horizons)
    return NewEvents(late_count, None, whole_tables, horizons)


def unreplayable_partials(folded: DataFrame) -> int:
    """Keys where a partial image (or a key change carrying one) sorts before the base's row.

    The base's row is the merge of its events, not each column's history, so a partial image older
    than it cannot be laid in between; only a full rebuild gets such a key right.
    """
    base_ord = F.col(C.BASE_ORD)
    older = F.exists(C.PARTIALS, lambda p: p["ord"] < base_ord) | F.exists(
        C.MOVES_OUT, lambda m: m["partial"] & (m["ord"] < base_ord)
    )
    return folded.where((F.col(C.TAG) == C.TAG_ROW) & base_ord.isNotNull() & older).count()

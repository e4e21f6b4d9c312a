"""Incremental rebuilds: what a snapshot keeps so a later run can start from it (``--base``).

A typed Parquet snapshot cannot be folded further exactly: typing is lossy (a Debezium decimal's
Base64 text, an epoch-number timestamp) and the key a row is grouped by is the text of its *raw*
value. So a run asked to (``--keep-state``) also writes ``_cdc_state/``: every live row as the fold
left it (raw image, key, last applied event) plus ``state.json`` with what typing and the next run
need: the declared type signatures and dropped columns of each table, each table's last applied
log position, and every landed file read with its size and newest event time.

A run with ``--base`` then reads only files the base did not cover, starts each key from the
base's row (placed before every event) and applies the events after the base's AS OF. It falls
back to a full rebuild, and says why in the metrics, whenever that could differ from rebuilding
from scratch: a late event (at or before the base's AS OF, in a file the base did not read), an
event whose log position sorts before the base's last one, or a base made with other settings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_cdc_provider.landing import LandedFile
from airflow_cdc_provider.replay import events as ev
from airflow_cdc_provider.replay.fold import TAG_ROW

STATE_DIR = "_cdc_state"
STATE_FILE = "state.json"
ROWS_DIR = "rows"
STATE_VERSION = 1
IGNORED_IN_BASE = "applied by the base snapshot"  # an event the base already applied (re-read file)
_EARLIEST_MS = -(2**63)  # base rows sort before every event: null log position, then this time


@dataclass
class BaseState:
    """The ``state.json`` of a snapshot plus where its rows live."""

    uri: str
    format: str
    as_of_ms: int
    keys: list[Any]
    tables_filter: list[str]
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)  # signatures, dropped, key_columns, last_log_pos
    files: dict[str, list[Any]] = field(default_factory=dict)  # path -> [size, newest event ms or None]

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
        return json.dumps({
            "version": STATE_VERSION, "format": self.format, "as_of_ms": self.as_of_ms, "keys": self.keys,
            "tables_filter": self.tables_filter, "tables": self.tables, "files": self.files,
        }, sort_keys=True)


def read_base_state(spark: SparkSession, base_output: str) -> tuple[BaseState | None, str | None]:
    """``(state, None)``, or ``(None, why it cannot be used)`` when the base has no usable state."""
    uri = f"{base_output.rstrip('/')}/{STATE_DIR}"
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{uri}/{STATE_FILE}")
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(path):
        return None, f"the base {base_output} has no {STATE_DIR}/{STATE_FILE} (missing, or written without --keep-state)"
    stream = fs.open(path)
    try:
        text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    data = json.loads(text)
    if data.get("version") != STATE_VERSION:
        return None, f"the base's state has version {data.get('version')}, this job reads version {STATE_VERSION}"
    return BaseState(
        uri=uri, format=data["format"], as_of_ms=int(data["as_of_ms"]), keys=data["keys"],
        tables_filter=data["tables_filter"], tables=data["tables"], files=data["files"],
    ), None


def base_rows_as_keyed(spark: SparkSession, state: BaseState, keyed: DataFrame) -> DataFrame:
    """The base's live rows shaped like ``keyed_events`` output: one full-image reset per key.

    Each is applied (it is the state at the base's AS OF), never counted as an event, and sorts
    before every event (null log position, earliest time), so any later event of its key wins.
    ``op``/``event_ms``/``log_pos``/``file``/``line`` are the row's last applied event, so
    ``--with-metadata`` shows the same values as a full rebuild.
    """
    rows = spark.read.parquet(state.rows_uri)
    last = F.col("last")
    ordering = F.struct(
        F.lit(None).cast("array<bigint>").alias("log_pos"),
        F.lit(_EARLIEST_MS).cast("bigint").alias("event_ms"),
        F.lit("").alias("file"),
        F.lit(-1).cast("bigint").alias("file_pos"),
        F.lit(0).alias("sub_pos"),
    )
    values = {
        "table": F.col("table"),
        "kind": F.lit(ev.KIND_CHANGE),
        "op": last["op"],
        "event_ms": last["event_ms"],
        "log_pos": last["log_pos"],
        "file": last["file"],
        "file_pos": F.lit(-1).cast("bigint"),
        "line": last["line"],
        "after": F.col("image"),
        "partial": F.lit(False),
        "key_cols": F.col("key_names"),
        "_key_cols": F.col("key_names"),
        "_new_key": F.col("_key"),
        "_old_key": F.col("_key"),
        "_ord": ordering,
        "_tag": F.lit(TAG_ROW),
        "_key": F.col("_key"),
        "_applied": F.lit(True),
        "_ddl_applied": F.lit(False),
        "_after_as_of": F.lit(False),
        "_key_moved": F.lit(False),
        "_moved_away": F.lit(False),
        "_moved_partially": F.lit(False),
        "_base": F.lit(True),
    }
    schema = keyed.schema
    return rows.select(*[
        (values[f.name] if f.name in values else F.lit(None)).cast(f.dataType).alias(f.name) for f in schema.fields
    ])


def state_rows(resolved: DataFrame) -> DataFrame:
    """What ``_cdc_state/rows`` holds: the live rows, untyped, with their key and last event."""
    return resolved.where((F.col("_tag") == TAG_ROW) & F.col("exists")).select(
        "table", "_key", "image", "key_names",
        F.struct(
            F.col("last.op").alias("op"), F.col("last.event_ms").alias("event_ms"), F.col("last.log_pos").alias("log_pos"),
            F.col("last.file").alias("file"), F.col("last.line").alias("line"),
        ).alias("last"),
    )


def file_horizons(events: DataFrame) -> dict[str, int | None]:
    """Newest event time of each landed file read (0 for records without one)."""
    rows = events.groupBy("file").agg(F.max(F.coalesce(F.col("event_ms"), F.lit(0))).alias("m")).collect()
    return {r["file"]: r["m"] for r in rows}


def fallback_reason(
    events: DataFrame, state: BaseState, as_of_ms: int, covered_paths: set[str]
) -> str | None:
    """Why this run's events cannot simply be applied on top of the base (None when they can).

    ``events`` are those decoded from files the base did not cover; ``covered_paths`` the files it
    read before (re-read here because they also held later events).
    """
    is_change = F.col("kind") == ev.KIND_CHANGE
    is_ddl = (F.col("kind") == ev.KIND_IGNORED) & (F.col("reason") == ev.IGNORED_DDL)
    event_ms = F.coalesce(F.col("event_ms"), F.lit(0))
    in_base_file = F.col("file").isin(list(covered_paths)) if covered_paths else F.lit(False)
    late = (is_change | is_ddl) & ~in_base_file & (event_ms <= F.lit(state.as_of_ms))
    positions = {t: info.get("last_log_pos") for t, info in state.tables.items() if info.get("last_log_pos")}
    base_pos = F.lit(None).cast("array<bigint>")
    for table, pos in positions.items():
        base_pos = F.when(F.col("table") == table, F.lit(pos).cast("array<bigint>")).otherwise(base_pos)
    new = is_change & (event_ms > F.lit(state.as_of_ms)) & (event_ms <= F.lit(as_of_ms))
    before_base = new & base_pos.isNotNull() & (F.col("log_pos").isNull() | (F.col("log_pos") < base_pos))
    found = events.select(
        F.count(F.when(late, 1)).alias("late"),
        F.min_by(F.struct("file", "line", "file_pos"), F.when(late, F.col("file_pos"))).alias("first_late"),
        F.count(F.when(before_base, 1)).alias("before"),
        F.min_by(F.struct("table", "file", "line", "file_pos"), F.when(before_base, F.col("file_pos"))).alias("first_before"),
    ).first()
    if found["late"]:
        f = found["first_late"]
        return (f"{found['late']} late event(s) at or before the base's AS OF in files it did not read "
                f"(first: {f['file']} {_where(f)})")
    if found["before"]:
        f = found["first_before"]
        return (f"{found['before']} event(s) after the base's AS OF sort before its last applied log position "
                f"(first: table {f['table']}, {f['file']} {_where(f)})")
    return None


def _where(record: Any) -> str:
    return f"line {record['line']}" if record["line"] is not None else f"record at file position {record['file_pos']}"

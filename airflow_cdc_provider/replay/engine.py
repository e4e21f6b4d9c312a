"""Runs one snapshot rebuild: decode, fold, type, write atomically, count.

The input is scanned once: decoding, keying and the fold are one lazy plan ending in one
aggregation, whose (small) result is persisted; everything after it (quarantine, typing, tables,
metrics) reads that result, never the landed files again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_cdc_provider.contract.as_of import format_as_of
from airflow_cdc_provider.contract.metrics import QUARANTINE_DIR
from airflow_cdc_provider.formats import get_decoder
from airflow_cdc_provider.formats.events import (
    CANONICAL_EVENT_SCHEMA,
    IGNORED_TABLE_FILTER,
    KIND_CHANGE,
    KIND_IGNORED,
    KIND_QUARANTINED,
    position_text,
)
from airflow_cdc_provider.formats.landed_files import (
    LandedFile,
    checkpoint_salvaging,
    list_landed_files,
)
from airflow_cdc_provider.replay.base_state import (
    IGNORED_IN_BASE,
    ROWS_DIR,
    STATE_DIR,
    STATE_FILE,
    BaseState,
    applied_by_base,
    base_rows_as_keyed,
    carried_as_resolved,
    file_horizons,
    read_base_state,
    scan_new_events,
    split_base_rows,
    state_rows,
    unreplayable_partials,
)
from airflow_cdc_provider.replay.fold import (
    TAG_IGNORED,
    TAG_NO_KEY,
    TAG_QUARANTINED,
    TAG_ROW,
    TAG_TRUNCATE,
    KeyConfig,
    content_hash,
    fold,
    keyed_events,
    lacks_key,
    ordering,
)
from airflow_cdc_provider.replay.output import OutputTarget
from airflow_cdc_provider.replay.resolve import resolve
from airflow_cdc_provider.replay.schemas import (
    SchemaInputs,
    key_columns_of,
    schema_inputs,
    table_schemas,
    typed_value,
)
from airflow_cdc_provider.replay.spec import SnapshotSpec, parse_keys  # noqa: F401 - parse_keys: part of the engine's API

log = logging.getLogger(__name__)


class ReplayError(RuntimeError):
    """A run that cannot produce a correct snapshot; the message says what to do."""


class MissingKeyError(ReplayError):
    pass


class QuarantineError(ReplayError):
    """``--on-error fail`` and a record could not be decoded."""


def _select_tables(events: DataFrame, tables: tuple[str, ...]) -> DataFrame:
    if not tables:
        return events
    t = F.col("table")
    selected = F.lit(False)
    for name in tables:
        selected = selected | (t == name) | t.endswith("." + name)
    drop = (F.col("kind") == KIND_CHANGE) | (F.col("kind") == KIND_IGNORED)
    drop = drop & t.isNotNull() & ~selected
    return events.withColumns(
        {
            "reason": F.when(drop, F.lit(IGNORED_TABLE_FILTER)).otherwise(F.col("reason")),
            "kind": F.when(drop, F.lit(KIND_IGNORED)).otherwise(F.col("kind")),
        }
    )


def _metadata_columns(last: F.Column) -> list[F.Column]:
    position = F.when(
        F.size(last["log_pos"]) > 0,
        F.array_join(F.transform(last["log_pos"], lambda p: p.cast("string")), ":"),
    ).otherwise(F.concat_ws(":", last["file"], last["line"].cast("string")))
    return [
        last["op"].alias("_cdc_op"),
        F.timestamp_millis(last["event_ms"]).alias("_cdc_event_ts"),
        position.alias("_cdc_position"),
    ]


def run_snapshot(spark: SparkSession, spec: SnapshotSpec) -> dict:
    """Rebuild the snapshot described by ``spec``; return the metrics written beside it."""
    target = OutputTarget(spark, spec.output)
    target.refuse_overlap(spec.inputs)
    with target.exclusive():  # lock, check, clean leftovers; abort the staging on any failure
        return _rebuild(spark, spec, target)


SKIPPED_PARTITION = "partition starts after AS OF + lateness"
SKIPPED_IN_BASE = "already applied by the base"


@dataclass
class _Input:
    """What one run reads and how: the decoded events, the files behind them, the base it starts from."""

    events: DataFrame
    files: list[LandedFile]
    skipped: dict[str, list[LandedFile]]
    base: BaseState | None
    incremental: dict | None  # the metrics' "incremental" block when --base was given
    horizons: dict[str, int | None] = field(default_factory=dict)
    whole_tables: list[str] = field(default_factory=list)  # tables whose base rows are all folded again


def _base_mismatch(spec: SnapshotSpec, state: BaseState) -> str | None:
    if state.format != spec.source_format:
        return f"the base was built from --format {state.format}, this run reads {spec.source_format}"
    if state.as_of_ms > spec.as_of_ms:
        return f"AS OF {format_as_of(spec.as_of_ms)} is before the base's {format_as_of(state.as_of_ms)}"
    if state.keys != _keys_json(spec.keys):
        return "--key differs from the base's"
    if state.tables_filter != sorted(spec.tables):
        return "--table differs from the base's"
    return None


def _keys_json(keys: KeyConfig) -> list:
    return [list(keys.default), sorted([name, list(cols)] for name, cols in keys.per_table)]


def _read_input(spark: SparkSession, spec: SnapshotSpec, decode, partial_images: bool) -> _Input:
    """List, prune and decode the landed files; with ``--base``, only those the base did not cover.

    Reads everything (a full rebuild) when the base cannot be used or this run's events could not
    be folded onto it; the ``incremental`` block says which happened and why.
    """
    listed, after_as_of = spec.partitions.split(list_landed_files(spark, list(spec.inputs)), spec.as_of_ms)
    skipped = {SKIPPED_PARTITION: after_as_of}
    state, why_full = read_base_state(spark, spec.base) if spec.base else (None, None)
    if state is not None:
        why_full = _base_mismatch(spec, state)
    if state is not None and why_full is None:
        covered = [f for f in listed if state.covers(f)]
        fresh = [f for f in listed if f not in covered]
        events, fresh = (
            checkpoint_salvaging(spark, fresh, lambda files: decode(files, covered))
            if fresh
            else (_no_events(spark), [])
        )
        reread = {f.path for f in fresh if state.reread(f)}
        scan = scan_new_events(events, state, reread, partial_images)
        why_full = scan.why_full
        if why_full is None:
            horizons = file_horizons(events) if spec.writes_state else {}
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
            return _Input(marked, fresh, skipped, state, incremental, horizons, scan.whole_tables)
        events.unpersist()
    return _read_all(spark, spec, decode, listed, skipped, state, why_full)


def _read_all(
    spark: SparkSession,
    spec: SnapshotSpec,
    decode,
    listed: list[LandedFile],
    skipped: dict[str, list[LandedFile]],
    state: BaseState | None,
    why_full: str | None,
) -> _Input:
    if why_full is not None:
        log.warning("incremental run from %s falls back to a full rebuild: %s", spec.base, why_full)
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
    return _Input(events, files, {SKIPPED_PARTITION: skipped[SKIPPED_PARTITION]}, None, incremental, horizons)


def _no_events(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame([], CANONICAL_EVENT_SCHEMA).withColumn(
        "_content_hash", F.lit(0).cast("bigint")
    )


def _rebuild(spark: SparkSession, spec: SnapshotSpec, target: OutputTarget) -> dict:
    decoder = get_decoder(spec.source_format)

    def decode(landed: list[LandedFile], context: list[LandedFile] = ()) -> DataFrame:
        # Raw record text is needed only for the quarantine: keep its hash (duplicate detection) instead.
        quarantine_bound = (F.col("kind") == KIND_QUARANTINED) | lacks_key(spec.keys)
        options = replace(spec.decode_options, context_files=tuple(context))
        return decoder.decode(spark, landed, options).withColumns(
            {
                "_content_hash": content_hash(),
                "raw": F.when(quarantine_bound, F.col("raw")),
            }
        )

    # The one scan of the input: decoded events are kept (memory, spilling to disk) for the fold.
    # Planning a decoder's expressions and the fold's as one query makes Catalyst's optimizer
    # blow up (minutes, gigabytes, for a handful of rows); two plans stay small.
    read = _read_input(spark, spec, decode, decoder.partial_images)
    events, folded, carried = _fold(spark, spec, read, decoder.partial_images)
    if read.base is not None and decoder.partial_images and (older := unreplayable_partials(folded)):
        why = (
            f"{older} key(s) have a partial image older than the base's row of the key (late or out of order)"
        )
        folded.unpersist()
        read.events.unpersist()
        listed = [f for group in (read.files, read.skipped.get(SKIPPED_IN_BASE, [])) for f in group]
        read = _read_all(
            spark, spec, decode, sorted(listed, key=lambda f: f.path), read.skipped, read.base, why
        )
        events, folded, carried = _fold(spark, spec, read, decoder.partial_images)
    resolved = resolve(folded, carry_moves=decoder.partial_images)
    if carried is not None:
        resolved = resolved.unionByName(carried_as_resolved(carried, resolved))
    # Checkpointing the per-key result lets the small jobs after it plan against it alone.
    resolved = resolved.localCheckpoint(eager=True)
    try:
        return _write(spark, spec, target, read, events, resolved)
    finally:
        resolved.unpersist()
        folded.unpersist()
        read.events.unpersist()


def _fold(
    spark: SparkSession, spec: SnapshotSpec, read: _Input, partial_images: bool
) -> tuple[DataFrame, DataFrame, DataFrame | None]:
    """``(events, folded, carried)``: the selected events, their fold, and the base's untouched rows.

    With a base, only the base rows of keys this run's events touch join the fold; the others
    (``carried``) pass through unchanged.
    """
    _size_shuffles(spark, read.files)
    events = _select_tables(read.events, spec.tables)
    keyed = keyed_events(events, spec.keys, spec.as_of_ms)
    carried = None
    if read.base is not None:
        keyed = keyed.withColumn("_base", F.lit(False))
        touched, carried = split_base_rows(spark, read.base, keyed, read.whole_tables)
        keyed = keyed.unionByName(base_rows_as_keyed(touched, keyed))
    folded = fold(keyed, keep_resets=partial_images)
    if partial_images:
        folded = folded.localCheckpoint(eager=True)
    return events, folded, carried


# Bytes of landed input per shuffle partition (before AQE coalesces what turns out small).
_INPUT_BYTES_PER_SHUFFLE_PARTITION = 64 * 2**20
_MAX_SHUFFLE_PARTITIONS = 4000


def shuffle_partitions(input_bytes: int, cores: int) -> int:
    """One shuffle partition per 64 MiB of landed input, at least one per core, at most 4000."""
    wanted = -(-input_bytes // _INPUT_BYTES_PER_SHUFFLE_PARTITION)
    return max(cores, min(wanted, _MAX_SHUFFLE_PARTITIONS))


def _size_shuffles(spark: SparkSession, files: list[LandedFile]) -> None:
    """Shuffle partitions sized to the input, not Spark's fixed 200 (unless the user chose a number)."""
    if spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        return
    count = shuffle_partitions(sum(f.size for f in files), spark.sparkContext.defaultParallelism)
    spark.conf.set("spark.sql.shuffle.partitions", str(count))


def _group_counts(resolved: DataFrame) -> list:
    """One small row per (table, tag, reason): everything the metrics need."""
    c = F.col("counts")
    return (
        resolved.groupBy(
            "table",
            "_tag",
            F.when(F.col("_tag").isin(TAG_IGNORED, TAG_QUARANTINED), F.col("first.reason")).alias("reason"),
        )
        .agg(
            F.sum("n").alias("n"),
            F.sum("after_as_of").alias("after_as_of"),
            F.sum(F.col("exists").cast("long")).alias("rows"),
            F.sum(c["inserts"]).alias("inserts"),
            F.sum(c["updates"]).alias("updates"),
            F.sum(c["deletes"]).alias("deletes"),
            F.sum(c["duplicates"]).alias("duplicates"),
            F.sum(c["deletes_unknown"]).alias("deletes_unknown"),
            F.sum(c["updates_unknown"]).alias("updates_unknown"),
            F.max("last_event_ms").alias("last_event_ms"),
        )
        .collect()
    )


def _write(
    spark, spec: SnapshotSpec, target: OutputTarget, read: _Input, events: DataFrame, resolved: DataFrame
) -> dict:
    groups = _group_counts(resolved)
    keyless = sorted({g["table"] for g in groups if g["_tag"] == TAG_NO_KEY})
    if keyless:
        raise MissingKeyError(
            f"no key for table(s) {', '.join(keyless)}: the records do not name their key columns; "
            f"pass --key COL[,COL...] (or --key TABLE=COL,... per table)"
        )
    quarantined = resolved.where(F.col("_tag") == TAG_QUARANTINED)
    if spec.on_error == "fail" and any(g["_tag"] == TAG_QUARANTINED for g in groups):
        first = quarantined.select("first.*").orderBy("file", "file_pos", "sub_pos").first()
        raise QuarantineError(
            f"cannot decode {position_text(first['file'], first['line'], first['file_pos'], first['sub_pos'])}: "
            f"{first['reason']} (--on-error fail; rerun with --on-error quarantine to set such records aside)"
        )

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
                    F.struct(ordering(events).alias("o"), F.col("file").alias("f")), ordering(events)
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
    typing_inputs = schema_inputs(resolved, base_inputs)
    key_columns = {t: info["key_columns"] for t, info in base_tables.items()} | key_columns_of(resolved)
    schemas = table_schemas(resolved, tables, first_seen, key_columns, typing_inputs)
    table_paths: dict[str, str] = {}
    for table in tables:
        columns = schemas[table].columns
        image = F.col("image")
        select = [typed_value(image, col, t).alias(col) for col, t in columns.items()]
        if spec.with_metadata:
            select += _metadata_columns(F.col("last"))
        snapshot = resolved.where(
            (F.col("_tag") == TAG_ROW) & (F.col("table") == table) & F.col("exists")
        ).select(*select)
        snapshot.write.mode("overwrite").parquet(target.staging_uri(table))
        table_paths[table] = target.final_uri(table)

    quarantine_count = sum(g["n"] for g in groups if g["_tag"] == TAG_QUARANTINED)
    if quarantine_count:
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

    metrics = build_metrics(spec, target, groups, table_paths, read, quarantine_count)
    if spec.writes_state:
        _write_state(spec, target, read, resolved, typing_inputs, key_columns, metrics)
    target.write_metrics(metrics)
    target.commit()
    log.info("snapshot of %d table(s) as of %s written to %s", len(tables), metrics["as_of"], target.uri)
    return metrics


def _write_state(
    spec: SnapshotSpec,
    target: OutputTarget,
    read: _Input,
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
        keys=_keys_json(spec.keys),
        tables_filter=sorted(spec.tables),
        tables=tables,
        files=files,
    )
    target.write_text(f"{STATE_DIR}/{STATE_FILE}", state.to_json())


def build_metrics(
    spec: SnapshotSpec, target: OutputTarget, groups, table_paths, read: _Input, quarantine_count: int
) -> dict:
    def zero_table() -> dict:
        return {
            "rows": 0,
            "path": None,
            "inserts": 0,
            "updates": 0,
            "deletes": 0,
            "last_event_ms": None,
            "updates_of_unknown_key": 0,
            "deletes_of_unknown_key": 0,
            "truncates": 0,
            "events": {
                "read": 0,
                "applied": 0,
                "after_as_of": 0,
                "ignored": 0,
                "duplicates": 0,
                "quarantined": 0,
            },
        }

    totals = {"read": 0, "applied": 0, "after_as_of": 0, "ignored": 0, "duplicates": 0, "quarantined": 0}
    tables: dict[str, dict] = {t: zero_table() for t in table_paths}
    ignored_reasons: dict[str, int] = {}
    quarantine_reasons: dict[str, int] = {}
    for g in groups:
        tag, n = g["_tag"], int(g["n"] or 0)
        after = int(g["after_as_of"] or 0)
        entry = {
            "read": n,
            "applied": 0,
            "after_as_of": after,
            "ignored": 0,
            "duplicates": 0,
            "quarantined": 0,
        }
        t = tables.get(g["table"]) if g["table"] in tables else None
        if tag == TAG_ROW:
            applied = sum(int(g[k] or 0) for k in ("inserts", "updates", "deletes", "deletes_unknown"))
            entry.update(applied=applied, duplicates=int(g["duplicates"] or 0))
            if t is not None:
                t["rows"] += int(g["rows"] or 0)
                t["inserts"] += int(g["inserts"] or 0)
                t["updates"] += int(g["updates"] or 0)
                t["deletes"] += int(g["deletes"] or 0)
                t["updates_of_unknown_key"] += int(g["updates_unknown"] or 0)
                t["deletes_of_unknown_key"] += int(g["deletes_unknown"] or 0)
                if g["last_event_ms"] is not None:
                    t["last_event_ms"] = max(t["last_event_ms"] or g["last_event_ms"], g["last_event_ms"])
        elif tag == TAG_TRUNCATE:
            entry.update(applied=n - after)
            if t is not None:
                t["truncates"] += n - after
        elif tag == TAG_IGNORED:
            entry.update(ignored=n)
            ignored_reasons[g["reason"]] = ignored_reasons.get(g["reason"], 0) + n
        elif tag == TAG_QUARANTINED:
            entry.update(quarantined=n)
            quarantine_reasons[g["reason"]] = quarantine_reasons.get(g["reason"], 0) + n
        for k, v in entry.items():
            totals[k] += v
            if t is not None:
                t["events"][k] += v
    for name, t in tables.items():
        t["path"] = table_paths[name]
        earlier = read.base.tables.get(name, {}).get("last_event_ms") if read.base is not None else None
        if earlier is not None:
            t["last_event_ms"] = max(t["last_event_ms"] or earlier, earlier)
    files, skipped = read.files, [f for group in read.skipped.values() for f in group]
    metrics = {
        "format": spec.source_format,
        "as_of": format_as_of(spec.as_of_ms),
        "as_of_ms": spec.as_of_ms,
        "output": target.uri,
        "rows": sum(t["rows"] for t in tables.values()),
        "events": totals,
        "tables": tables,
        "ignored": dict(sorted(ignored_reasons.items())),
        "quarantine": {
            "records": quarantine_count,
            "path": target.final_uri(QUARANTINE_DIR) if quarantine_count else None,
            "reasons": dict(sorted(quarantine_reasons.items())),
        },
        "files": {
            "read": len(files),
            "bytes": sum(f.size for f in files),
            "skipped": len(skipped),
            "bytes_skipped": sum(f.size for f in skipped),
            "skipped_because": {why: len(group) for why, group in read.skipped.items() if group},
        },
        "mode": "incremental" if read.base is not None else "full",
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    if read.incremental is not None:
        metrics["incremental"] = read.incremental
    return metrics

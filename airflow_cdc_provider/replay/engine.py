"""Runs one snapshot rebuild: decode, fold, type, write atomically, count.

The input is scanned once: decoding, keying and the fold are one lazy plan ending in one
aggregation, whose (small) result is persisted; everything after it (quarantine, typing, tables,
metrics) reads that result, never the landed files again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_cdc_provider.formats import DecodeOptions, get_decoder
from airflow_cdc_provider.landing import LandedFile, checkpoint_salvaging, list_landed_files
from airflow_cdc_provider.replay import events as ev
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
)
from airflow_cdc_provider.replay.output import QUARANTINE_DIR, OutputTarget
from airflow_cdc_provider.replay.resolve import resolve
from airflow_cdc_provider.replay.timeparse import format_as_of, parse_as_of
from airflow_cdc_provider.replay.typing import key_columns_of, table_schemas, typed_value

log = logging.getLogger(__name__)

ON_ERROR_CHOICES = ("quarantine", "fail")


class ReplayError(RuntimeError):
    """A run that cannot produce a correct snapshot; the message says what to do."""


class MissingKeyError(ReplayError):
    pass


class QuarantineError(ReplayError):
    """``--on-error fail`` and a record could not be decoded."""


@dataclass(frozen=True)
class SnapshotSpec:
    source_format: str
    inputs: tuple[str, ...]
    as_of_ms: int
    output: str
    keys: KeyConfig = KeyConfig()
    tables: tuple[str, ...] = ()
    on_error: str = "quarantine"
    with_metadata: bool = False
    decode_options: DecodeOptions = field(default_factory=DecodeOptions)

    @classmethod
    def from_args(
        cls,
        *,
        source_format: str,
        inputs: list[str],
        as_of: str | int,
        output: str,
        key: list[str] | None = None,
        tables: list[str] | None = None,
        on_error: str = "quarantine",
        with_metadata: bool = False,
        decode_options: DecodeOptions | None = None,
    ) -> "SnapshotSpec":
        if on_error not in ON_ERROR_CHOICES:
            raise ValueError(f"--on-error must be one of {', '.join(ON_ERROR_CHOICES)}, not {on_error!r}")
        keys = parse_keys(key or [])
        options = decode_options or DecodeOptions()
        options = DecodeOptions(
            key_columns=keys.default,
            table_keys=dict(keys.per_table),
            table=options.table,
            binary_as_text=options.binary_as_text,
        )
        return cls(
            source_format=source_format,
            inputs=tuple(inputs),
            as_of_ms=parse_as_of(as_of),
            output=output,
            keys=keys,
            tables=tuple(tables or ()),
            on_error=on_error,
            with_metadata=with_metadata,
            decode_options=options,
        )


def parse_keys(values: list[str]) -> KeyConfig:
    """``--key id`` / ``--key a,b`` (every table) and ``--key db.t=a,b`` (one table)."""
    default: tuple[str, ...] = ()
    per_table: list[tuple[str, tuple[str, ...]]] = []
    for value in values:
        if "=" in value:
            table, cols = value.split("=", 1)
            per_table.append((table.strip(), tuple(c.strip() for c in cols.split(",") if c.strip())))
        else:
            default = default + tuple(c.strip() for c in value.split(",") if c.strip())
    return KeyConfig(default=default, per_table=tuple(per_table))


def _select_tables(events: DataFrame, tables: tuple[str, ...]) -> DataFrame:
    if not tables:
        return events
    t = F.col("table")
    selected = F.lit(False)
    for name in tables:
        selected = selected | (t == name) | t.endswith("." + name)
    drop = (F.col("kind") == ev.KIND_CHANGE) | (F.col("kind") == ev.KIND_IGNORED)
    drop = drop & t.isNotNull() & ~selected
    return events.withColumns({
        "reason": F.when(drop, F.lit(ev.IGNORED_TABLE_FILTER)).otherwise(F.col("reason")),
        "kind": F.when(drop, F.lit(ev.KIND_IGNORED)).otherwise(F.col("kind")),
    })


def _position_text(file: str, line: int | None, file_pos: int, sub_pos: int | None) -> str:
    where = f"line {line}" if line is not None else f"record at file position {file_pos}"
    if sub_pos:
        where += f", row {sub_pos}"
    return f"{file} {where}"


def _metadata_columns(last: F.Column) -> list[F.Column]:
    position = F.when(
        F.size(last["log_pos"]) > 0, F.array_join(F.transform(last["log_pos"], lambda p: p.cast("string")), ":")
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


def _rebuild(spark: SparkSession, spec: SnapshotSpec, target: OutputTarget) -> dict:
    files = list_landed_files(spark, list(spec.inputs))
    decoder = get_decoder(spec.source_format)

    def decode(landed: list[LandedFile]) -> DataFrame:
        # Raw record text is needed only for the quarantine: keep its hash (duplicate detection) instead.
        quarantine_bound = (F.col("kind") == ev.KIND_QUARANTINED) | lacks_key(spec.keys)
        return decoder.decode(spark, landed, spec.decode_options).withColumns({
            "_content_hash": content_hash(),
            "raw": F.when(quarantine_bound, F.col("raw")),
        })

    # The one scan of the input: decoded events are kept (memory, spilling to disk) for the fold.
    # Planning a decoder's expressions and the fold's as one query makes Catalyst's optimizer
    # blow up (minutes, gigabytes, for a handful of rows); two plans stay small.
    checkpointed, files = checkpoint_salvaging(spark, files, decode)
    events = _select_tables(checkpointed, spec.tables)
    folded = fold(keyed_events(events, spec.keys, spec.as_of_ms), keep_resets=decoder.partial_images)
    if decoder.partial_images:
        folded = folded.localCheckpoint(eager=True)
    # Checkpointing the per-key result lets the small jobs after it plan against it alone.
    resolved = resolve(folded, carry_moves=decoder.partial_images).localCheckpoint(eager=True)
    try:
        return _write(spark, spec, target, files, events, resolved)
    finally:
        resolved.unpersist()
        events.unpersist()


def _group_counts(resolved: DataFrame) -> list:
    """One small row per (table, tag, reason): everything the metrics need."""
    c = F.col("counts")
    return (
        resolved.groupBy("table", "_tag", F.when(F.col("_tag").isin(TAG_IGNORED, TAG_QUARANTINED), F.col("first.reason")).alias("reason"))
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


def _write(spark, spec: SnapshotSpec, target: OutputTarget, files, events: DataFrame, resolved: DataFrame) -> dict:
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
            f"cannot decode {_position_text(first['file'], first['line'], first['file_pos'], first['sub_pos'])}: "
            f"{first['reason']} (--on-error fail; rerun with --on-error quarantine to set such records aside)"
        )

    tables = sorted({g["table"] for g in groups if g["_tag"] in (TAG_ROW, TAG_TRUNCATE) and g["table"]})

    def first_seen(table: str, col: str, spark_type: str) -> tuple:
        """(position, file, type) of the first event declaring ``col`` as ``spark_type`` (error path only)."""
        from airflow_cdc_provider.replay.fold import ordering

        hit = (
            events.where((F.col("table") == table) & (F.col("types")[col] == spark_type))
            .select(F.min_by(F.struct(ordering(events).alias("o"), F.col("file").alias("f")), ordering(events)).alias("m"))
            .first()["m"]
        )
        if hit is None:
            return ((), "an unknown file", spark_type)
        o = hit["o"]
        return ((tuple(o["log_pos"] or ()), o["event_ms"] or 0, hit["f"], o["file_pos"]), hit["f"], spark_type)

    schemas = table_schemas(resolved, tables, first_seen, key_columns_of(resolved))
    table_paths: dict[str, str] = {}
    rows_per_table: dict[str, int] = {}
    for table in tables:
        columns = schemas[table].columns
        image = F.col("image")
        select = [typed_value(image, col, t).alias(col) for col, t in columns.items()]
        if spec.with_metadata:
            select += _metadata_columns(F.col("last"))
        snapshot = resolved.where((F.col("_tag") == TAG_ROW) & (F.col("table") == table) & F.col("exists")).select(*select)
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
        ).orderBy("file", "file_pos", "row").coalesce(1).write.mode("overwrite").json(target.staging_uri(QUARANTINE_DIR))

    metrics = build_metrics(spec, target, groups, table_paths, files, quarantine_count)
    target.write_metrics(metrics)
    target.commit()
    log.info("snapshot of %d table(s) as of %s written to %s", len(tables), metrics["as_of"], target.uri)
    return metrics


def build_metrics(spec: SnapshotSpec, target: OutputTarget, groups, table_paths, files, quarantine_count: int) -> dict:
    def zero_table() -> dict:
        return {
            "rows": 0, "path": None, "inserts": 0, "updates": 0, "deletes": 0, "last_event_ms": None,
            "updates_of_unknown_key": 0, "deletes_of_unknown_key": 0, "truncates": 0,
            "events": {"read": 0, "applied": 0, "after_as_of": 0, "ignored": 0, "duplicates": 0, "quarantined": 0},
        }

    totals = {"read": 0, "applied": 0, "after_as_of": 0, "ignored": 0, "duplicates": 0, "quarantined": 0}
    tables: dict[str, dict] = {t: zero_table() for t in table_paths}
    ignored_reasons: dict[str, int] = {}
    quarantine_reasons: dict[str, int] = {}
    for g in groups:
        tag, n = g["_tag"], int(g["n"] or 0)
        after = int(g["after_as_of"] or 0)
        entry = {"read": n, "applied": 0, "after_as_of": after, "ignored": 0, "duplicates": 0, "quarantined": 0}
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
    return {
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
        "files": {"read": len(files), "bytes": sum(f.size for f in files)},
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }

"""Salvage: what the fold's result shows about files read in splits, mended where a run needs it.

Part of the read stage, run after the fold because only its counts show what is needed. Takes the
run's files and its resolved rows; gives the rows with a split-read file's cut-short last record
named ``truncated`` instead of ``not JSON`` (``with_truncated_tails``), and with the line numbers
of split-read records filled in where the run shows them (``with_split_lines``). A whole-read file
knows both while it is decoded; a split does not. See docs/contract.md, "Quarantine records".
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_cdc_provider.formats.events import Q_NOT_JSON, Q_TRUNCATED
from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.spark.reader import LandedFile, split_lines, unterminated_last_records


def with_truncated_tails(
    spark: SparkSession, files: list[LandedFile], resolved: DataFrame
) -> DataFrame | None:
    """``resolved`` with split-read files' unparsable last lines named ``truncated`` (None: none were).

    A whole-read file knows whether its last line ended with a line break; a split does not, so
    such a line is first set aside as ``not JSON``. Only runs when the counts show one.
    """
    first = F.col(C.FIRST)
    not_json = (F.col(C.TAG) == C.TAG_QUARANTINED) & (first["reason"] == Q_NOT_JSON)
    if not any(f.split_read for f in files):
        return None
    paths = {
        r["file"] for r in resolved.where(not_json).select(first["file"].alias("file")).distinct().collect()
    }
    tails = unterminated_last_records(spark, files, paths).collect()
    if not tails:
        return None
    cut = F.broadcast(
        spark.createDataFrame(
            [(t["file"], t["file_pos"]) for t in tails], f"{C.TAIL_FILE} string, {C.TAIL_POS} long"
        )
    )
    at_tail = (first["file"] == F.col(C.TAIL_FILE)) & (first["file_pos"] == F.col(C.TAIL_POS))
    named = (
        resolved.join(cut, at_tail, "left")
        .withColumn(
            C.FIRST,
            F.when(not_json & at_tail, first.withField("reason", F.lit(Q_TRUNCATED))).otherwise(first),
        )
        .drop(C.TAIL_FILE, C.TAIL_POS)
    )
    return named.localCheckpoint(eager=True)


def with_split_lines(
    spark: SparkSession,
    files: list[LandedFile],
    resolved: DataFrame,
    quarantine: bool,
    last: bool,
    every_last: bool = False,
) -> DataFrame:
    """``resolved`` with the line numbers of split-read records filled in where a run shows them.

    ``quarantine``: the quarantined records' (``FIRST``); ``last``: each row's last event (for
    ``--with-metadata``, ``_cdc_state`` and a history's versions), where it has no log position
    to show instead; ``every_last``: every row's, log position or not (``_cdc_line``). Costs a
    text-only read of the split files involved, when any is asked about.
    """
    if not (quarantine or last) or not any(f.split_read for f in files):
        return resolved
    fields = [(C.FIRST, C.TAG_QUARANTINED)] * quarantine + [(C.LAST, C.TAG_ROW)] * (last or every_last)
    wanted = _records_asked(resolved, fields, every_last)
    if wanted.isEmpty():
        return resolved
    lines = split_lines(spark, files, wanted.distinct()).localCheckpoint(eager=True)
    out = resolved
    for field, _tag in fields:
        found = lines.select(
            F.col("file").alias(C.LINE_FILE),
            F.col("file_pos").alias(C.LINE_POS),
            F.col("line").alias(C.LINE_NUMBER),
        )
        ev = F.col(field)
        out = (
            out.join(
                F.broadcast(found),
                (ev["file"] == F.col(C.LINE_FILE))
                & (ev["file_pos"] == F.col(C.LINE_POS))
                & ev["line"].isNull(),
                "left",
            )
            .withColumn(
                field,
                F.when(ev.isNull(), ev).otherwise(
                    ev.withField("line", F.coalesce(ev["line"], F.col(C.LINE_NUMBER)))
                ),
            )
            .drop(C.LINE_FILE, C.LINE_POS, C.LINE_NUMBER)
        )
    filled = out.localCheckpoint(eager=True)
    lines.unpersist()
    return filled


def _records_asked(resolved: DataFrame, fields: list[tuple[str, str]], every_last: bool) -> DataFrame:
    """``file, file_pos`` of the split-read records whose lines ``fields`` (column, group tag) show."""
    wanted = None
    for field, tag in fields:
        ev = F.col(field)
        unpositioned = field == C.LAST and not every_last
        shown = F.coalesce(F.size(ev["log_pos"]) <= 0, F.lit(True)) if unpositioned else F.lit(True)
        asked = resolved.where(
            (F.col(C.TAG) == tag) & ev.isNotNull() & ev["line"].isNull() & ev["file"].isNotNull() & shown
        ).select(ev["file"].alias("file"), ev["file_pos"].alias("file_pos"))
        wanted = asked if wanted is None else wanted.unionByName(asked)
    return wanted

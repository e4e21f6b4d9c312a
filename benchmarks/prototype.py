"""(v): the prototype rebuild, the replay's design at its smallest: that design's floor on the same files.

It is the plainest rebuild of that design, with the order-dependent counts from a window:

* one scan: the text read once, each line parsed by ``from_json`` into an envelope whose ``before``
  and ``after`` are VARIANT objects; the key by a static ``variant_get``;
* one shuffle: a window over each key's events in position order gives, per event, the previous
  event's operation and content hash (exact duplicates, deletes of unknown keys, updates that create
  their row); one aggregation per (table, key) keeps the latest image with ``max_by`` and the
  counts as sums, materialised once;
* the counts in one small job, each table typed by ``schema_of_variant_agg`` over its final rows,
  and one Parquet write per table.

It has none of the rebuild's other guarantees: no quarantine or classification of bad records,
no key changes, no partial images, no log positions beyond the generator's, no line numbers, no
metrics file, no atomic commit. Its time says what the design costs before any of them.
It reads the generator's Debezium envelopes only (``source.file``, ``pos``, ``row``; one key column).
"""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, VariantType

from airflow_cdc_provider.contract.metrics import STATE_DIR
from airflow_cdc_provider.replay.base_state import ROWS_DIR

_SOURCE = StructType(
    [
        StructField("db", StringType()),
        StructField("table", StringType()),
        StructField("ts_ms", LongType()),
        StructField("file", StringType()),
        StructField("pos", LongType()),
        StructField("row", LongType()),
    ]
)
ENVELOPE = StructType(
    [
        StructField("op", StringType()),
        StructField("before", VariantType()),
        StructField("after", VariantType()),
        StructField("source", _SOURCE),
    ]
)
COUNTS = ("inserts", "updates", "deletes", "duplicates", "deletes_unknown", "updates_unknown")


def latest_per_key(spark: SparkSession, files: list[str], as_of_ms: int, key: str) -> DataFrame:
    """``table, key, latest, <counts>``: the prototype's fold of ``files`` up to ``as_of_ms``."""
    text = spark.read.text(files)
    parsed = text.select(F.from_json("value", ENVELOPE).alias("e"), F.xxhash64("value").alias("hash"))
    events = parsed.select("e.*", "hash").where(F.col("source.ts_ms") <= as_of_ms)
    image = F.when(F.col("op") == "d", F.col("before")).otherwise(F.col("after"))
    source = F.col("source")
    keyed = events.select(
        F.concat_ws(".", source["db"], source["table"]).alias("table"),
        F.variant_get(image, f"$.{key}", "string").alias("key"),
        "op",
        "after",
        "hash",
        F.struct(source["file"], source["pos"], source["row"]).alias("position"),
    )
    earlier = (
        Window.partitionBy("table", "key")
        .orderBy("position", "hash")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    flagged = keyed.select(
        "*",
        F.last("op", ignorenulls=True).over(earlier).alias("previous_op"),
        F.last("hash", ignorenulls=True).over(earlier).alias("previous_hash"),
    )
    duplicate = F.coalesce(F.col("hash") == F.col("previous_hash"), F.lit(False))
    counted = ~duplicate
    no_row = F.col("previous_op").isNull() | (F.col("previous_op") == "d")

    def flag(condition) -> Column:
        return condition.cast("long")

    flags = {
        "inserts": counted & F.col("op").isin("c", "r"),
        "updates": counted & (F.col("op") == "u"),
        "deletes": counted & (F.col("op") == "d") & ~no_row,
        "duplicates": duplicate,
        "deletes_unknown": counted & (F.col("op") == "d") & no_row,
        "updates_unknown": counted & (F.col("op") == "u") & no_row,
    }
    return flagged.groupBy("table", "key").agg(
        F.max_by(F.struct("op", "after"), F.struct("position", "hash")).alias("latest"),
        *[F.sum(flag(condition)).alias(name) for name, condition in flags.items()],
    )


def prototype_job(
    spark: SparkSession, files: list[str], as_of_ms: int, key: str, out: Path
) -> dict[str, int]:
    """Rebuild the snapshot at ``as_of_ms`` into ``out/<table>``; return the counts."""
    state = latest_per_key(spark, files, as_of_ms, key).localCheckpoint(eager=True)
    counts = state.agg(*[F.sum(name).alias(name) for name in COUNTS]).first().asDict()
    final = state.where(F.col("latest.op") != "d").select("table", F.col("latest.after").alias("row"))
    for table, shape in final.groupBy("table").agg(F.schema_of_variant_agg("row")).collect():
        struct = "STRUCT" + shape.removeprefix("OBJECT")  # OBJECT<id: BIGINT, ...> as a Spark type
        typed = final.where(F.col("table") == table).select(F.col("row").cast(struct).alias("r"))
        typed.select("r.*").write.mode("overwrite").parquet(str(out / table))
    return {name: counts[name] or 0 for name in COUNTS}


def daily_prototype_job(
    spark: SparkSession, base: Path, files: list[str], as_of_ms: int, key: str, out: Path
) -> None:
    """(w): the least a run from yesterday's snapshot ``base`` (a ``cdc-replay`` output written with
    ``--keep-state``) must do, as a design that carries untouched rows as they are would do it.

    The day's ``files`` are folded on their own (``latest_per_key``); every table of the base is
    copied without the keys they touch and their new rows are appended, typed by the base's own
    schema; the base's state rows are copied the same way and the new keys' latest events appended
    beside them. No quarantine, counts or metrics, no commit, and an event older than the base's row
    of its key (a late one) is not told apart: a floor, not a rebuild.
    """
    latest = latest_per_key(spark, files, as_of_ms, key).localCheckpoint(eager=True)
    touched = latest.select("table", "key")
    for table, entry in json.loads((base / "_cdc_metrics.json").read_text())["tables"].items():
        rows = spark.read.parquet(entry["path"])
        mine = touched.where(F.col("table") == table).select("key")
        kept = rows.join(mine, rows[key].cast("string") == mine["key"], "left_anti")
        kept.write.mode("overwrite").parquet(str(out / table))
        struct = "STRUCT<" + ", ".join(f"`{f.name}`: {f.dataType.simpleString()}" for f in rows.schema) + ">"
        new = latest.where((F.col("table") == table) & (F.col("latest.op") != "d"))
        new.select(F.col("latest.after").cast(struct).alias("r")).select("r.*").write.mode("append").parquet(
            str(out / table)
        )
    state = spark.read.parquet(str(base / STATE_DIR / ROWS_DIR))
    kept_state = state.join(
        touched, (state["table"] == touched["table"]) & (state["_key"][0] == touched["key"]), "left_anti"
    )
    kept_state.write.mode("overwrite").parquet(str(out / "_state" / "rows"))
    latest.write.mode("overwrite").parquet(str(out / "_state" / "new"))

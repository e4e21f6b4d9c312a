"""Landed CDC files: listing them and reading them as records with their position in the file.

Kept apart from the decoders because every line-oriented format reads files the same way, and
apart from the engine because the sensors (which have no Spark session) list the same layouts.

Positions matter: the engine orders records by the source's log position, then event time, then
the record's place in its file. Small files (the usual Kafka-sink landing) are read whole, which
gives exact line numbers and lets a pretty-printed JSON document be one record. Large files are
read line by line in splits; their ``file_pos`` still orders records exactly, but only the
byte offset of the split is known, so ``line`` is null for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_cdc_provider.replay.events import plan_barrier

# Files up to this size are read whole (exact line numbers, multi-line documents).
WHOLE_FILE_MAX_BYTES = 64 * 1024 * 1024
# A compressed file expands; keep the in-memory text of a whole-read file bounded.
WHOLE_FILE_MAX_COMPRESSED_BYTES = 8 * 1024 * 1024
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".deflate", ".zst", ".lz4", ".snappy")
# Low bits of a split record's file_pos hold its index inside the split (< split bytes).
_SPLIT_INDEX_BITS = 28

LINES_COLUMNS = ("file", "file_pos", "line", "text", "unterminated")


class LandingError(ValueError):
    """An input path is missing or holds nothing to read."""


@dataclass(frozen=True)
class LandedFile:
    path: str  # fully qualified URI, as Spark reports it in _metadata.file_path
    size: int
    modified_ms: int

    @property
    def compressed(self) -> bool:
        return self.path.lower().endswith(COMPRESSED_SUFFIXES)

    @property
    def read_whole(self) -> bool:
        limit = WHOLE_FILE_MAX_COMPRESSED_BYTES if self.compressed else WHOLE_FILE_MAX_BYTES
        return self.size <= limit


def _hidden(name: str) -> bool:
    # Spark's own rule: _SUCCESS, _cdc_metrics.json, .crc files and the like are not data.
    return name.startswith(("_", "."))


def list_landed_files(spark: SparkSession, inputs: list[str]) -> list[LandedFile]:
    """Expand paths, directories (recursively) and globs into data files, sorted by path.

    Uses the Hadoop FileSystem of the running session, so any scheme Spark can read works.
    """
    jvm = spark.sparkContext._jvm
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
    found: dict[str, LandedFile] = {}
    for raw in inputs:
        path = jvm.org.apache.hadoop.fs.Path(raw)
        fs = path.getFileSystem(hadoop_conf)
        statuses = fs.globStatus(path)
        if statuses is None or len(statuses) == 0:
            raise LandingError(f"input path does not exist or matches nothing: {raw}")
        for status in statuses:
            if status.isDirectory():
                root = status.getPath().toString().rstrip("/") + "/"
                it = fs.listFiles(status.getPath(), True)
                while it.hasNext():
                    st = it.next()
                    uri = st.getPath().toString()
                    relative = uri[len(root):] if uri.startswith(root) else st.getPath().getName()
                    if any(_hidden(part) for part in relative.split("/")):
                        continue
                    found[uri] = LandedFile(uri, st.getLen(), st.getModificationTime())
            elif not _hidden(status.getPath().getName()):
                uri = status.getPath().toString()
                found[uri] = LandedFile(uri, status.getLen(), status.getModificationTime())
    if not found:
        raise LandingError(f"no data files under {', '.join(inputs)} (names starting with _ or . are skipped)")
    return [found[k] for k in sorted(found)]


def _strip_bom(text: Column) -> Column:
    return F.when(text.startswith("\ufeff"), F.substring(text, 2, 2**31 - 1)).otherwise(text)


def _strip_cr(text: Column) -> Column:
    # Plain comparisons, not regular expressions: this runs once per landed line.
    return F.when(text.endswith("\r"), F.substring(text, 1, F.length(text) - 1)).otherwise(text)


def _whole_file_records(spark: SparkSession, paths: list[str]) -> DataFrame:
    files = spark.read.text(paths, wholetext=True).select(
        F.col("_metadata.file_path").alias("file"), _strip_bom(F.col("value")).alias("content")
    )
    # A file whose first non-blank line is a lone "{" or "[" is one pretty-printed document.
    document = F.col("content").rlike(r"^\s*[\[{][ \t\r]*(\n|$)")
    # Materialise the split once per file: expressions beside a generator are re-evaluated per output row.
    per_file = files.select(
        "file",
        document.alias("document"),
        F.col("content").endswith("\n").alias("terminated"),
        F.when(document, F.array(F.col("content"))).otherwise(F.split(F.col("content"), "\n")).alias("records"),
    ).select("file", "document", "terminated", "records", F.size("records").alias("n"))
    exploded = plan_barrier(per_file).select(
        "file", "document", "terminated", "n", F.posexplode("records").alias("idx", "text")
    )
    last = F.col("idx") == F.col("n") - 1
    return exploded.where(~(last & (F.col("text") == "") & ~F.col("document"))).select(
        "file",
        F.col("idx").cast("long").alias("file_pos"),
        (F.col("idx") + 1).cast("long").alias("line"),
        F.when(F.col("document"), F.col("text")).otherwise(_strip_cr(F.col("text"))).alias("text"),
        (last & ~F.col("terminated") & ~F.col("document")).alias("unterminated"),
    )


def _split_file_records(spark: SparkSession, paths: list[str]) -> DataFrame:
    in_partition = F.monotonically_increasing_id().bitwiseAND(F.lit((1 << 33) - 1))
    return spark.read.text(paths).select(
        F.col("_metadata.file_path").alias("file"),
        (F.col("_metadata.file_block_start") * F.lit(1 << _SPLIT_INDEX_BITS) + in_partition).alias("file_pos"),
        F.lit(None).cast("long").alias("line"),
        _strip_cr(_strip_bom(F.col("value"))).alias("text"),
        # A split cannot see whether its last line ends the file; truncation is caught by parsing.
        F.lit(False).alias("unterminated"),
    )


def read_records(spark: SparkSession, files: list[LandedFile]) -> DataFrame:
    """One row per landed line (or whole document): ``file, file_pos, line, text, unterminated``.

    Blank lines are kept (decoders drop them uncounted); the caller decides what text means.
    """
    whole = [f.path for f in files if f.read_whole]
    split = [f.path for f in files if not f.read_whole]
    parts = []
    if whole:
        parts.append(_whole_file_records(spark, whole))
    if split:
        parts.append(_split_file_records(spark, split))
    result = parts[0]
    for part in parts[1:]:
        result = result.unionByName(part)
    return result

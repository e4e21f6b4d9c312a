"""Landed CDC files: listing them and reading them as records with their position in the file.

Kept apart from the decoders because every line-oriented format reads files the same way, and
apart from the engine because the sensors (which have no Spark session) list the same layouts.

Positions matter: the engine orders records by the source's log position, then event time, then
the record's place in its file. Small files (the usual Kafka-sink landing of a few messages) are
read whole, which gives exact line numbers and lets a pretty-printed JSON document be one record.
Larger files are read line by line in splits, as Spark reads text: their ``file_pos`` orders
records exactly but ``line`` is null, and ``split_lines`` finds the lines of the few records a run
shows (quarantine, metadata) afterwards, without parsing anything.

Two kinds of damage are flagged here, where the bytes are still at hand. A compressed file that
breaks off (a gzip cut short by a failed upload) makes Hadoop's codec throw, which would fail the
whole job: ``checkpoint_salvaging`` catches that, marks the file ``damaged`` and reads it again,
keeping the lines its codec delivers before the break plus one record that stands for the lost
rest. Bytes that are not UTF-8 are flagged ``not_utf8`` per line, before anything decodes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from airflow_cdc_provider.contract.paths import (
    COMPRESSED_SUFFIXES,
    is_hidden,
    unreadable_compression,
)
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.filesystem import JobFileSystem, from_spark_uri, job_filesystem, normalise
from airflow_cdc_provider.spark.sqlexpr import Expr

# Files up to this size are read whole (exact line numbers, multi-line documents). Larger ones are
# read in splits: reading 8 files of 30 MiB whole cost twice Spark's line reader, and a whole file
# is one task, so a few large files kept cores idle.
WHOLE_FILE_MAX_BYTES = 1024 * 1024
# A compressed file expands; keep the in-memory text of a whole-read file bounded.
WHOLE_FILE_MAX_COMPRESSED_BYTES = 1024 * 1024
# Driver threads checking small compressed files once one of them turned out damaged.
_SCAN_THREADS = 16
# Low bits of a split record's file_pos hold its index inside the split (< split bytes).
_SPLIT_INDEX_BITS = 28

LINES_COLUMNS = ("file", "file_pos", "line", "text", "unterminated", "damaged", "not_utf8")
# Spark's error condition for a file whose bytes could not be read (the cause says why).
_FAILED_READ_FILE = "FAILED_READ_FILE"
# Causes that are not damage inside the file: it vanished or may not be read.
_NOT_DAMAGE = ("java.io.FileNotFoundException", "org.apache.hadoop.security.AccessControlException")


class LandingError(ValueError):
    """An input path is missing, holds nothing to read, or a file cannot be read."""


@dataclass(frozen=True)
class LandedFile:
    path: str  # fully qualified URI, in Hadoop's form: as ``landed_file_column`` names the file
    size: int
    modified_ms: int
    # The file's compressed stream breaks off: read what it delivers, then one "truncated" record.
    damaged: bool = False
    # Path below the input folder it was found under (its name for a file given directly):
    # where a strftime partition layout is matched.
    relative: str = ""

    @property
    def compressed(self) -> bool:
        return self.path.lower().endswith(COMPRESSED_SUFFIXES)

    @property
    def read_whole(self) -> bool:
        limit = WHOLE_FILE_MAX_COMPRESSED_BYTES if self.compressed else WHOLE_FILE_MAX_BYTES
        return self.size <= limit

    @property
    def split_read(self) -> bool:
        """Read in splits by Spark's line reader: a split numbers its records from 0 and cannot see
        where its file ends, so exact lines and cut-short last lines are found afterwards."""
        return not self.damaged and not self.read_whole


def list_landed_files(spark: SparkSession, inputs: list[str]) -> list[LandedFile]:
    """Expand paths, directories (recursively) and globs into data files, sorted by path.

    Listed through the session's file-system seam (``spark.filesystem``), so any scheme Spark reads works.
    """
    fs = job_filesystem(spark)
    found: dict[str, LandedFile] = {}
    for raw in inputs:
        statuses = fs.glob(raw)
        if not statuses:
            raise LandingError(f"input path does not exist or matches nothing: {raw}")
        for status in statuses:
            if status.is_dir:
                for landed in _walk_directory(fs, status.uri):
                    found[landed.path] = landed
            elif not is_hidden(status.name):
                found[status.uri] = LandedFile(
                    status.uri, status.size, status.modified_ms, relative=status.name
                )
    if not found:
        raise LandingError(
            f"no data files under {', '.join(inputs)} (names starting with _ or . are skipped)"
        )
    for uri in sorted(found):
        if (why := unreadable_compression(uri)) is not None:
            raise LandingError(why)
    return [found[k] for k in sorted(found)]


def _walk_directory(fs: JobFileSystem, top: str) -> Iterator[LandedFile]:
    """Data files below ``top``, skipping hidden files and folders (``_``/``.`` names).

    One listing per folder: Hadoop's ``listFiles(recursive)`` also looks up every file's block
    locations, which costs about 10 ms a file on a local disk (2.5 s for 280 hourly files).
    """
    root = top.rstrip("/") + "/"
    folders = [top]
    while folders:
        for status in fs.list_dir(folders.pop()):
            if is_hidden(status.name):
                continue
            if status.is_dir:
                folders.append(status.uri)
                continue
            relative = status.uri[len(root) :] if status.uri.startswith(root) else status.name
            yield LandedFile(status.uri, status.size, status.modified_ms, relative=relative)


def landed_file_column() -> Expr:
    """The file a row was read from, named as the listing names it (``LandedFile.path``).

    Spark's ``_metadata.file_path`` percent-encodes what a URI may not hold (``land%20ing`` for a
    folder named ``land ing``); decoding exactly those escapes (a ``+`` stays a ``+``) gives the
    listing's name back, so joins between listed files and read rows hold for any file name.
    """
    raw = E.col("_metadata.file_path")
    decoded = E.call("url_decode", E.call("replace", raw, E.lit("+"), E.lit("%2B")))
    return E.when(raw.contains("%"), decoded).otherwise(raw)


def _strip_bom(text: Expr) -> Expr:
    return E.when(text.startswith("\ufeff"), E.substring(text, 2, 2**31 - 1)).otherwise(text)


def _strip_cr(text: Expr) -> Expr:
    # Plain comparisons, not regular expressions: this runs once per landed line.
    return E.when(text.endswith("\r"), E.substring(text, 1, E.length(text) - 1)).otherwise(text)


def _reader(spark: SparkSession):
    """Spark's text reader, failing on a damaged file whatever the session says.

    With ``spark.sql.files.ignoreCorruptFiles`` on, Spark would drop the rest of a damaged file
    without a trace; failing lets ``checkpoint_salvaging`` account for it instead.
    """
    return spark.read.option("ignoreCorruptFiles", "false")


def _whole_file_records(spark: SparkSession, paths: list[str]) -> DataFrame:
    """Small files read whole: exact line numbers, and a pretty-printed document is one record.

    Spark's ``split`` decodes the text, turning bytes that are not UTF-8 into U+FFFD, so validity
    is checked on the whole file first; in a file that is not valid UTF-8, a line is flagged when
    it holds U+FFFD after the split (a genuine U+FFFD there is flagged too: set aside, never changed).
    """
    value, content = E.col("value"), E.col("content")
    # A file whose first non-blank line is a lone "{" or "[" is one pretty-printed document.
    document = content.rlike(r"^\s*[\[{][ \t\r]*(\n|$)")
    per_file = (
        _reader(spark)
        .text(paths, wholetext=True)
        .select(
            *E.columns(
                landed_file_column().alias("file"),
                _strip_bom(value).alias("content"),
                E.is_valid_utf8(value).alias("utf8"),
            )
        )
        .select(
            "file",
            "utf8",
            *E.columns(
                document.alias("document"),
                content.endswith("\n").alias("terminated"),
                E.when(document, E.array(content)).otherwise(E.split(content, "\n")).alias("records"),
            ),
        )
    )
    exploded = per_file.select(
        "file",
        "utf8",
        "document",
        "terminated",
        E.size("records").alias("n").column(),
        F.posexplode("records").alias("idx", "text"),
    )
    text, idx = E.col("text"), E.col("idx")
    last = idx == E.col("n") - 1
    return exploded.where((~(last & (text == "") & ~E.col("document"))).column()).select(
        "file",
        *E.columns(
            idx.cast("long").alias("file_pos"),
            (idx + 1).cast("long").alias("line"),
            E.when(E.col("document"), text).otherwise(_strip_cr(text)).alias("text"),
            (last & ~E.col("terminated") & ~E.col("document")).alias("unterminated"),
            E.lit(False).alias("damaged"),
            (~E.col("utf8") & (~E.is_valid_utf8(text) | text.contains("\ufffd"))).alias("not_utf8"),
        ),
    )


def _split_file_records(spark: SparkSession, paths: list[str]) -> DataFrame:
    value = E.col("value")
    in_partition = E.monotonically_increasing_id().bitwiseAND((1 << 33) - 1)
    return (
        _reader(spark)
        .text(paths)
        .select(
            *E.columns(
                landed_file_column().alias("file"),
                (E.col("_metadata.file_block_start") * (1 << _SPLIT_INDEX_BITS) + in_partition).alias(
                    "file_pos"
                ),
                E.null("long").alias("line"),
                _strip_cr(_strip_bom(value)).alias("text"),
                # A split cannot see whether its last line ends the file; truncation is caught by parsing.
                E.lit(False).alias("unterminated"),
                E.lit(False).alias("damaged"),
                (~E.is_valid_utf8(value)).alias("not_utf8"),
            )
        )
    )


def _split_positions(spark: SparkSession, files: list[LandedFile], asked: DataFrame) -> DataFrame:
    """``file, file_pos`` of every record of the split-read files that ``asked`` (a ``file`` column) names.

    Spark packs a given list of files into the same splits every time, so reading all the
    split-read files again with the same reader gives every record the same ``file_pos``. The files
    asked about are picked afterwards: a filter on the file could prune the read and change the packing.
    """
    split = [f.path for f in files if f.split_read]
    return (
        _split_file_records(spark, split)
        .select("file", "file_pos")
        .join(F.broadcast(asked.select("file").distinct()), "file", "left_semi")
    )


def split_lines(spark: SparkSession, files: list[LandedFile], positions: DataFrame) -> DataFrame:
    """``positions`` (``file, file_pos`` of records read in splits) with their exact ``line``.

    Numbering the lines of the files asked about places each record. Text only, nothing parsed:
    this runs for the records a run shows (quarantine, metadata), not for every record read.
    """
    if not any(f.split_read for f in files):
        return positions.withColumn("line", F.lit(None).cast("long"))
    numbered = _split_positions(spark, files, positions).select(
        "file",
        "file_pos",
        F.row_number().over(Window.partitionBy("file").orderBy("file_pos")).cast("long").alias("line"),
    )
    return positions.join(numbered, ["file", "file_pos"], "left")


def unterminated_last_records(spark: SparkSession, files: list[LandedFile], paths: set[str]) -> DataFrame:
    """``file, file_pos`` of the last record of each split-read file in ``paths`` that ends without a
    line break: the line a whole-read file flags as cut short (a split cannot see where its file ends).

    The last byte is read on the driver (uncompressed files only: a compressed stream would have to
    be decoded); the last record's position comes from one text-only read of the split files.
    """
    fs = job_filesystem(spark)

    def unterminated(landed: LandedFile) -> bool:
        return fs.read_bytes(landed.path, landed.size - 1, 1) != b"\n"

    asked = [f for f in files if f.path in paths and f.split_read and not f.compressed]
    with ThreadPoolExecutor(max_workers=min(_SCAN_THREADS, max(1, len(asked)))) as pool:
        cut = [f.path for f, yes in zip(asked, pool.map(unterminated, asked)) if yes]
    if not cut:
        return spark.createDataFrame([], "file string, file_pos long")
    named = spark.createDataFrame([(p,) for p in cut], "file string")
    return _split_positions(spark, files, named).groupBy("file").agg(F.max("file_pos").alias("file_pos"))


def _salvaged_records(spark: SparkSession, paths: list[str]) -> DataFrame:
    """Damaged compressed files: the complete lines their codec delivers, then one damaged record.

    ``ignoreCorruptFiles`` makes Spark keep what it read before the codec threw and skip the rest
    of that file only. A compressed file is never split, so its lines arrive in order in one
    partition and are numbered exactly. The damaged record (no text: the rest cannot be
    decompressed) comes after the last delivered line, so it is accounted for like any other.
    """
    delivered = (
        spark.read.option("ignoreCorruptFiles", "true")
        .text(paths)
        .select(
            landed_file_column().alias("file").column(),
            F.monotonically_increasing_id().alias("_read_order"),
            _strip_cr(_strip_bom(E.col("value"))).alias("text").column(),
            (~F.is_valid_utf8(F.col("value"))).alias("not_utf8"),
        )
    )
    in_file_order = Window.partitionBy("file").orderBy("_read_order")
    numbered = delivered.select(
        "file", (F.row_number().over(in_file_order) - 1).alias("idx"), "text", "not_utf8"
    )
    lines = numbered.select(
        "file",
        F.col("idx").cast("long").alias("file_pos"),
        (F.col("idx") + 1).cast("long").alias("line"),
        "text",
        F.lit(False).alias("unterminated"),
        F.lit(False).alias("damaged"),
        "not_utf8",
    )
    damaged = spark.createDataFrame([(p,) for p in paths], "file string")
    counts = numbered.groupBy("file").agg(F.count(F.lit(1)).alias("n"))
    rest = damaged.join(counts, "file", "left").select(
        "file",
        F.coalesce(F.col("n"), F.lit(0)).cast("long").alias("file_pos"),
        (F.coalesce(F.col("n"), F.lit(0)) + 1).cast("long").alias("line"),
        F.lit(None).cast("string").alias("text"),
        F.lit(True).alias("unterminated"),
        F.lit(True).alias("damaged"),
        F.lit(False).alias("not_utf8"),
    )
    return lines.unionByName(rest)


def read_records(spark: SparkSession, files: list[LandedFile]) -> DataFrame:
    """One row per landed line (or whole document): the columns of ``LINES_COLUMNS``.

    Blank lines are kept (decoders drop them uncounted); the caller decides what text means.
    ``damaged`` marks the one record (text null) that stands for the unreadable rest of a
    damaged compressed file; ``not_utf8`` a record whose bytes are not UTF-8 (its text holds
    U+FFFD where they were).
    """
    whole = [f.path for f in files if not f.damaged and f.read_whole]
    split = [f.path for f in files if f.split_read]
    damaged = [f.path for f in files if f.damaged]
    parts = []
    if whole:
        parts.append(_whole_file_records(spark, whole))
    if split:
        parts.append(_split_file_records(spark, split))
    if damaged:
        parts.append(_salvaged_records(spark, damaged))
    return union_all(parts)


def union_all(frames: list[DataFrame]) -> DataFrame:
    """The rows of every frame of ``frames`` (at least one), columns matched by name."""
    united = frames[0]
    for frame in frames[1:]:
        united = united.unionByName(frame)
    return united


def first_records(spark: SparkSession, files: list[LandedFile], per_split: int) -> DataFrame:
    """The first ``per_split`` records of every file read whole and of every split (``read_records``).

    A sample that reaches every file, for a decoder that plans on what the landing holds: it costs
    one read of the text, and only the sampled records go further.
    """
    index_in_split = E.col("file_pos").bitwiseAND((1 << _SPLIT_INDEX_BITS) - 1)
    return read_records(spark, files).where((index_in_split < per_split).column())


def _java_causes(exc: BaseException) -> list:
    """The Java exception behind a failed classic Spark call, then its causes (empty otherwise)."""
    chain = []
    # Py4JJavaError carries it as java_exception; PySpark's converted errors as _origin.
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    while java is not None and len(chain) < 32:
        chain.append(java)
        java = java.getCause()
    return chain


def _condition(java) -> str | None:
    """Spark's error condition of a Java exception (None for exceptions that are not Spark's)."""
    try:
        return java.getCondition()
    except Py4JError:
        return None


def _connect_root_cause(exc: PySparkException) -> tuple[str, str]:
    """The root cause of a Spark Connect error, from the server's stack trace ("Caused by:" lines)."""
    trace = exc.getStackTrace() if hasattr(exc, "getStackTrace") else None
    lines = [line for line in (trace or str(exc)).splitlines() if line.startswith("Caused by: ")]
    if not lines:
        return type(exc).__name__, exc.getMessage() if hasattr(exc, "getMessage") else str(exc)
    cause, _, message = lines[-1][len("Caused by: ") :].partition(": ")
    return cause.strip(), message.strip()


def unreadable_file(exc: BaseException) -> tuple[str, str, str] | None:
    """``(path, root cause class, its message)`` when a Spark job failed reading one file, else None."""
    causes = _java_causes(exc)
    for java in causes:
        condition = _condition(java)
        if isinstance(condition, str) and condition.startswith(_FAILED_READ_FILE):
            root = causes[-1]
            return java.getMessageParameters().get("path"), root.getClass().getName(), str(root.getMessage())
    if not causes and isinstance(exc, PySparkException):  # Spark Connect: the condition comes as it is
        condition = exc.getCondition() or ""
        if condition.startswith(_FAILED_READ_FILE):
            return ((exc.getMessageParameters() or {}).get("path"), *_connect_root_cause(exc))
    return None


def _broken_streams(spark: SparkSession, files: list[LandedFile]) -> set[str]:
    """Paths among ``files`` whose compressed stream breaks off, decompressed on the driver, a few at a time."""
    fs = job_filesystem(spark)
    with ThreadPoolExecutor(max_workers=min(_SCAN_THREADS, max(1, len(files)))) as pool:
        return {f.path for f, bad in zip(files, pool.map(lambda f: fs.stream_breaks(f.path), files)) if bad}


def checkpoint_salvaging(
    spark: SparkSession, files: list[LandedFile], build: Callable[[list[LandedFile]], DataFrame]
) -> tuple[DataFrame, list[LandedFile]]:
    """``build(files)`` materialised once (``localCheckpoint``), surviving damaged compressed files.

    When the read fails inside a compressed file, that file is marked damaged, the other small
    compressed files (those read whole) are checked on the driver so that all damaged ones are
    found at once, and the build runs again. A large damaged file found later costs one more
    attempt; an intact landing costs nothing extra. Any other unreadable file stops the run with
    a ``LandingError`` naming the file and the cause (never record content). Returns the
    checkpointed frame and the files as finally read.
    """
    by_path = {normalise(f.path): f for f in files}
    scanned = False
    while True:
        try:
            return build(files).localCheckpoint(eager=True), files
        except Exception as exc:
            failed = unreadable_file(exc)
            if failed is None:
                raise
            path, cause, message = failed
            landed = by_path.get(from_spark_uri(path)) if path else None
            if landed is None or landed.damaged or not landed.compressed or cause in _NOT_DAMAGE:
                shown = landed.path if landed else path
                raise LandingError(f"cannot read landed file {shown}: {cause}: {message}") from None
        damaged = {landed.path}
        if not scanned:
            scanned = True
            small = [f for f in files if f.compressed and f.read_whole and not f.damaged and f is not landed]
            damaged |= _broken_streams(spark, small)
        files = [replace(f, damaged=True) if f.path in damaged else f for f in files]
        by_path = {normalise(f.path): f for f in files}

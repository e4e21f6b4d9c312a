"""Landings that come as tables rather than lines: CSV and Parquet files beside JSON lines.

Several formats land the same records three ways (DataHub TUPLE, AWS DMS, Kafka Connect sinks)
and tell them apart by file extension. The rules for that, for which Parquet types a snapshot can
declare, and for reading a folder of Parquet files whose schemas may differ live here, once.
"""

from __future__ import annotations

import posixpath
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType

from airflow_cdc_provider.contract.paths import COMPRESSED_SUFFIXES
from airflow_cdc_provider.spark.filesystem import JobFileSystem, job_filesystem
from airflow_cdc_provider.spark.sqlexpr import Expr

KIND_JSON, KIND_CSV, KIND_PARQUET, KIND_AVRO = "json", "csv", "parquet", "avro"
# Parquet types the engine accepts in `types` (simpleString of the Spark type).
DECLARABLE_TYPES = (
    "tinyint",
    "smallint",
    "int",
    "bigint",
    "float",
    "double",
    "string",
    "boolean",
    "date",
    "timestamp",
    "binary",
)
_DRIVER_READ_THREADS = 16
T = TypeVar("T")


def base_name(path: str) -> str:
    """The file's name without a compression suffix (``LOAD001.csv.gz`` -> ``LOAD001.csv``)."""
    name = posixpath.basename(path)
    lowered = name.lower()
    for suffix in COMPRESSED_SUFFIXES:
        if lowered.endswith(suffix):
            return name[: -len(suffix)]
    return name


def landing_kind(path: str, kinds: tuple[str, ...] = (KIND_CSV, KIND_PARQUET)) -> str:
    """The landing of a file by its extension (``.csv``, ``.parquet``, ``.avro``), among the
    ``kinds`` a format knows; compression suffixes are looked through. Anything else (``.json``,
    ``.jsonl``, ``.txt``, no extension) is JSON lines."""
    name = base_name(path).lower()
    for kind in kinds:
        if name.endswith("." + kind):
            return kind
    return KIND_JSON


def declared_type(data_type: DataType) -> str | None:
    """The type name a Parquet column declares for the snapshot, or None (kept as it comes)."""
    name = data_type.simpleString()
    return name if name in DECLARABLE_TYPES or name.startswith("decimal(") else None


def column_expr(name: str) -> Expr:
    """A top-level column by its exact name, named ``name`` (dots and backticks in Parquet names are
    literal; ``E.col`` would split the name at dots)."""
    return Expr("`" + name.replace("`", "``") + "`", name)


def parquet_frames(spark: SparkSession, paths: Iterable[str]) -> list[tuple[list[str], DataFrame]]:
    """Parquet files read one folder at a time (a folder usually holds one table), their schemas
    merged, each frame with the paths it reads; a folder whose files' schemas cannot be merged is
    read file by file, so each file keeps its own columns and types and the engine sees any type
    change per file."""
    by_dir: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        by_dir[posixpath.dirname(path)].append(path)
    # Listed files are read as they are: no partition columns inferred from folder names (dt=...).
    reader = spark.read.option("recursiveFileLookup", "true")
    frames = []
    for group in by_dir.values():
        try:
            frames.append((group, reader.option("mergeSchema", "true").parquet(*group)))
        except (Py4JJavaError, PySparkException):
            frames.extend(([path], reader.parquet(path)) for path in group)
    return frames


def read_on_driver(
    spark: SparkSession, paths: list[str], read: Callable[[JobFileSystem, str], T]
) -> dict[str, T]:
    """``read(fs, path)`` for each file, on the driver through the session's file-system seam (any
    scheme Spark reads), a few files at a time: for the few bytes a file declares its schema in."""
    fs = job_filesystem(spark)
    with ThreadPoolExecutor(max_workers=min(_DRIVER_READ_THREADS, max(1, len(paths)))) as pool:
        return dict(zip(paths, pool.map(lambda path: read(fs, path), paths)))


def parquet_footers(spark: SparkSession, paths: list[str]) -> dict[str, dict[str, str] | None]:
    """Each file's Parquet key-value metadata, or None for a file whose footer does not read (only
    the footer is read, never the data)."""
    return read_on_driver(spark, paths, lambda fs, path: fs.parquet_metadata(path))

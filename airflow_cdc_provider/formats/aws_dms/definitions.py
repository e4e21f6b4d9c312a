"""What AWS DMS says about its tables: ``dms_table_definition.json`` and where a landed file belongs.

``dms_table_definition.json``, anywhere in the landing, is not data: it holds table definitions in
the form DMS reads for an S3 source (``{"Tables": [{"TableOwner", "TableName", "TableColumns":
[{"ColumnName", "ColumnType", "ColumnPrecision", "ColumnScale", "ColumnIsPk"}]}]}``). They give a
CSV table its column names (unless ``--columns`` does), the column types (``ColumnType``), and the
key (``ColumnIsPk``, unless ``--key`` names one for the table).

An S3 file's path says the rest: its table (``.../<schema>/<table>/[date folders/]<file>``),
whether it is a full load (``LOAD*``) and, for a CDC file, the time DMS wrote it.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from airflow_cdc_provider.contract.tables import lookup, qualify
from airflow_cdc_provider.formats.base import DecodeOptions
from airflow_cdc_provider.formats.common.tabular import base_name
from airflow_cdc_provider.formats.common.values import REPLICATE_TYPES
from airflow_cdc_provider.spark.filesystem import job_filesystem
from airflow_cdc_provider.spark.reader import LandedFile, LandingError

DEFINITION_FILE = "dms_table_definition.json"

# DMS names CDC files by the time it wrote them: 20141029-1134010000.csv (HHMMSS, then fractions).
_CDC_FILE_TIME = re.compile(r"^(\d{8})-(\d{6})(\d*)")
# Folders DMS's date partitioning (DatePartitionEnabled) or a hive-style layout adds below a table.
_PARTITION_FOLDER = re.compile(r"^[\d_-]+$|^[^=]+=[^=]*$")
# DMS data types (the ColumnType of an S3 source's table definition) -> Spark types. BYTE and BLOB
# values keep the text DMS writes (nothing declares how it encodes them); TIME stays text.
_DMS_TYPES = REPLICATE_TYPES | {
    "TIME": "string",
    "STRING": "string",
    "WSTRING": "string",
    "CLOB": "string",
    "NCLOB": "string",
}


@dataclass(frozen=True)
class TableDefinition:
    """One table of a ``dms_table_definition.json``."""

    columns: tuple[str, ...]
    types: dict[str, str] = field(default_factory=dict)
    keys: tuple[str, ...] = ()


def dms_spark_type(column: dict) -> str | None:
    """The Spark type of one ``TableColumns`` entry (None: keep the text)."""
    kind = str(column.get("ColumnType") or "").strip().upper()
    if kind == "NUMERIC":
        try:
            precision = int(column.get("ColumnPrecision") or 38)
            scale = int(column.get("ColumnScale") or 0)
        except (TypeError, ValueError):
            return None
        precision = precision if 0 < precision <= 38 else 38
        return f"decimal({precision},{min(max(scale, 0), precision)})"
    return _DMS_TYPES.get(kind)


def parse_definitions(text: str, path: str) -> dict[str, TableDefinition]:
    """``{owner.table: definition}`` of one DMS table-definition document; a clear error when it is not one."""
    try:
        document = json.loads(text)
        tables = document["Tables"]
        out = {}
        for table in tables:
            owner, name = str(table.get("TableOwner") or "").strip(), str(table["TableName"]).strip()
            columns = table["TableColumns"]
            names = tuple(str(c["ColumnName"]) for c in columns)
            types = {str(c["ColumnName"]): t for c in columns if (t := dms_spark_type(c)) is not None}
            keys = tuple(
                str(c["ColumnName"])
                for c in columns
                if str(c.get("ColumnIsPk", "")).strip().lower() == "true"
            )
            out[qualify((owner or None, name))] = TableDefinition(names, types, keys)
        return out
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise LandingError(
            f"cannot read the DMS table definition {path}: expected "
            f'{{"Tables": [{{"TableOwner", "TableName", "TableColumns": [{{"ColumnName", "ColumnType", ...}}]}}]}} '
            f"({type(exc).__name__}: {exc})"
        ) from None


def is_definition_file(path: str) -> bool:
    return posixpath.basename(path).lower() == DEFINITION_FILE


def read_definitions(spark: SparkSession, files: list[LandedFile]) -> dict[str, TableDefinition]:
    """The table definitions of every ``dms_table_definition.json`` among ``files``, read on the driver.

    Read in path order, so that a table two documents define takes the later path's definition.
    """
    definitions: dict[str, TableDefinition] = {}
    for landed in sorted(set(files), key=lambda f: f.path):
        if is_definition_file(landed.path):
            definitions.update(parse_definitions(job_filesystem(spark).read_text(landed.path), landed.path))
    return definitions


@dataclass(frozen=True)
class Catalog:
    """What the landing and the options say about each table: its CSV column names, types, key."""

    definitions: dict[str, TableDefinition]
    options: DecodeOptions

    def names(self, table: str | None) -> tuple[str, ...] | None:
        given = lookup(self.options.table_columns, table)
        if given is not None:
            return tuple(given)
        definition = lookup(self.definitions, table)
        return definition.columns if definition else None

    def types(self, table: str | None) -> dict[str, str] | None:
        definition = lookup(self.definitions, table)
        return dict(definition.types) if definition and definition.types else None

    def keys(self, table: str | None) -> list[str] | None:
        """The definition's key, unless ``--key`` names one for the table (then the engine uses that)."""
        if table is None or self.options.key_columns or lookup(self.options.table_keys, table):
            return None
        definition = lookup(self.definitions, table)
        return list(definition.keys) if definition and definition.keys else None


def table_of(path: str) -> str | None:
    """``schema.table`` from ``.../<schema>/<table>/[date folders/]<file>``; None above two folders."""
    folders = [part for part in urlsplit(path).path.split("/")[:-1] if part]
    while folders and _PARTITION_FOLDER.match(folders[-1]):
        folders.pop()
    return qualify(folders[-2:]) if len(folders) >= 2 else None


def is_full_load(path: str) -> bool:
    return base_name(path).upper().startswith("LOAD")


def file_time_ms(path: str) -> int | None:
    """Epoch ms (UTC) of a CDC file's name (``20141029-1134010000.csv``), None for other names."""
    match = _CDC_FILE_TIME.match(base_name(path))
    if not match:
        return None
    try:
        moment = datetime.strptime(match.group(1) + match.group(2), "%Y%m%d%H%M%S")
    except ValueError:
        return None
    fraction = (match.group(3) + "000")[:3]
    return int(moment.replace(tzinfo=timezone.utc).timestamp()) * 1000 + int(fraction)

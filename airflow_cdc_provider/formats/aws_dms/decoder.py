"""AWS DMS (``--format aws-dms``): both ways DMS lands changes, told apart by file extension.

- ``.csv`` (also ``.csv.gz`` and the other compressed forms): the S3 target's headerless CSV, with
  ``Op`` (``I``/``U``/``D``) first where DMS writes it (``s3_csv``).
- ``.parquet``: the S3 target's Parquet; the same ``Op`` column where DMS writes it, the other
  columns named and typed by the file itself (``s3_parquet``).
- anything else: JSON lines as the Kafka and Kinesis targets write them, ``{"data": {...},
  "metadata": {...}}`` (``stream_json``).

S3 landings name their table by folder: ``.../<schema>/<table>/<file>``, looking through date
partition folders DMS adds below it (``2024/09/02``, ``20240902``, ``dt=...``). Both S3 landings
become rows of one layout (``s3_rows``), decoded together.

``dms_table_definition.json``, anywhere in the landing, is not data: it holds table definitions in
the form DMS reads for an S3 source (``definitions``): a CSV table's column names (unless
``--columns`` gives them), the column types, and the key (unless ``--key`` names one).

Order: a full load (``LOAD*`` files, operation ``load``) comes before the changes of its table;
changes follow their time (``--timestamp-column``, DMS's ``TimestampColumnName``, in the S3
files; ``metadata.timestamp`` in JSON), else the CDC file name's time (``YYYYMMDD-HHMMSSfff``), then
their file and place in it (``ordering``).
"""

from __future__ import annotations

from collections import defaultdict

from pyspark.sql import DataFrame, SparkSession

from airflow_cdc_provider.formats.aws_dms.definitions import (
    Catalog,
    is_definition_file,
    read_definitions,
)
from airflow_cdc_provider.formats.aws_dms.s3_csv import csv_rows
from airflow_cdc_provider.formats.aws_dms.s3_parquet import parquet_rows
from airflow_cdc_provider.formats.aws_dms.s3_rows import ROW_COLUMNS, tabular_events
from airflow_cdc_provider.formats.aws_dms.stream_json import json_events
from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.common.tabular import KIND_CSV, KIND_JSON, KIND_PARQUET, landing_kind
from airflow_cdc_provider.formats.events import CANONICAL_EVENT_SCHEMA
from airflow_cdc_provider.spark.reader import LandedFile, union_all


class AwsDmsDecoder(Decoder):
    name = "aws-dms"
    description = (
        "AWS DMS: S3 target CSV (LOAD*/CDC files, Op column, schema/table folders) and Parquet, "
        "Kafka/Kinesis target JSON ({data, metadata}, BI_ before images); chosen by file extension"
    )
    needs = (
        "--key (unless dms_table_definition.json marks ColumnIsPk); CSV: --columns TABLE=C1,... "
        "or dms_table_definition.json; --timestamp-column for DMS's TimestampColumnName"
    )
    transaction_ids = True

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        catalog = Catalog(read_definitions(spark, [*files, *options.context_files]), options)
        by_kind: dict[str, list[LandedFile]] = defaultdict(list)
        for landed in files:
            if not is_definition_file(landed.path):
                by_kind[landing_kind(landed.path)].append(landed)
        parts: list[DataFrame] = []
        if by_kind[KIND_JSON]:
            parts.append(json_events(spark, by_kind[KIND_JSON], catalog))
        s3_events = _s3_events(spark, by_kind, catalog)
        if s3_events is not None:
            parts.append(s3_events)
        if not parts:  # only table definitions
            return spark.createDataFrame([], CANONICAL_EVENT_SCHEMA)
        return union_all(parts)


def _s3_events(
    spark: SparkSession, by_kind: dict[str, list[LandedFile]], catalog: Catalog
) -> DataFrame | None:
    """The events of the S3 target's files, CSV and Parquet read into one set of rows and decoded
    together (``tabular_events``); None when the landing holds neither."""
    tabular = []
    if by_kind[KIND_CSV]:
        tabular.append(csv_rows(spark, by_kind[KIND_CSV], catalog))
    if by_kind[KIND_PARQUET]:
        tabular.extend(parquet_rows(spark, by_kind[KIND_PARQUET], catalog))
    if not tabular:
        return None
    return tabular_events(union_all([part.select(*ROW_COLUMNS) for part in tabular]))

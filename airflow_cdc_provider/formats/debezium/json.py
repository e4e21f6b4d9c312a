"""Debezium JSON (``--format debezium-json``): the envelope as JSON lines, with or without the schema block."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.common.jsonlines import parse_json_records
from airflow_cdc_provider.formats.debezium.envelope import RECORD_SCHEMA, envelope_events
from airflow_cdc_provider.spark.reader import LandedFile


class DebeziumJsonDecoder(Decoder):
    name = "debezium-json"
    description = (
        "Debezium JSON envelope with or without the schema block: open-source Debezium (MySQL, PostgreSQL, "
        "Oracle, SQL Server), Lindorm SQL and HBase tables, Huawei CDL message_version 2.0"
    )
    needs = "--key (except Lindorm HBase tables, keyed by ROW, and CDL records carrying `unique`)"
    transaction_ids = True

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        return envelope_events(parse_json_records(spark, files, RECORD_SCHEMA), options)

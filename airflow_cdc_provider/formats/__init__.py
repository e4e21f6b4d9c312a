"""Source-format decoders and their registry (``--format`` names)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_cdc_provider.formats.base import DecodeOptions, Decoder

# --format name -> "module:Class"; imported on use so one broken optional decoder cannot stop the others.
_REGISTRY: dict[str, str] = {
    "debezium-json": "airflow_cdc_provider.formats.debezium.json:DebeziumJsonDecoder",
    "debezium-avro": "airflow_cdc_provider.formats.debezium.avro:DebeziumAvroDecoder",
    "cdl-json": "airflow_cdc_provider.formats.cdl.decoder:CdlJsonDecoder",
    "canal-json": "airflow_cdc_provider.formats.mysql.canal:CanalJsonDecoder",
    "shareplex-json": "airflow_cdc_provider.formats.shareplex.decoder:ShareplexJsonDecoder",
    "dts-avro": "airflow_cdc_provider.formats.dts_avro.decoder:DtsAvroDecoder",
    "datahub-tuple": "airflow_cdc_provider.formats.datahub.tuple_topic:DatahubTupleDecoder",
    "datahub-blob": "airflow_cdc_provider.formats.datahub.blob_topic:DatahubBlobDecoder",
    "qlik-json": "airflow_cdc_provider.formats.qlik.decoder:QlikJsonDecoder",
    "maxwell-json": "airflow_cdc_provider.formats.mysql.maxwell:MaxwellJsonDecoder",
    "ogg-json": "airflow_cdc_provider.formats.ogg.decoder:OggJsonDecoder",
    "debezium-mongodb": "airflow_cdc_provider.formats.debezium.mongodb:DebeziumMongodbDecoder",
    "aws-dms": "airflow_cdc_provider.formats.aws_dms.decoder:AwsDmsDecoder",
}


class UnknownFormatError(ValueError):
    pass


def format_names() -> list[str]:
    return sorted(_REGISTRY)


def get_decoder(name: str) -> Decoder:
    try:
        target = _REGISTRY[name]
    except KeyError:
        raise UnknownFormatError(
            f"unknown format {name!r}; known formats: {', '.join(format_names())} (see `cdc-replay formats`)"
        ) from None
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)()


def __getattr__(name: str) -> Any:
    # Lazy, so Spark-free modules (the sensor's event-time probe) can use format helpers without PySpark.
    if name in ("DecodeOptions", "Decoder"):
        from airflow_cdc_provider.formats import base

        return getattr(base, name)
    raise AttributeError(name)


__all__ = ["DecodeOptions", "Decoder", "UnknownFormatError", "format_names", "get_decoder"]

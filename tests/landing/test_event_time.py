"""The per-format event-time extractors: the same field, unit and time zone as each decoder reads."""

from __future__ import annotations

import base64
import io
import json

import pytest

from airflow_cdc_provider.landing.event_time import (
    EXTRACTORS,
    UNSUPPORTED,
    UnsupportedEventTimeFormatError,
    extractor_for,
    newest_event_ms,
)

T = 1725264000000  # 2024-09-02T08:00:00Z


def line(obj: object) -> str:
    return json.dumps(obj)


@pytest.mark.parametrize(
    ("source_format", "record", "expected"),
    [
        # Debezium: source.ts_ms wins over the envelope's ts_ms; payload wrapper or bare envelope.
        (
            "debezium-json",
            line({"schema": {}, "payload": {"op": "c", "ts_ms": T + 8, "source": {"ts_ms": T}}}),
            T,
        ),
        ("debezium-json", line({"op": "u", "ts_ms": T + 8, "source": {"ts_ms": T + 1}}), T + 1),
        ("debezium-json", line({"ts_ms": T + 5}), T + 5),  # heartbeat: the stream's progress
        ("debezium-json", "null", None),  # Kafka tombstone
        ("debezium-json", "", None),
        ("debezium-json", '{"op": "c", "source": {"ts_ms": 172526', None),  # a line cut short
        ("cdl-json", line({"schema": {}, "payload": {"OPERATION": "INSERT", "TIMESTAMP": str(T)}}), T),
        ("cdl-json", line({"OPERATION": "DELETE", "TIMESTAMP": T + 2}), T + 2),
        ("canal-json", line({"type": "INSERT", "es": T, "ts": T + 900}), T),
        ("canal-json", line({"type": "INSERT", "es": str(T + 3)}), T + 3),
        ("shareplex-json", line({"meta": {"time": "2024-09-02T08:00:00"}}), T),  # no offset: UTC
        ("shareplex-json", line({"meta": {"time": "2024-09-02T10:00:00+02:00"}}), T),
        ("shareplex-json", line({"meta": {"time": "1725264000"}}), T),  # epoch seconds
        ("shareplex-json", line({"meta": {"time": str(T + 7)}}), T + 7),  # 13 digits: ms
        ("datahub-blob", line({"payload": {"op": "INSERT", "timestamp": {"eventTime": str(T)}}}), T),
        (
            "datahub-blob",
            line({"payload": {"timestamp": {"eventTime": "-1", "systemTime": "-1"}}}),
            None,
        ),  # full load
        ("datahub-tuple", line({"_excute_time_": str(T)}), T),
        ("datahub-tuple", line({"_excute_time_": T * 1000 + 999}), T),  # 16 digits: microseconds
        ("datahub-tuple", line({"_excute_time_": "2024-09-02 08:00:00"}), T),
        (
            "qlik-json",
            line(
                {
                    "magic": "atMSG",
                    "type": "DT",
                    "message": {"headers": {"timestamp": "2024-09-02T08:00:00.250"}},
                }
            ),
            T + 250,
        ),
        (
            "qlik-json",
            line(
                {"magic": "atMSG", "type": "MD", "message": {"lineage": {"timestamp": "2024-09-02T09:00:00"}}}
            ),
            None,
        ),
        ("qlik-json", line({"message": {"headers": {"timestamp": ""}}}), None),  # REFRESH rows
        ("maxwell-json", line({"type": "insert", "ts": T // 1000}), T),  # seconds
        ("maxwell-json", line({"type": "insert", "ts": str(T + 7)}), T + 7),  # 13 digits: ms
        ("maxwell-json", line({"type": "bootstrap-start"}), None),
        ("ogg-json", line({"op_type": "I", "op_ts": "2024-09-02 08:00:00.250999"}), T + 250),  # UTC
        ("ogg-json", line({"op_type": "I", "op_ts": "2024-09-02T10:00:00.000000+02:00"}), T),
        ("ogg-json", line({"op_type": "T"}), None),
        ("debezium-mongodb", line({"op": "d", "source": {"ts_ms": T}, "ts_ms": T + 900}), T),
        ("debezium-mongodb", line({"id": '{"$oid": "67ab25755c0d5ac87eb8c632"}'}), None),  # a Kafka key line
    ],
)
def test_each_format_reads_its_event_time(source_format, record, expected):
    assert extractor_for(source_format)(record) == expected


def test_dts_avro_reads_the_source_timestamp_of_a_base64_message():
    import fastavro

    from airflow_cdc_provider.formats.dts_avro.schema import record_schema

    schema = fastavro.parse_schema(record_schema(born_timestamp=True))
    record = {
        "version": 1,
        "id": 42,
        "sourceTimestamp": T // 1000,
        "sourcePosition": "1@mysql-bin.000001",
        "safeSourcePosition": "1@mysql-bin.000001",
        "sourceTxid": "0",
        "source": {"sourceType": "MySQL", "version": "5.7"},
        "operation": "INSERT",
        "objectName": "shop.orders",
        "processTimestamps": None,
        "tags": {},
        "fields": None,
        "beforeImages": None,
        "afterImages": None,
        "bornTimestamp": T // 1000 + 1,
    }
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, record)
    dump = line({"topic": "dts", "offset": 7, "value": base64.b64encode(buffer.getvalue()).decode("ascii")})

    assert extractor_for("dts-avro")(dump) == T
    assert extractor_for("dts-avro")(line({"value": "bm90IGF2cm8="})) is None  # "not avro"


def test_newest_event_is_the_largest_whatever_the_order():
    records = [line({"es": T + 5}), "null", line({"es": T + 9}), line({"es": T + 1}), "garbage"]
    assert newest_event_ms("canal-json", records) == T + 9
    assert newest_event_ms("canal-json", ["null", ""]) is None


def test_every_registered_format_has_an_extractor_and_unknown_ones_are_refused():
    from airflow_cdc_provider.formats import format_names

    assert sorted([*EXTRACTORS, *UNSUPPORTED]) == format_names()
    with pytest.raises(UnsupportedEventTimeFormatError) as raised:
        extractor_for("no-such-format")
    assert str(raised.value) == (
        "the event_time strategy cannot read event times of source_format 'no-such-format'; it knows aws-dms, "
        "canal-json, cdl-json, datahub-blob, datahub-tuple, debezium-json, debezium-mongodb, dts-avro, maxwell-json, "
        "ogg-json, qlik-json, shareplex-json. Use strategy 'marker' or 'partition' instead."
    )
    with pytest.raises(
        UnsupportedEventTimeFormatError, match=r"'debezium-avro' \(Avro container and Parquet"
    ):
        extractor_for("debezium-avro")


def test_aws_dms_reads_metadata_timestamp_of_json_lines_only():
    record = {
        "data": {"id": 1},
        "metadata": {"timestamp": "2024-10-27T12:39:03.210671Z", "operation": "insert"},
    }
    assert extractor_for("aws-dms")(line(record)) == 1730032743210
    no_offset = {"metadata": {"timestamp": "2024-10-27T12:39:03.999999"}}
    assert extractor_for("aws-dms")(line(no_offset)) == 1730032743999
    assert extractor_for("aws-dms")("I,101,Smith,2024-10-27 12:39:03.210671") is None  # an S3 CSV row
    assert extractor_for("aws-dms")(line({"metadata": {"timestamp": "yesterday"}})) is None

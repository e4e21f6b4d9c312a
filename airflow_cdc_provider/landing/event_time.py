"""The event time of one landed record, read in plain Python (no Spark).

The ``event_time`` strategy of ``CdcLandedFilesSensor`` asks "how far has the landing got?" by
reading a few of the newest records, in the Airflow worker or triggerer, where a JVM per poke is
out of the question. This module is the small per-format extractor it uses: one function per
``--format`` name, each reading the same field the format's decoder takes as the event time
(``formats/<format>.py``, column ``event_ms``) with the same units and time-zone rules, so that
"newest event time" here and "event time <= AS OF" in the replay job mean the same instant.

Records without an event time (Kafka tombstones, Qlik metadata messages, full-load rows stamped -1)
give ``None``: they say nothing about progress.
"""

from __future__ import annotations

import base64
import binascii
import functools
import io
import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

_DIGITS = re.compile(r"^-?\d+$")
# datahub-tuple: a 16-digit _excute_time_ is DataHub's TIMESTAMP in microseconds (formats/datahub/tuple_topic.py).
_MICROS_FROM = 10**14
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class UnsupportedEventTimeFormatError(ValueError):
    """The format has no cheap event-time extractor; the sensor cannot use the event_time strategy for it."""


def _json_object(record: str) -> dict[str, Any] | None:
    try:
        value = json.loads(record)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _get(obj: Any, *path: str) -> Any:
    for name in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(name)
    return obj


def _unwrapped(obj: dict[str, Any]) -> dict[str, Any]:
    """The Kafka Connect ``{"schema", "payload"}`` envelope's payload, or the record itself when bare."""
    payload = obj.get("payload")
    return payload if isinstance(payload, dict) else obj


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _DIGITS.match(value.strip()):
        return int(value.strip())
    return None


def _instant_ms(text: str) -> int | None:
    """Epoch ms of an ISO-8601 text; a text without an offset is UTC (as every decoder reads it)."""
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return int(parsed.timestamp() * 1000)


def _positive(ms: int | None) -> int | None:
    # Full-load records carry -1 or 0 (DataHub BLOB, Qlik REFRESH): no event time.
    return ms if ms is not None and ms > 0 else None


def debezium_json(record: str) -> int | None:
    """``source.ts_ms`` (the change's commit time), else the envelope's ``ts_ms`` (heartbeats)."""
    obj = _json_object(record)
    if obj is None:
        return None
    envelope = _unwrapped(obj)
    return _positive(_integer(_get(envelope, "source", "ts_ms")) or _integer(envelope.get("ts_ms")))


def cdl_json(record: str) -> int | None:
    """``TIMESTAMP`` (epoch ms) of the CDL 1.0 payload."""
    obj = _json_object(record)
    return None if obj is None else _positive(_integer(_unwrapped(obj).get("TIMESTAMP")))


def canal_json(record: str) -> int | None:
    """``es``: when the statement ran on the source (epoch ms)."""
    obj = _json_object(record)
    return None if obj is None else _positive(_integer(obj.get("es")))


def shareplex_json(record: str) -> int | None:
    """``meta.time``: digits are epoch seconds (ms when 13 or more), else ISO text, UTC without an offset."""
    text = _get(_json_object(record), "meta", "time")
    if not isinstance(text, str) or not text.strip():
        return None
    text = text.strip()
    if text.isdigit():
        return _positive(int(text) if len(text) >= 13 else int(text) * 1000)
    return _positive(_instant_ms(text))


def datahub_blob(record: str) -> int | None:
    """``payload.timestamp.eventTime`` (epoch ms), else ``systemTime``; full load (-1) has none."""
    stamps = _get(_json_object(record), "payload", "timestamp")
    if not isinstance(stamps, dict):
        return None
    return _positive(_integer(stamps.get("eventTime"))) or _positive(_integer(stamps.get("systemTime")))


def datahub_tuple(record: str) -> int | None:
    """``_excute_time_``: epoch ms, or µs when 16 digits, or a timestamp text (UTC without an offset).

    JSON-lines landings only; CSV and Parquet TUPLE landings have no cheap tail to read.
    """
    obj = _json_object(record)
    if obj is None:
        return None
    value = obj.get("_excute_time_")
    number = _integer(value)
    if number is not None:
        return _positive(number // 1000 if abs(number) >= _MICROS_FROM else number)
    return _positive(_instant_ms(value)) if isinstance(value, str) else None


def qlik_json(record: str) -> int | None:
    """DT messages' ``message.headers.timestamp``: epoch ms or ISO text in UTC; MD messages have none."""
    text = _get(_json_object(record), "message", "headers", "timestamp")
    number = _integer(text)
    if number is not None:
        return _positive(number)
    return _positive(_instant_ms(text)) if isinstance(text, str) and text.strip() else None


def dts_avro(record: str) -> int | None:
    """``sourceTimestamp`` (seconds) of a DTS ``Record`` landed as a Kafka JSON dump (Base64 ``value``).

    Only the leading fields are decoded, with the schema the decoder uses (``formats/dts_avro_schema``);
    Avro container files are not read (their tail cannot be decoded without the whole block).
    """
    value = _get(_json_object(record), "value")
    if not isinstance(value, str):
        return None
    try:
        payload = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    import fastavro

    try:
        decoded = fastavro.schemaless_reader(io.BytesIO(payload), _dts_record_prefix_schema(), None)
    except Exception:  # noqa: BLE001 - fastavro raises EOFError, ValueError, IndexError...: not a Record
        return None
    seconds = _integer(decoded.get("sourceTimestamp")) if isinstance(decoded, dict) else None
    return _positive(seconds * 1000 if seconds is not None else None)


def _iso_ms(text: Any) -> int | None:
    """ISO date-time text (a space or ``T`` between date and time) in whole ms; UTC unless it names an offset."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    # Whole milliseconds, exactly (a float product could round 0.999 ms up).
    return _positive((parsed - _EPOCH) // timedelta(milliseconds=1))


def aws_dms(record: str) -> int | None:
    """``metadata.timestamp`` of DMS's Kafka/Kinesis JSON (ISO, microseconds, ``Z``), in whole ms.

    Only JSON lines carry it: a row of DMS's S3 CSV is not self-describing (its time column is
    known from ``--timestamp-column`` and ``--columns`` only), so CSV rows give None.
    """
    return _iso_ms(_get(_json_object(record), "metadata", "timestamp"))


@functools.cache
def _dts_record_prefix_schema() -> Any:
    """The parsed common prefix of old and new DTS Records (the decoder's schema), parsed once."""
    import fastavro

    from airflow_cdc_provider.formats.dts_avro.schema import record_schema

    return fastavro.parse_schema(record_schema(born_timestamp=False))


def maxwell_json(record: str) -> int | None:
    """``ts``: epoch seconds (13 digits or more: milliseconds)."""
    value = _json_object(record)
    ts = None if value is None else value.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, str)) or not _DIGITS.match(str(ts).strip()):
        return None
    number = int(str(ts).strip())
    return _positive(number if len(str(number)) >= 13 else number * 1000)


def ogg_json(record: str) -> int | None:
    """``op_ts``: ``YYYY-MM-DD HH:MM:SS.ffffff`` (or ISO text), UTC unless it names an offset."""
    return _iso_ms(_get(_json_object(record), "op_ts"))


def debezium_mongodb(record: str) -> int | None:
    """As ``debezium-json``: ``source.ts_ms``, else the envelope's ``ts_ms``; Kafka key lines have none."""
    return debezium_json(record)


EXTRACTORS: dict[str, Callable[[str], int | None]] = {
    "debezium-json": debezium_json,
    "cdl-json": cdl_json,
    "canal-json": canal_json,
    "shareplex-json": shareplex_json,
    "datahub-blob": datahub_blob,
    "datahub-tuple": datahub_tuple,
    "qlik-json": qlik_json,
    "dts-avro": dts_avro,
    "maxwell-json": maxwell_json,
    "ogg-json": ogg_json,
    "debezium-mongodb": debezium_mongodb,
    "aws-dms": aws_dms,
}
# Formats whose landings have no last records to read cheaply: the event_time strategy refuses them.
UNSUPPORTED: dict[str, str] = {
    "debezium-avro": "Avro container and Parquet files cannot be read from their last bytes",
}


def extractor_for(source_format: str) -> Callable[[str], int | None]:
    """The extractor of a ``--format`` name; a clear error for formats it cannot read cheaply."""
    try:
        return EXTRACTORS[source_format]
    except KeyError:
        why = f" ({UNSUPPORTED[source_format]})" if source_format in UNSUPPORTED else ""
        raise UnsupportedEventTimeFormatError(
            f"the event_time strategy cannot read event times of source_format {source_format!r}{why}; "
            f"it knows {', '.join(sorted(EXTRACTORS))}. Use strategy 'marker' or 'partition' instead."
        ) from None


def newest_event_ms(source_format: str, records: list[str]) -> int | None:
    """The largest event time among ``records`` (None when none of them carries one)."""
    extract = extractor_for(source_format)
    times = [ms for ms in map(extract, records) if ms is not None]
    return max(times, default=None)

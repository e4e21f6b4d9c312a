"""DTS value records (Integer, Decimal, DateTime, Character, ...) as typed texts, per source database."""

from __future__ import annotations

import base64
import codecs
import datetime as dt
import math
import re
from decimal import Decimal
from typing import Any

from airflow_cdc_provider.formats.events import (
    Q_IMAGE_NOT_OBJECT,
    Q_TYPE_MISMATCH,
)

# ---------------------------------------------------------------- value records to typed texts


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class Quarantine(Exception):
    """A message or record that cannot become a row change; ``reason`` is an events.Q_* text."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


NOT_CARRIED = object()

# MySQL binlog type numbers (Field.dataTypeNumber for MySQL-family sources).
_MYSQL_FLOAT = 4
_MYSQL_DATE = 10
_MYSQL_TIME = 11
_MYSQL_YEAR = 13
_MYSQL_FAMILY = ("MySQL", "DRDS")
# Sources whose DateTime/Timestamp "millis" field holds microseconds; others send nanoseconds.
_MICROSECOND_SOURCES = ("MySQL", "DRDS", "PostgreSQL")

# MySQL character set names that are not Python codec names.
_CHARSETS = {
    "": "utf-8",
    "utf8": "utf-8",
    "utf8mb3": "utf-8",
    "utf8mb4": "utf-8",
    "latin1": "cp1252",  # MySQL's latin1 is Windows-1252
    "ucs2": "utf-16-be",
    "utf16": "utf-16-be",
    "utf16le": "utf-16-le",
    "utf32": "utf-32-be",
    "ujis": "euc_jp",
    "eucjpms": "euc_jp",
    "sjis": "shift_jis",
    "euckr": "euc_kr",
    "koi8r": "koi8_r",
    "koi8u": "koi8_u",
    "greek": "iso8859_7",
    "hebrew": "iso8859_8",
    "latin2": "iso8859_2",
    "latin5": "iso8859_9",
    "latin7": "iso8859_13",
    "macroman": "mac_roman",
    "macce": "mac_latin2",
    "tis620": "tis_620",
}


class ValueContext:
    """Converts DTS value records to (Spark type, text) for ``values.text_to_variant``."""

    def __init__(self, source_type: str | None) -> None:
        self.mysql = source_type in _MYSQL_FAMILY
        self.fraction_per_micro = 1 if source_type in _MICROSECOND_SOURCES else 1000

    def convert(self, value: Any, type_number: int | None) -> Any:
        """(spark type or None, text or None), or NOT_CARRIED; raises on a value that is not valid."""
        if value is None:
            return None, None
        if not isinstance(value, tuple):
            raise Quarantine(Q_IMAGE_NOT_OBJECT)
        kind = value[0].rsplit(".", 1)[-1]
        body = value[1]
        try:
            return self._convert(kind, body, type_number)
        except Quarantine:
            raise
        except (ValueError, TypeError, KeyError, ArithmeticError, LookupError, UnicodeError):
            raise Quarantine(Q_TYPE_MISMATCH) from None

    def _convert(self, kind: str, body: Any, type_number: int | None) -> Any:
        if kind == "EmptyObject":
            return NOT_CARRIED if body == "NONE" else (None, None)
        if kind == "Integer":
            return integer_type(body["precision"]), str(int(body["value"].strip()))
        if kind == "Decimal":
            return decimal_type(body["precision"], body["scale"]), _decimal_text(body["value"])
        if kind == "Float":
            single = self.mysql and type_number == _MYSQL_FLOAT
            return ("float" if single else "double"), _float_text(body["value"])
        if kind == "Timestamp":
            return "timestamp", _instant_text(body["timestamp"], body["millis"] or 0)
        if kind == "DateTime":
            return self._date_time(body, type_number)
        if kind == "TimestampWithTimeZone":
            return "timestamp", self._zoned_text(body["value"], body["timezone"])
        if kind == "Character":
            return _character(body["charset"], body["value"])
        if kind in ("BinaryObject", "BinaryGeometry"):
            return "binary", b64(body["value"])
        if kind in ("TextObject", "TextGeometry"):
            return "string", body["value"]
        raise Quarantine(Q_IMAGE_NOT_OBJECT)

    def _micros(self, fraction: int | None) -> int:
        return (fraction or 0) // self.fraction_per_micro

    def _date_time(self, body: dict[str, Any], type_number: int | None) -> tuple[str, str | None]:
        year, month, day = body.get("year"), body.get("month"), body.get("day")
        hour, minute, second = body.get("hour"), body.get("minute"), body.get("second")
        has_date = None not in (year, month, day)
        has_time = hour is not None or minute is not None or second is not None
        if (self.mysql and type_number == _MYSQL_YEAR) or (
            year is not None and month is None and not has_time
        ):
            return "int", str(year)
        if (self.mysql and type_number == _MYSQL_TIME) or (not has_date and has_time):
            return "string", _time_text(hour or 0, minute or 0, second or 0, self._micros(body.get("millis")))
        if not has_date:
            raise ValueError("DateTime without a date")
        if (self.mysql and type_number == _MYSQL_DATE) or not has_time:
            return "date", None if 0 in (year, month, day) else dt.date(year, month, day).isoformat()
        if 0 in (year, month, day):  # MySQL's zero date
            return "timestamp", None
        local = dt.datetime(
            year, month, day, hour or 0, minute or 0, second or 0, self._micros(body.get("millis"))
        )
        return "timestamp", local.replace(tzinfo=dt.timezone.utc).isoformat()

    def _zoned_text(self, body: dict[str, Any], zone: str) -> str:
        local = dt.datetime(
            body["year"],
            body["month"],
            body["day"],
            body.get("hour") or 0,
            body.get("minute") or 0,
            body.get("second") or 0,
            self._micros(body.get("millis")),
        )
        return local.replace(tzinfo=parse_zone(zone)).astimezone(dt.timezone.utc).isoformat()


def integer_type(precision: int) -> str:
    """Spark type of an Integer value by its declared digits (BIGINT's own precision is 19)."""
    if 0 < precision <= 9:
        return "int"
    if precision <= 19:
        return "bigint"
    return f"decimal({min(precision, 38)},0)"


def decimal_type(precision: int, scale: int) -> str:
    """``decimal(p,s)`` within Spark's limits; an undeclared precision becomes 38."""
    p = precision if 0 < precision <= 38 else 38
    s = min(max(scale, 0), p)
    return f"decimal({p},{s})"


def _decimal_text(text: str) -> str:
    number = Decimal(text.strip())
    if not number.is_finite():
        raise ValueError(f"not a finite decimal: {text!r}")
    return format(number, "f")


def _float_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def _instant_text(seconds: int, micros: int) -> str:
    instant = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
        seconds=seconds, microseconds=micros
    )
    return instant.isoformat()


def _time_text(hour: int, minute: int, second: int, micros: int) -> str:
    negative = min(hour, minute, second, micros) < 0
    hour, minute, second, micros = abs(hour), abs(minute), abs(second), abs(micros)
    text = f"{'-' if negative else ''}{hour:02d}:{minute:02d}:{second:02d}"
    return f"{text}.{micros:06d}" if micros else text


def _character(charset: str, data: bytes) -> tuple[str, str]:
    name = (charset or "").strip().lower()
    if name == "binary":
        return "binary", b64(data)
    codec = _CHARSETS.get(name, name)
    codecs.lookup(codec)  # LookupError for a charset Python does not know
    try:
        return "string", data.decode(codec)
    except UnicodeDecodeError:
        if codec == "cp1252":  # the five bytes Windows-1252 leaves undefined are latin-1 in MySQL
            return "string", data.decode("latin-1")
        raise


_OFFSET = re.compile(r"([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?")


def parse_zone(zone: str) -> dt.tzinfo:
    """A DTS time zone: an offset (``+08:00``, ``+0800``, ``GMT+8``, ``-05``), UTC/GMT/Z, or a name."""
    text = zone.strip()
    upper = text.upper()
    if upper in ("", "Z", "UTC", "GMT"):
        return dt.timezone.utc
    bare = upper[3:] if upper.startswith(("GMT", "UTC")) else upper
    match = _OFFSET.fullmatch(bare)
    if match:
        sign = -1 if match.group(1) == "-" else 1
        delta = dt.timedelta(
            hours=int(match.group(2)), minutes=int(match.group(3) or 0), seconds=int(match.group(4) or 0)
        )
        return dt.timezone(sign * delta)
    from zoneinfo import ZoneInfo

    return ZoneInfo(text)  # raises (a LookupError subclass) for an unknown name

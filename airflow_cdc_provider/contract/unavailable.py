"""``--unavailable-value``: the placeholder a Debezium connector writes for a value it could not read.

PostgreSQL does not log an unchanged TOASTed value in an UPDATE (unless REPLICA IDENTITY FULL),
Oracle LogMiner an unchanged LOB, MySQL with ``binlog_row_image=NOBLOB`` an unchanged BLOB/TEXT;
Debezium then writes its ``unavailable.value.placeholder`` in the value's place. The value is
"unchanged", not data. Pure Python: what the option's values mean as bytes, and which formats take it.
"""

from __future__ import annotations

import re

DEFAULT_UNAVAILABLE_VALUE = "__debezium_unavailable_value"  # Debezium's own default
UNAVAILABLE_VALUE_FORMATS = ("debezium-avro", "debezium-json")
HEX_PREFIX = "hex:"
_HEX_BYTES = re.compile(r"(?:[0-9A-Fa-f]{2})+")


def placeholder_bytes(value: str) -> bytes:
    """The bytes one ``--unavailable-value`` stands for, read as Debezium reads its setting.

    ``hex:`` followed by pairs of hex digits is those raw bytes; any other text is its UTF-8
    bytes. Raises ``ValueError`` for an empty placeholder or a ``hex:`` form that is not hex.
    """
    if value.startswith(HEX_PREFIX):
        digits = value[len(HEX_PREFIX) :]
        if not _HEX_BYTES.fullmatch(digits):
            raise ValueError(
                f"--unavailable-value {value!r}: after {HEX_PREFIX!r} come pairs of hex digits "
                "(the placeholder's bytes), e.g. hex:5f5f"
            )
        return bytes.fromhex(digits)
    if not value:
        raise ValueError("--unavailable-value must not be empty")
    return value.encode("utf-8")


def placeholders(values: tuple[str, ...] | list[str]) -> tuple[bytes, ...]:
    """The placeholders a run recognises: the given ones, else Debezium's default."""
    return tuple(placeholder_bytes(v) for v in values) or (DEFAULT_UNAVAILABLE_VALUE.encode("utf-8"),)

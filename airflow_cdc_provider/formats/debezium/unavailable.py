"""Which columns of a Debezium row image hold the connector's unavailable-value placeholder.

Such a value means "unchanged" (``contract/unavailable.py`` says why connectors write it), so the
decoder drops the column from the after image, which then carries only the columns it knows, and
names it in the event's ``unavailable``: the fold keeps the column's earlier value as it does for
any partial image, and counts the ones that had none.

Debezium writes the placeholder by column type: the text itself (text, jsonb, ...), its bytes
(``bytea``, Base64 in JSON), a one-element array of the text (text arrays), and the bytes as
numbers (int and bigint arrays). Matching is exact and typed, so a text value never matches an
array form. Every value is compared only in records whose landed text may hold a placeholder: a
substring search per record keeps the common path free of a per-value walk.
"""

from __future__ import annotations

import base64
import functools
import operator
import string
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr

_NO_COLUMNS = "array<string>"
# Characters no JSON writer escapes (Jackson, Gson, Python's json, Spark's to_json): a placeholder's
# longest run of them from its start is found verbatim in any record that holds it.
_VERBATIM = frozenset(string.ascii_letters + string.digits + "_-.,:; ")
# How many first characters searched texts must share to be searched for them first.
_SHARED_START = 3


@dataclass(frozen=True)
class Placeholder:
    """One placeholder's forms as they appear in a JSON row image."""

    raw: bytes

    @property
    def text(self) -> str:
        """What text columns carry: the bytes as Java's ``new String(bytes)`` reads them."""
        return self.raw.decode("utf-8", errors="replace")

    @property
    def base64(self) -> str:
        return base64.b64encode(self.raw).decode("ascii")

    @property
    def numbers(self) -> list[int]:
        """What int and bigint arrays carry: each byte as a signed number (Java's ``(int) b``)."""
        return [b - 256 if b > 127 else b for b in self.raw]

    def searched(self) -> list[str]:
        """Texts a record holding this placeholder contains verbatim ("" when one form has none)."""
        forms = [self.text, self.base64, ",".join(map(str, self.numbers)), ", ".join(map(str, self.numbers))]
        return [_verbatim_prefix(form) for form in forms]


def _verbatim_prefix(form: str) -> str:
    for i, ch in enumerate(form):
        if ch not in _VERBATIM:
            return form[:i]
    return form


def _may_hold(text: Expr, placeholders: Sequence[Placeholder]) -> Expr:
    """Whether a record's landed text may hold one of the placeholders (never false when it does).

    Texts that start alike (the two number forms: ``95,95,...`` and ``95, 95, ...``) are searched
    for that start first, so a record holding none of them costs one scan for them, not one each.
    """
    searched = {s for p in placeholders for s in p.searched()}
    if "" in searched:
        return E.lit(True)
    by_start: dict[str, list[str]] = defaultdict(list)
    for part in sorted(searched):
        by_start[part[:_SHARED_START]].append(part)
    found = E.lit(False)
    for start, parts in sorted(by_start.items()):
        if len(parts) == 1:
            found = found | text.contains(parts[0])
        else:
            found = found | (text.contains(start) & functools.reduce(operator.or_, map(text.contains, parts)))
    return E.coalesce(found, E.lit(False))


def _is_placeholder(v: Expr, placeholders: Sequence[Placeholder]) -> Expr:
    """Whether one image value is a placeholder in any of the forms Debezium writes."""
    kind = E.schema_of_variant(v)
    texts = sorted({p.text for p in placeholders} | {p.base64 for p in placeholders})
    as_text = E.try_variant_get(v, "$", "string").isin(texts) & (kind == "STRING")
    text_arrays = [[p.text] for p in placeholders]
    as_array = E.try_variant_get(v, "$", "array<string>").isin(text_arrays) & (kind == "ARRAY<STRING>")
    number_arrays = [p.numbers for p in placeholders]
    as_numbers = E.try_variant_get(v, "$", "array<bigint>").isin(number_arrays) & (kind == "ARRAY<BIGINT>")
    return as_text | as_array | as_numbers


def placeholder_columns(image: Expr, text: Expr, values: Sequence[bytes]) -> Expr:
    """The columns of ``image`` (``map<string, variant>``) whose value is a placeholder; null when
    none (or no image). ``text`` is the record as landed, searched first."""
    placeholders = [Placeholder(raw) for raw in values]
    found = E.map_keys(E.map_filter(image, lambda k, v: _is_placeholder(v, placeholders)))
    return E.when(_may_hold(text, placeholders), E.nullif(found, E.array().cast(_NO_COLUMNS)))


def without_columns(image: Expr, columns: Expr) -> Expr:
    """``image`` without ``columns`` (as it is when ``columns`` is null)."""
    return E.when(columns.isNull(), image).otherwise(
        E.map_filter(image, lambda k, v: ~E.array_contains(columns, k))
    )

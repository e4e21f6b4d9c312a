"""How Canal's rows are typed: each text value by the type its message declares.

Canal writes every value as a JSON string; ``mysqlType`` (else ``sqlType``) says what it really is
(``declared_types``). ``typed_row`` is the general path: it looks each column's type up and gives a
column no type declares its JSON type. ``Specialised`` types the one-row messages whose declaration
is one of the ``Signature``s a sample of the landing shows: plain expressions over positions, no
lambda and no lookup per value, with the same result. Spark runs higher-order functions
interpreted, and every element one reads asks Spark for the session's configuration (a new object
each time inside a task), so the specialised path is much the cheaper one.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

from airflow_cdc_provider.formats.common.values import text_to_variant
from airflow_cdc_provider.formats.mysql.declared_types import EMPTY_TEXT_MAP
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr


def _strings(values: tuple[str, ...]) -> Expr:
    """An ``array<string>`` literal (typed even when empty)."""
    return E.array(*[E.lit(v) for v in values]).cast("array<string>")


def _string_map(keys: tuple[str, ...], values: tuple[str, ...]) -> Expr:
    """A ``map<string,string>`` literal, entries in the order given."""
    return E.map_from_arrays(_strings(keys), _strings(values))


def _latin1_bytes(text: Expr) -> Expr:
    """Canal writes binary columns as ISO-8859-1 text (one char per byte); other text is taken as UTF-8."""
    latin1 = text.rlike(r"\A[\x{00}-\x{FF}]*\z")
    return E.when(latin1, E.encode(text, E.lit("ISO-8859-1"))).otherwise(E.try_to_binary(text, "utf-8"))


def _untyped(json_value: Expr, text: Expr) -> Expr:
    """A value no type declares keeps its JSON type: a number stays a number, a boolean a boolean.

    Spark's JSON parser holds a number with a fraction as an exact decimal without trailing zeros
    (``1.0`` as ``1``); as a double it keeps the JSON meaning (and renders as ``1.0``, not ``1``).
    Strings keep their exact text; objects and arrays are kept as their JSON text, as before.
    """
    kind = E.schema_of_variant(json_value)
    integral = kind.isin("BIGINT", "INT", "SMALLINT", "TINYINT") | (kind == "BOOLEAN")
    fractional = kind.startswith("DECIMAL") | kind.isin("DOUBLE", "FLOAT")
    return (
        E.when(text.isNull(), E.null("variant"))
        .when(integral, json_value)
        .when(fractional, E.try_variant_get(json_value, "$", "double").cast("variant"))
        .otherwise(text.cast("variant"))
    )


def declared_value(text: Expr, spark_type: Expr) -> Expr:
    """A text value as the variant of its declared Spark type (null when the text does not convert)."""
    return E.when(spark_type == "binary", _latin1_bytes(text).cast("variant")).otherwise(
        text_to_variant(text, spark_type)
    )


def typed_row(row: Expr, types: Expr, aligned: Expr, json_row: Expr) -> Expr:
    """A text row -> ``map<string,variant>`` of typed values, in the row's column order.

    ``aligned`` holds the row's converted values when ``types`` declares exactly its columns
    (``values.aligned_values``). Otherwise the row's types are looked up once per column, and a
    column no type declares takes its JSON type from ``json_row`` (the same row as parsed JSON
    values): some producers (Flink CDC's Kafka sink) write typed JSON values and no ``mysqlType``.
    A row that names a column twice keeps both entries, as parsed.
    """
    keys = E.map_keys(row)
    row_types = E.transform(keys, lambda k: E.try_element_at(types, k))

    def value(k: Expr, v: Expr, t: Expr) -> Expr:
        return E.when(t.isNull(), _untyped(E.try_element_at(json_row, k), v)).otherwise(declared_value(v, t))

    looked_up = E.zip_with(E.map_entries(row), row_types, lambda e, t: value(e["key"], e["value"], t))
    return (
        E.when(aligned.isNotNull(), E.map_from_arrays(keys, aligned))
        .when(E.size(E.array_distinct(keys)) == E.size(keys), E.map_from_arrays(keys, looked_up))
        # map_from_arrays refuses a key twice; such a row keeps both entries, typed in place.
        .otherwise(E.transform_values(row, lambda k, v: value(k, v, E.try_element_at(types, k))))
    )


def undeclared(rows: Expr, types: Expr) -> Expr:
    """Some row holds a column ``types`` does not declare (true when nothing is declared)."""

    def declared(m: Expr) -> Expr:
        return m.isNull() | (E.size(E.array_except(E.map_keys(m), E.map_keys(types))) == 0)

    return types.isNull() | ~E.coalesce(E.forall(rows, declared), E.lit(True))


@dataclass(frozen=True)
class Signature:
    """A row change's type declaration (``mysqlType`` and ``sqlType``, each None when absent) and
    the Spark types ``declared_types`` gives it, in the order of its columns."""

    mysql: tuple[tuple[str, str], ...] | None
    sql: tuple[tuple[str, str], ...] | None
    names: tuple[str, ...]
    types: tuple[str, ...]

    def declares(self, mysql_types: Expr, sql_types: Expr) -> Expr:
        """The record declares exactly this (both maps, their entries in the same order)."""
        return _same_map(mysql_types, self.mysql) & _same_map(sql_types, self.sql)

    def type_map(self) -> Expr:
        return _string_map(self.names, self.types)


def _same_map(m: Expr, entries: tuple[tuple[str, str], ...] | None) -> Expr:
    if entries is None:
        return m.isNull()
    keys, values = zip(*entries) if entries else ((), ())
    return (E.map_keys(m) == _strings(keys)) & (E.map_values(m) == _strings(values))


class Specialised:
    """The typing of one-row messages whose declaration is a sampled ``Signature``, in plain
    expressions over positions ``0 .. width-1``: no lambda, no lookup per value. It gives what
    ``typed_row`` gives such a row, and the same conversion failures."""

    def __init__(self, signatures: list[Signature]) -> None:
        self.signatures = signatures
        self.width = max((len(s.names) for s in signatures), default=1)

    def index(self, mysql_types: Expr, sql_types: Expr, rows: Expr, old: Expr) -> Expr:
        """The signature the record declares, when its rows take this path; else null."""
        row, old_row = E.get(rows, 0), E.get(old, 0)
        chosen = E.null("int")
        for i, s in reversed(list(enumerate(self.signatures))):
            names = _strings(s.names)
            old_fits = old.isNull() | (
                (E.size(old) == 1)
                & old_row.isNotNull()
                & (E.size(E.array_except(E.map_keys(old_row), names)) == 0)
            )
            fits = (E.size(rows) == 1) & row.isNotNull() & (E.map_keys(row) == names) & old_fits
            chosen = E.when(s.declares(mysql_types, sql_types) & fits, E.lit(i)).otherwise(chosen)
        return chosen

    def types(self, index: Expr) -> Expr:
        """The signature's types, as ``declared_types`` gives them."""
        chosen = E.null(EMPTY_TEXT_MAP)
        for i, s in reversed(list(enumerate(self.signatures))):
            chosen = E.when(index == i, s.type_map()).otherwise(chosen)
        return chosen

    def row_values(self, index: Expr, row: Expr) -> Expr:
        """The values of a row that holds exactly the signature's columns, converted position by
        position by the literal type there: Spark folds each conversion to one cast."""
        texts = E.map_values(row)
        values = []
        for p in range(self.width):
            value = E.null("variant")
            for i, s in reversed(list(enumerate(self.signatures))):
                if p < len(s.types):
                    value = E.when(index == i, declared_value(E.get(texts, p), E.lit(s.types[p]))).otherwise(
                        value
                    )
            values.append(value)
        return E.array(*values)

    def values(self, row: Expr, types: Expr) -> Expr:
        """The row's values converted by ``types``, position by position (null past its end)."""
        texts = E.map_values(row)
        return E.array(*[declared_value(E.get(texts, p), E.get(types, p)) for p in range(self.width)])

    def key_types(self, row: Expr, types: Expr) -> Expr:
        """The declared type of each of the row's columns, position by position."""
        keys = E.map_keys(row)
        return E.array(*[E.try_element_at(types, E.get(keys, p)) for p in range(self.width)])

    @staticmethod
    def image(row: Expr, values: Expr) -> Expr:
        return E.map_from_arrays(E.map_keys(row), E.slice(values, 1, E.size(row)))

    def failed(self, row: Expr, values: Expr) -> Expr:
        """Some value of the row has text that did not convert."""
        texts = E.map_values(row)
        checks = [E.get(texts, p).isNotNull() & E.get(values, p).isNull() for p in range(self.width)]
        return E.coalesce(functools.reduce(operator.or_, checks), E.lit(False)) if checks else E.lit(False)

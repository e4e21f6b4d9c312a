"""Schemas: one Spark schema per table, from declared types or from the values (the type stage).

Takes the group counts' declared type signatures, value types and column orders, and the columns
DDL dropped (``schema_inputs``); gives an ordered ``TableSchema`` per table (``table_schemas``).
Pure Python but for ``dropped_columns``' one query; ``typed`` runs it for a run. See
docs/design.md, "Typing".

Declared types (a format's schema block, mysqlType, Avro field types...) win; columns no record
declares get the type their final values hold (JSON numbers without a fraction are bigint, with a
fraction double, objects and arrays are kept as JSON text). Declared types that change inside a run
are merged when the change is lossless and stop the job otherwise. Columns a DDL added before AS OF
are part of the schema; columns it dropped are not (unless added back).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from airflow_cdc_provider.formats.events import IGNORED_DDL
from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.replay.table_changes import signature_pairs

_INTEGRAL_RANK = {"tinyint": 1, "smallint": 2, "int": 3, "bigint": 4}
_FLOAT_RANK = {"float": 1, "double": 2}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


class SchemaDriftError(ValueError):
    """A column's declared type changed in a way that would lose data."""


@dataclass
class TableSchema:
    columns: OrderedDict[str, str] = field(default_factory=OrderedDict)


def widen(current: str, new: str) -> str | None:
    """The wider of two declared types when one holds the other without loss, else None."""
    if current == new:
        return current
    if current in _INTEGRAL_RANK and new in _INTEGRAL_RANK:
        return current if _INTEGRAL_RANK[current] >= _INTEGRAL_RANK[new] else new
    if current in _FLOAT_RANK and new in _FLOAT_RANK:
        return current if _FLOAT_RANK[current] >= _FLOAT_RANK[new] else new
    a, b = _DECIMAL.fullmatch(current), _DECIMAL.fullmatch(new)
    if a and b:
        (p1, s1), (p2, s2) = (int(a[1]), int(a[2])), (int(b[1]), int(b[2]))
        scale = max(s1, s2)
        precision = max(p1 - s1, p2 - s2) + scale
        return f"decimal({precision},{scale})" if precision <= 38 else None
    return None


def _inferred(variant_type: str) -> str:
    t = variant_type.upper()
    if t in ("BIGINT", "INT", "SMALLINT", "TINYINT"):
        return "bigint"
    if t.startswith("DECIMAL") or t in ("DOUBLE", "FLOAT"):
        return "double"
    return {
        "BOOLEAN": "boolean",
        "DATE": "date",
        "TIMESTAMP": "timestamp",
        "TIMESTAMP_NTZ": "timestamp_ntz",
        "BINARY": "binary",
    }.get(t, "string")


def declared_signatures(groups: list[Row]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Distinct declared type lists per table (tiny: one per schema version), from ``group_counts``."""
    found: dict[tuple[str, tuple[tuple[str, str], ...]], None] = {}
    for g in groups:
        for per_key in g[C.TYPE_SIGS] or ():
            for sig in per_key:
                found.setdefault((g["table"], tuple(signature_pairs(sig))), None)
    return [(table, list(sig)) for table, sig in found]


def dropped_columns(resolved: DataFrame, earlier: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    """Columns each table dropped before AS OF and did not add back with a later DDL.

    ``earlier``: columns an incremental run's base had dropped; a DDL of this run may add them back.
    """
    change = F.explode(C.DDL_CHANGES).alias(C.DDL_CHANGE)
    column = F.col(C.CHANGED_COLUMN)
    per_column = (
        resolved.where(F.col(C.TAG) == C.TAG_IGNORED)
        .select("table", change)
        .select(
            "table",
            f"{C.DDL_CHANGE}.ord",
            F.explode(F.array_union(F.col(f"{C.DDL_CHANGE}.added"), F.col(f"{C.DDL_CHANGE}.cols"))).alias(
                C.CHANGED_COLUMN
            ),
            f"{C.DDL_CHANGE}.cols",
            f"{C.DDL_CHANGE}.added",
        )
        .groupBy("table", C.CHANGED_COLUMN)
        .agg(
            F.max(F.when(F.array_contains("cols", column), F.col("ord"))).alias(C.DROPPED_AT),
            F.max(F.when(F.array_contains("added", column), F.col("ord"))).alias(C.ADDED_AT),
        )
        .collect()
    )
    dropped: dict[str, set[str]] = {t: set(cols) for t, cols in (earlier or {}).items()}
    for r in per_column:
        dropped_at, added_at = r[C.DROPPED_AT], r[C.ADDED_AT]
        if dropped_at is not None and (added_at is None or dropped_at > added_at):
            dropped.setdefault(r["table"], set()).add(r[C.CHANGED_COLUMN])
        else:
            dropped.get(r["table"], set()).discard(r[C.CHANGED_COLUMN])
    return {t: cols for t, cols in dropped.items() if cols}


def variant_object_fields(schema: str | None) -> dict[str, str]:
    """The fields of a ``schema_of_variant`` object type: ``OBJECT<a: BIGINT, `b c`: STRING>`` -> types by name."""
    if not schema or not schema.startswith("OBJECT<"):
        return {}
    body, fields, i = schema[len("OBJECT<") : -1], {}, 0
    while i < len(body):
        if body[i] == "`":  # a quoted name; a doubled backquote is one backquote
            j, name = i + 1, []
            while True:
                if body[j] == "`" and body[j + 1 : j + 2] == "`":
                    name.append("`")
                    j += 2
                elif body[j] == "`":
                    break
                else:
                    name.append(body[j])
                    j += 1
            name, i = "".join(name), j + 1
        else:
            j = body.index(":", i)
            name, i = body[i:j], j
        i += 2  # ": "
        depth, j = 0, i
        while j < len(body) and not (depth == 0 and body[j] == ","):
            if body[j] in "<(":
                depth += 1
            elif body[j] in ">)":
                depth -= 1
            j += 1
        fields[name] = body[i:j]
        i = j + 2  # ", "
    return fields


def merge_column_order(order: list[str], sequence: list[str]) -> None:
    """Add the columns of ``sequence`` that ``order`` lacks, each right after the column before it.

    A column with no known column before it goes first. So a column a later row (or a DDL) adds
    between two others lands between them, and one added at the end lands last.
    """
    placed = set(order)
    for i, col in enumerate(sequence):
        if col in placed:
            continue
        at = 0
        for prev in reversed(sequence[:i]):
            if prev in placed:
                at = order.index(prev) + 1
                break
        order.insert(at, col)
        placed.add(col)


def key_columns_of(groups: list[Row]) -> dict[str, list[str]]:
    """The key column names each table was folded by (for tables whose rows are all gone)."""
    return {g["table"]: list(g[C.KEY_NAMES] or []) for g in groups if g[C.TAG] == C.TAG_ROW}


@dataclass
class SchemaInputs:
    """What typing needs besides the final rows; an incremental run starts from its base's."""

    signatures: list[tuple[str, list[tuple[str, str]]]]
    dropped: dict[str, set[str]]


def schema_inputs(resolved: DataFrame, groups: list[Row], base: SchemaInputs | None = None) -> SchemaInputs:
    """Declared signatures and dropped columns: a Spark query only when some DDL was applied."""
    signatures = declared_signatures(groups)
    if base is not None:
        seen = {(t, tuple(sig)) for t, sig in signatures}
        signatures += [(t, sig) for t, sig in base.signatures if (t, tuple(sig)) not in seen]
    earlier = base.dropped if base else None
    if any(g[C.TAG] == C.TAG_IGNORED and g["reason"] == IGNORED_DDL for g in groups):
        dropped = dropped_columns(resolved, earlier)
    else:
        dropped = {t: set(cols) for t, cols in (earlier or {}).items() if cols}
    return SchemaInputs(signatures, dropped)


def table_schemas(
    groups: list[Row],
    tables: list[str],
    first_seen: Callable[[str, str, str], tuple],
    key_columns: dict[str, list[str]],
    inputs: SchemaInputs,
) -> dict[str, TableSchema]:
    """Merge declared and inferred types into one ordered schema per table.

    Column order: the order the format declares (a schema block's fields, mysqlType, ...), the
    longest declaration first; columns no declaration names follow the order the rows write them
    (``merge_column_order`` over the distinct column sequences of the final rows, longest first).
    The same input always gives the same order. Inferred types and sequences come with the group
    counts (``group_counts.group_counts``): no query of their own. ``first_seen(table, column,
    type)`` finds where a type was first declared, for the error of a type change that loses data.

    A table none of whose rows survive and that declares no types still gets its key columns
    (as strings), so its snapshot is an empty table rather than a missing one.
    """
    schemas = _declared_schemas(tables, inputs, first_seen)
    inferred_types = _add_inferred_columns(schemas, groups)
    # A dropped column stays only where a row still holds a value written after the drop.
    holding = set(inferred_types)
    for table, cols in inputs.dropped.items():
        for col in cols - {c for t, c in holding if t == table}:
            schemas.get(table, TableSchema()).columns.pop(col, None)
    for table, schema in schemas.items():
        if not schema.columns:
            for col in key_columns.get(table, []):
                schema.columns[col] = "string"
    return schemas


def _declared_schemas(
    tables: list[str], inputs: SchemaInputs, first_seen: Callable[[str, str, str], tuple]
) -> dict[str, TableSchema]:
    """Each table's declared columns and types, widened where a declared type changes losslessly."""
    schemas = {t: TableSchema() for t in tables}
    for table, sig in sorted(inputs.signatures, key=lambda s: (s[0], -len(s[1]), s[1])):
        columns = schemas.setdefault(table, TableSchema()).columns
        for col, spark_type in sig:
            if col not in columns:
                columns[col] = spark_type
                continue
            merged = widen(columns[col], spark_type)
            if merged is None:
                seen = sorted([first_seen(table, col, columns[col]), first_seen(table, col, spark_type)])
                (_, _, old), (_, where, new) = seen
                raise SchemaDriftError(
                    f"table {table}: column {col} changes type from {old} to {new} "
                    f"(first seen as {new} in {where}); only lossless widening (int to bigint, float to double, "
                    f"wider decimals) is applied. Rebuild the old and new periods into separate outputs, "
                    f"or cast the column at the source."
                )
            columns[col] = merged
    return schemas


def _add_inferred_columns(schemas: dict[str, TableSchema], groups: list[Row]) -> dict[tuple[str, str], str]:
    """Add to ``schemas`` the columns the final rows write, in their order; return the rows' value
    types by (table, column)."""
    inferred_types = {
        (g["table"], col): vtype
        for g in groups
        if g[C.TAG] == C.TAG_ROW
        for col, vtype in variant_object_fields(g[C.ROW_SCHEMA]).items()
    }
    sequences: dict[str, list[list[str]]] = {}
    for g in groups:
        if g[C.TAG] == C.TAG_ROW:
            sequences.setdefault(g["table"], []).extend(list(seq) for seq in g[C.SEQUENCES] or ())
    for table, seqs in sorted(sequences.items()):
        schema = schemas.setdefault(table, TableSchema())
        order = list(schema.columns)
        for seq in sorted(seqs, key=lambda q: (-len(q), q)):
            merge_column_order(order, seq)
        schema.columns = OrderedDict(
            (col, schema.columns[col] if col in schema.columns else _inferred(inferred_types[(table, col)]))
            for col in order
        )
    return inferred_types

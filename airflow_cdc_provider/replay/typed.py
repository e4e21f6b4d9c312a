"""Typing: the run's tables and their Spark schemas, and the typed value of each column.

Takes the resolved rows, their group counts (``group_counts``, which carry the declared type
signatures and the final rows' value types) and the run's ``Input`` (for its base's schemas and,
on the error path only, its events). Gives the tables, their schemas (``schemas.table_schemas``),
what typed them (kept in ``_cdc_state``) and their key columns; ``typed_value`` casts one column
of a row image to its type. A query that types rows is run through ``run_typing_query``, which
names the record and column when a row image repeats a column. See docs/design.md, "Typing".
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TypeVar

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from airflow_cdc_provider.contract.tables import check_unambiguous
from airflow_cdc_provider.formats.events import position_text
from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.replay.errors import DuplicateColumnError
from airflow_cdc_provider.replay.group_counts import final_row
from airflow_cdc_provider.replay.keys import ordering
from airflow_cdc_provider.replay.read import Input
from airflow_cdc_provider.replay.schemas import (
    SchemaInputs,
    TableSchema,
    key_columns_of,
    schema_inputs,
    table_schemas,
)
from airflow_cdc_provider.replay.spec import SnapshotSpec
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr

_T = TypeVar("_T")


def run_typing_query(query: Callable[[DataFrame], _T], rows: DataFrame, typed: Expr | None = None) -> _T:
    """``query(rows)``: a query that types rows (``group_counts``, ``span_group_counts``, the
    history's ``typed_by_versions``). A row image that names a column twice fails Spark's typing
    with ``VARIANT_DUPLICATE_KEY``, which names neither record nor column; that failure is replaced
    by one that does. ``typed`` selects the rows the query types (default: the final rows).
    Nothing is checked up front: the search runs only when the typing has already failed."""
    try:
        return query(rows)
    except Exception as error:
        if "VARIANT_DUPLICATE_KEY" not in str(error):
            raise
        raise _repeated_column_error(rows, final_row() if typed is None else typed) from error


def _repeated_column_error(rows: DataFrame, typed: Expr) -> DuplicateColumnError:
    """The error naming the first of ``rows`` (where ``typed``) whose image names a column twice."""
    image = E.col(C.IMAGE)
    repeated = E.size(E.array_distinct(E.map_keys(image))) < E.size(image)
    found = (
        rows.where((typed & repeated).column())
        .select("table", E.map_keys(image).alias(C.REPEATED_NAMES).column(), C.LAST)
        .limit(1)
        .collect()
    )
    if not found:
        return DuplicateColumnError("a row image names a column twice (Spark: VARIANT_DUPLICATE_KEY)")
    row = found[0]
    names, last = row[C.REPEATED_NAMES], row[C.LAST]
    twice = next(name for i, name in enumerate(names) if name in names[:i])
    where = (
        position_text(last["file"], last["line"], last["file_pos"], last["sub_pos"])
        if last is not None and last["file"]
        else "the base's state"
    )
    return DuplicateColumnError(
        f"{where}: the row of table {row['table']} names column `{twice}` twice, and a row holds one "
        "value per column. Remove the repeated key from that record (or the record), then run again."
    )


def typed_by_versions(groups: list[Row], found: DataFrame) -> tuple[list[Row], dict[str, int]]:
    """``groups`` whose row shapes (value types, column orders) are those of every version, and
    the number of versions per table: one query."""
    shapes = {
        r["table"]: r
        for r in found.groupBy("table")
        .agg(
            F.count(F.lit(1)).alias(C.VERSIONS),
            F.schema_of_variant_agg(F.to_variant_object(C.IMAGE)).alias(C.ROW_SCHEMA),
            F.collect_set(F.map_keys(C.IMAGE)).alias(C.SEQUENCES),
        )
        .collect()
    }
    typed = []
    for g in groups:
        if g[C.TAG] == C.TAG_ROW and g["table"] in shapes:
            shape = shapes[g["table"]]
            g = Row(**{**g.asDict(), C.ROW_SCHEMA: shape[C.ROW_SCHEMA], C.SEQUENCES: shape[C.SEQUENCES]})
        typed.append(g)
    return typed, {table: r[C.VERSIONS] for table, r in shapes.items()}


def table_typing(
    read: Input, resolved: DataFrame, groups: list[Row]
) -> tuple[list[str], dict[str, TableSchema], SchemaInputs, dict[str, list[str]]]:
    """The run's tables, their schemas, what typed them and their key columns (``table_schemas``)."""
    base_tables = read.base.tables if read.base is not None else {}
    tables = sorted(
        {g["table"] for g in groups if g[C.TAG] in (C.TAG_ROW, C.TAG_TRUNCATE) and g["table"]}
        | set(base_tables)
    )
    base_inputs = None
    if read.base is not None:
        base_inputs = SchemaInputs(
            signatures=[
                (t, [tuple(c) for c in sig]) for t, info in base_tables.items() for sig in info["signatures"]
            ],
            dropped={t: set(info["dropped"]) for t, info in base_tables.items()},
        )
    typing_inputs = schema_inputs(resolved, groups, base_inputs)
    key_columns = {t: info["key_columns"] for t, info in base_tables.items()} | key_columns_of(groups)
    first_seen = partial(_first_declared, read.events)
    schemas = table_schemas(groups, tables, first_seen, key_columns, typing_inputs)
    return tables, schemas, typing_inputs, key_columns


def _first_declared(events: DataFrame, table: str, col: str, spark_type: str) -> tuple:
    """(position, file, type) of the first event declaring ``col`` as ``spark_type`` (error path only)."""
    hit = (
        events.where((F.col("table") == table) & (F.col("types")[col] == spark_type))
        .select(
            F.min_by(
                F.struct(ordering().column().alias(C.DECLARED_ORD), F.col("file").alias(C.DECLARED_FILE)),
                ordering().column(),
            ).alias(C.FIRST_DECLARED)
        )
        .first()[C.FIRST_DECLARED]
    )
    if hit is None:
        return ((), "an unknown file", spark_type)
    o = hit[C.DECLARED_ORD]
    return (
        (tuple(o["log_pos"] or ()), o["event_ms"] or 0, hit[C.DECLARED_FILE], o["file_pos"]),
        hit[C.DECLARED_FILE],
        spark_type,
    )


def check_table_names(spec: SnapshotSpec, tables: list[str]) -> None:
    """Refuse a dotted table name in an option that named tables whose parts differ."""
    check_unambiguous(spec.tables, tables, "--table")
    check_unambiguous(spec.decode_options.table_keys, tables, "--key")
    check_unambiguous(spec.decode_options.table_columns, tables, "--columns")


def typed_value(image: Column, col: str, spark_type: str) -> Column:
    """The value of column ``col`` of a row ``image`` as ``spark_type``."""
    v = image[col]
    if spark_type == "string":
        # Objects and arrays are kept as their JSON text.
        return F.when(v.isNull() | F.is_variant_null(v), F.lit(None).cast("string")).otherwise(
            F.coalesce(F.try_variant_get(v, "$", "string"), F.to_json(v))
        )
    return F.try_variant_get(v, "$", spark_type)

"""Qlik Replicate MD messages: the lookup that gives a DT message its table, column types and key.

Reading the MD messages is a second, restricted pass over the landed text: only lines that contain
``"MD"`` are parsed, and the result is one small row per lookup key. It runs while the decode is
planned and its rows come to the driver (``lookup``): the decoder broadcasts them back to the DT
messages, and the versions they hold become ``DeclaredVersion``s, whose images are typed by one
compiled expression per column (up to ``_SPECIALISED_COLUMNS`` columns over all versions).

A version is found by one of three lookup keys (``tag``, ``key``): ``BY_ID`` (the MD ``schemaId``),
``BY_NAME`` (the lineage's ``schema.table``, or bare ``table``) and ``BY_COLUMNS`` (every table,
for a DT message that names none: the one whose columns hold all of the message's).
"""

from __future__ import annotations

import functools
import json
import operator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType, VariantType

from airflow_cdc_provider.formats.events import qualified_table
from airflow_cdc_provider.formats.qlik.values import column_present, declared_value, spark_type, utc_millis
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile, read_records
from airflow_cdc_provider.spark.sqlexpr import Expr


def strings(*names: str) -> StructType:
    """A struct of text fields: header and lineage values are read as text and converted with try_cast."""
    return StructType([StructField(n, StringType()) for n in names])


LINEAGE = strings("server", "task", "schema", "table", "tableVersion", "timestamp")
_MD_SCHEMA = StructType(
    [
        StructField("type", StringType()),
        StructField(
            "message",
            StructType(
                [
                    StructField("schemaId", StringType()),
                    StructField("lineage", LINEAGE),
                    StructField("tableStructure", StructType([StructField("tableColumns", VariantType())])),
                ]
            ),
        ),
    ]
)
_COLUMN = "struct<ordinal:int,type:string,length:int,precision:int,scale:int,primaryKeyPosition:int>"

# Lookup tags: how a DT message finds its MD.
BY_ID, BY_NAME, BY_COLUMNS = "id", "name", "columns"

# Declared columns (summed over table versions) whose typing is specialised to literal types.
_SPECIALISED_COLUMNS = 512


def _ordered_columns(message: Expr) -> Expr:
    """An MD message's columns -> ``map<name, struct<ordinal, type, pk>>`` in ordinal order.

    A JSON object read as a variant comes back sorted by name; the snapshot's columns follow this
    map's order, so it is rebuilt in the table's own order.
    """
    described = E.transform_values(
        E.try_variant_get(message["tableStructure"]["tableColumns"], "$", f"map<string,{_COLUMN}>"),
        lambda name, c: E.struct(
            c["ordinal"].alias("ordinal"), spark_type(c).alias("type"), c["primaryKeyPosition"].alias("pk")
        ),
    )
    by_ordinal = E.array_sort(
        E.transform(
            E.map_entries(described),
            lambda e: E.struct(e["value"]["ordinal"].alias("o"), e["key"].alias("k"), e["value"].alias("v")),
        )
    )
    return E.map_from_entries(
        E.transform(by_ordinal, lambda x: E.struct(x["k"].alias("key"), x["v"].alias("value")))
    )


def _md_messages(spark: SparkSession, files: list[LandedFile]) -> DataFrame:
    """The landing's MD messages, one row each: where it landed, its schemaId, lineage and columns.

    Only lines that contain ``"MD"`` are parsed (the DT messages are most of the text). Each message
    gets a dense id, ``vid``: the typing specialised to a version is chosen by it.
    """
    records = read_records(spark, files).where(E.col("text").contains('"MD"').column())
    j = E.from_json("text", _MD_SCHEMA)
    m = E.col("j.message")
    return (
        records.select("file", "file_pos", j.alias("j").column())
        .where((E.col("j.type") == "MD").column())
        .select(
            "file",
            "file_pos",
            *E.columns(
                m["schemaId"].alias("schema_id"),
                m["lineage"].alias("lineage"),
                _ordered_columns(m).alias("columns"),
                E.dense_rank().over("ORDER BY file, file_pos").alias("vid"),
            ),
        )
    )


def _key_columns(columns: Expr) -> Expr:
    """The names of the columns with a ``primaryKeyPosition``, in that order (the table's key)."""
    key_positions = E.array_sort(
        E.transform(
            E.filter(E.map_entries(columns), lambda e: e["value"]["pk"] > 0),
            lambda e: E.struct(e["value"]["pk"].alias("pk"), e["key"].alias("name")),
        )
    )
    return E.transform(key_positions, lambda k: k["name"])


def _table_version(lineage: Expr, columns: Expr) -> Expr:
    """One MD message as the struct a DT message reads: its table, columns, key, types and ``vid``.

    ``order`` sorts the versions of a table: by tableVersion, then announcement time, then landing
    order; ``lineage_ms`` picks the version in force at a change's time.
    """
    key_cols = _key_columns(columns)
    qualified = E.when(lineage["table"].isNotNull(), qualified_table(lineage["schema"], lineage["table"]))
    lineage_ms = E.coalesce(utc_millis(lineage["timestamp"]), E.lit(-1))
    return E.struct(
        E.struct(
            E.coalesce(lineage["tableVersion"].try_cast("bigint"), E.lit(-1)).alias("version"),
            lineage_ms.alias("lineage_ms"),
            E.col("file"),
            E.col("file_pos"),
        ).alias("order"),
        lineage_ms.alias("lineage_ms"),
        qualified.alias("qualified"),
        columns.alias("columns"),
        E.when(E.size(key_cols) > 0, key_cols).alias("key_cols"),
        E.transform_values(columns, lambda k, c: c["type"]).alias("types"),
        E.col("vid"),
    )


def _version_entries(md: DataFrame) -> DataFrame:
    """Per MD message: its version (``md``) and the fields its lookup keys are made of."""
    lineage, columns = E.col("lineage"), E.col("columns")
    return md.select(
        *E.columns(
            _table_version(lineage, columns).alias("md"),
            E.col("schema_id"),
            lineage["table"].alias("bare"),
            lineage["schema"].isNotNull().alias("has_schema"),
        )
    )


def _lookup_entry(tag: str, key: Expr) -> Expr:
    return E.struct(E.lit(tag).alias("tag"), key.alias("key"))


def _lookup_keys() -> Expr:
    """The lookup keys of a version entry: its schemaId; its qualified name, and its bare table
    name when the lineage names a schema; and, for a named table, the one by-columns key."""
    return E.filter(
        E.array(
            _lookup_entry(BY_ID, E.col("schema_id")),
            _lookup_entry(BY_NAME, E.col("md.qualified")),
            _lookup_entry(BY_NAME, E.when(E.col("has_schema"), E.col("bare"))),
            _lookup_entry(BY_COLUMNS, E.when(E.col("md.qualified").isNotNull(), E.lit(""))),
        ),
        lambda e: e["key"].isNotNull(),
    )


def _older_first(left: Expr, right: Expr) -> Expr:
    """The ``array_sort`` comparator of two versions by their ``order``."""
    return E.when(left["order"] < right["order"], -1).when(left["order"] > right["order"], 1).otherwise(0)


def _versions_by_key(entries: DataFrame) -> DataFrame:
    """Per lookup key (``tag``, ``key``): every version it finds, oldest first (``versions``)."""
    exploded = entries.select("md", F.explode(_lookup_keys().column()).alias("k")).select(
        "md", "k.tag", "k.key"
    )
    return exploded.groupBy("tag", "key").agg(
        E.array_sort(E.collect_list("md"), _older_first).alias("versions").column()
    )


def _tables_by_columns(versions: Expr) -> Expr:
    """For the by-columns lookup: each table's newest column set (``names``), with all its versions."""
    return E.transform(
        E.array_distinct(E.transform(versions, lambda v: v["qualified"])),
        lambda q: E.struct(
            q.alias("qualified"),
            E.map_keys(
                E.try_element_at(E.filter(versions, lambda v: v["qualified"] == q), -1)["columns"]
            ).alias("names"),
            E.filter(versions, lambda v: v["qualified"] == q).alias("versions"),
        ),
    )


def _metadata(spark: SparkSession, files: list[LandedFile]) -> DataFrame:
    """One row per lookup key (tag, key) -> the MD versions it resolves to (small; broadcast).

    A schemaId names one MD message: its key keeps the newest version only. The by-columns key
    holds ``tables`` instead, for the DT message to pick the one table its columns fit.
    """
    grouped = _versions_by_key(_version_entries(_md_messages(spark, files)))
    versions = E.col("versions")
    return grouped.select(
        "tag",
        "key",
        *E.columns(
            E.when(E.col("tag") == BY_ID, E.slice(versions, -1, 1)).otherwise(versions).alias("versions"),
            E.when(E.col("tag") == BY_COLUMNS, _tables_by_columns(versions)).alias("tables"),
        ),
    )


@dataclass(frozen=True)
class DeclaredVersion:
    """One MD message's columns, in the order a DT image holds them (a JSON object read as a
    variant has its keys sorted). Images holding exactly these columns, all captured, are typed by
    one compiled expression per column with a literal type, not by a lambda per value."""

    vid: int
    names: tuple[str, ...]
    types: tuple[str, ...]
    ordinals: tuple[int, ...]

    @classmethod
    def of(cls, version: dict[str, Any]) -> DeclaredVersion:
        names = tuple(sorted(version["columns"]))
        return cls(
            vid=version["vid"],
            names=names,
            types=tuple(version["types"][n] for n in names),
            ordinals=tuple(o for o in (version["columns"][n]["ordinal"] for n in names) if o is not None),
        )

    def all_present(self, mask: Expr) -> Expr:
        """No mask, or one with the bit of every declared column set."""
        bits = [column_present(mask, E.lit(o)) for o in self.ordinals]
        return mask.isNull() | functools.reduce(operator.and_, bits) if bits else E.lit(True)

    def fits(self, md: Expr, image: Expr, mask: Expr) -> Expr:
        names = E.array(*[E.lit(n) for n in self.names])
        return (md["vid"] == self.vid) & (E.map_keys(image) == names) & self.all_present(mask)

    def typed(self, texts: Expr) -> Expr:
        return E.array(*[declared_value(E.get(texts, i), E.lit(t)) for i, t in enumerate(self.types)])


def _declared_versions(versions: list[dict[str, Any]]) -> list[DeclaredVersion]:
    """The versions whose typing is specialised, oldest first, up to ``_SPECIALISED_COLUMNS`` columns."""
    chosen, budget = [], _SPECIALISED_COLUMNS
    for version in sorted(versions, key=lambda v: v["vid"]):
        columns = version["columns"]
        if columns and len(columns) <= budget:
            chosen.append(DeclaredVersion.of(version))
            budget -= len(columns)
    return chosen


def lookup(spark: SparkSession, files: list[LandedFile]) -> tuple[DataFrame, list[DeclaredVersion]]:
    """The MD lookup, computed once (a restricted pass): the frame to broadcast, and its versions.

    The rows come to the driver as JSON (which keeps each map's order: the snapshot's columns
    follow it) and go back as a local frame, so the broadcast does not read the landing again and
    nothing stays cached in the session.
    """
    computed = _metadata(spark, files)
    texts = [
        r[0] for r in computed.select(E.to_json(E.struct(*map(E.col, computed.columns))).column()).collect()
    ]
    local = (
        spark.createDataFrame([(t,) for t in texts], "json string")
        .select(E.from_json("json", computed.schema).alias("r").column())
        .select("r.*")
    )
    versions = {}
    for row in map(json.loads, texts):
        for version in [*row["versions"], *(v for t in row.get("tables") or [] for v in t["versions"])]:
            versions[version["vid"]] = version
    return local, _declared_versions(list(versions.values()))

"""Qlik Replicate JSON: the ``atMSG`` envelope with metadata (MD) and data (DT) messages.

A DT message carries column values but neither their types, nor the key, nor (usually) its table:
those are in the MD message Replicate sends when a table is first replicated or its structure
changes. The decoder therefore builds a small lookup from the MD messages of the same landing and
broadcasts it to the DT messages. It is tied to a DT message by, in order:

1. ``messageSchemaId`` = the MD ``schemaId`` (Avro-style landings);
2. the DT's ``schema``/``table`` fields (landings that add them), matched to the MD lineage name;
3. ``DecodeOptions.table`` (``--table``), for files that hold one table;
4. otherwise the one table whose MD columns hold every column of the message.

A DT message no MD explains is quarantined ("unknown table/schema"), never guessed.

Reading the MD messages is a second, restricted pass over the landed text: only lines that contain
``"MD"`` are parsed, and the result is one small row per table version. It runs while the decode is
planned and its rows come to the driver, so that an image holding exactly a version's columns is
typed by one compiled expression per column with the literal type (up to ``_SPECIALISED_COLUMNS``
columns over all versions); other images (a column mask that leaves columns out, a column the MD
does not declare) take the general per-value typing, with the same result. The main pass parses
every record once; nothing is cached.

``columnMask`` (hex, little-endian bytes: bit ``ordinal - 1``) says which columns the message
carries. A column whose bit is clear was not captured (Oracle without full supplemental logging): it
is left out of the image and the image is marked partial, so the column keeps its previous value.
``changeSequence`` (``YYYYMMDDHHmmSShh`` + a 19-digit counter) becomes the log position. Full-load
``REFRESH`` rows get position ``[0, 0, 0]`` (Replicate leaves their CDC headers empty), so they order
before every change of their table, and no event time, so no AS OF excludes them.
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType, VariantType

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
from airflow_cdc_provider.formats.common.jsonlines import parse_json_records
from airflow_cdc_provider.formats.common.values import (
    REPLICATE_TYPES,
    failed_conversions,
    not_an_object,
    object_map,
    text_to_variant,
)
from airflow_cdc_provider.formats.events import (
    IGNORED_DDL,
    IGNORED_TOMBSTONE,
    KIND_IGNORED,
    KIND_QUARANTINED,
    OP_DELETE,
    OP_INSERT,
    OP_READ,
    OP_UPDATE,
    Q_IMAGE_NOT_OBJECT,
    Q_KEY_UNKNOWN,
    Q_MISSING_IMAGE,
    Q_MISSING_OP,
    Q_TYPE_MISMATCH,
    Q_UNKNOWN_OP,
    Q_UNKNOWN_TABLE,
    canonical,
    classify,
    qualified_table,
)
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.reader import LandedFile, read_records
from airflow_cdc_provider.spark.sqlexpr import Expr


def _strings(*names: str) -> StructType:
    return StructType([StructField(n, StringType()) for n in names])


_LINEAGE = _strings("server", "task", "schema", "table", "tableVersion", "timestamp")
_HEADERS = _strings(
    "operation",
    "changeSequence",
    "timestamp",
    "streamPosition",
    "transactionId",
    "changeMask",
    "columnMask",
    "transactionEventCounter",
    "transactionLastEvent",
)
_MESSAGE = StructType(
    [
        StructField("schemaId", StringType()),
        StructField("lineage", _LINEAGE),
        StructField("data", VariantType()),
        StructField("beforeData", VariantType()),
        StructField("headers", _HEADERS),
        StructField("schema", StringType()),
        StructField("table", StringType()),
    ]
)
# Header values are read as text (a number or boolean keeps its JSON text) and converted with
# try_cast, so an odd header type never costs the whole record.
RECORD_SCHEMA = StructType(
    [
        StructField("magic", StringType()),
        StructField("type", StringType()),
        StructField("messageSchemaId", StringType()),
        StructField("schema", StringType()),
        StructField("table", StringType()),
        StructField("message", _MESSAGE),
    ]
)
_MD_SCHEMA = StructType(
    [
        StructField("type", StringType()),
        StructField(
            "message",
            StructType(
                [
                    StructField("schemaId", StringType()),
                    StructField("lineage", _LINEAGE),
                    StructField("tableStructure", StructType([StructField("tableColumns", VariantType())])),
                ]
            ),
        ),
    ]
)
_COLUMN = "struct<ordinal:int,type:string,length:int,precision:int,scale:int,primaryKeyPosition:int>"

_OPS = {"REFRESH": OP_READ, "INSERT": OP_INSERT, "UPDATE": OP_UPDATE, "DELETE": OP_DELETE}

# Replicate data type -> Spark type (NUMERIC is handled with its precision and scale).
_TYPES = REPLICATE_TYPES | {
    "TIMESTAMP": "timestamp",
    "BYTES": "binary",
    "BLOB": "binary",
}

# Lookup tags: how a DT message finds its MD.
_BY_ID, _BY_NAME, _BY_COLUMNS = "id", "name", "columns"


def _blank_to_null(c: Expr) -> Expr:
    return E.when(E.trim(c) != "", c)


def utc_millis(text: Expr) -> Expr:
    """Epoch ms of a Replicate timestamp: ISO text in UTC (with or without offset), or epoch ms."""
    t = E.trim(text)
    with_zone = E.when(t.rlike(r"(Z|[+-]\d\d:?\d\d)$"), t).otherwise(E.concat(t, E.lit("Z")))
    return E.when(t.rlike(r"^\d+$"), t.try_cast("bigint")).otherwise(
        E.unix_millis(E.try_to_timestamp(with_zone))
    )


def change_sequence_position(seq: Expr) -> Expr:
    """``changeSequence`` -> ``[time part, counter high, counter low]``, order-preserving.

    35 digits do not fit a long; fixed-width slices of the zero-padded digits compare element-wise
    exactly like the string. Not all digits (or longer than 35): null.
    """
    s = E.trim(seq)
    padded = E.lpad(s, 35, "0")
    parts = E.array(
        E.substring(padded, 1, 16).try_cast("bigint"),
        E.substring(padded, 17, 10).try_cast("bigint"),
        E.substring(padded, 27, 9).try_cast("bigint"),
    )
    return E.when(s.rlike(r"^\d{1,35}$"), parts)


def spark_type(column: Expr) -> Expr:
    """A Replicate column (type, precision, scale) -> Spark SQL type name."""
    t = E.upper(E.trim(column["type"]))
    p, s = column["precision"], E.coalesce(column["scale"], E.lit(0))
    decimal_fits = (p >= 1) & (p <= 38) & (s >= 0) & (s <= p)
    numeric = E.when(decimal_fits, E.format_string("decimal(%d,%d)", p, s)).otherwise(E.lit("string"))
    out = E.when(t.isin("NUMERIC", "DECIMAL"), numeric)
    for name, spark in _TYPES.items():
        out = out.when(t == name, E.lit(spark))
    return out.otherwise(E.lit("string"))


def column_present(mask: Expr, ordinal: Expr) -> Expr:
    """Whether the bit of ``ordinal`` (1-based) is set in a little-endian hex mask.

    Byte ``i`` of the mask (hex digits ``2i+1..2i+2``) holds ordinals ``8i+1..8i+8``, lowest bit
    first; bytes past the end of the mask are zero (Replicate trims trailing zero bytes).
    """
    bit = ordinal - 1
    byte = E.conv(E.substring(mask, (E.floor(bit / 8) * 2 + 1).cast("int"), 2), 16, 10).try_cast("int")
    weight = E.pow(E.lit(2), bit % 8).cast("int")
    return E.coalesce(byte.bitwiseAND(weight) > 0, E.lit(False))


def _metadata(spark: SparkSession, files: list[LandedFile]) -> DataFrame:
    """One row per lookup key (tag, key) -> the MD versions it resolves to (small; broadcast)."""
    records = read_records(spark, files).where(E.col("text").contains('"MD"').column())
    j = E.from_json("text", _MD_SCHEMA)
    m = E.col("j.message")
    described = E.transform_values(
        E.try_variant_get(m["tableStructure"]["tableColumns"], "$", f"map<string,{_COLUMN}>"),
        lambda name, c: E.struct(
            c["ordinal"].alias("ordinal"), spark_type(c).alias("type"), c["primaryKeyPosition"].alias("pk")
        ),
    )
    # In ordinal order, the table's own (a JSON object read as a variant comes back sorted by name):
    # the snapshot's columns follow this map's order.
    by_ordinal = E.array_sort(
        E.transform(
            E.map_entries(described),
            lambda e: E.struct(e["value"]["ordinal"].alias("o"), e["key"].alias("k"), e["value"].alias("v")),
        )
    )
    columns = E.map_from_entries(
        E.transform(by_ordinal, lambda x: E.struct(x["k"].alias("key"), x["v"].alias("value")))
    )
    md = (
        records.select("file", "file_pos", j.alias("j").column())
        .where((E.col("j.type") == "MD").column())
        .select(
            "file",
            "file_pos",
            *E.columns(
                m["schemaId"].alias("schema_id"),
                m["lineage"].alias("lineage"),
                columns.alias("columns"),
                # A dense id per MD message: the typing specialised to a version is chosen by it.
                E.dense_rank().over("ORDER BY file, file_pos").alias("vid"),
            ),
        )
    )
    lineage, columns = E.col("lineage"), E.col("columns")
    key_positions = E.array_sort(
        E.transform(
            E.filter(E.map_entries(columns), lambda e: e["value"]["pk"] > 0),
            lambda e: E.struct(e["value"]["pk"].alias("pk"), e["key"].alias("name")),
        )
    )
    key_cols = E.transform(key_positions, lambda k: k["name"])
    qualified = E.when(lineage["table"].isNotNull(), qualified_table(lineage["schema"], lineage["table"]))
    lineage_ms = E.coalesce(utc_millis(lineage["timestamp"]), E.lit(-1))
    version = E.struct(
        # Versions of a table sort by tableVersion, then announcement time, then landing order.
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
    entries = md.select(
        *E.columns(
            version.alias("md"),
            E.col("schema_id"),
            lineage["table"].alias("bare"),
            lineage["schema"].isNotNull().alias("has_schema"),
        )
    )
    entry = lambda tag, key: E.struct(E.lit(tag).alias("tag"), key.alias("key"))  # noqa: E731
    keys = E.filter(
        E.array(
            entry(_BY_ID, E.col("schema_id")),
            entry(_BY_NAME, E.col("md.qualified")),
            entry(_BY_NAME, E.when(E.col("has_schema"), E.col("bare"))),
            entry(_BY_COLUMNS, E.when(E.col("md.qualified").isNotNull(), E.lit(""))),
        ),
        lambda e: e["key"].isNotNull(),
    )
    exploded = entries.select("md", F.explode(keys.column()).alias("k")).select("md", "k.tag", "k.key")
    order = lambda l, r: E.when(l["order"] < r["order"], -1).when(l["order"] > r["order"], 1).otherwise(0)  # noqa: E731,E741
    grouped = exploded.groupBy("tag", "key").agg(
        E.array_sort(E.collect_list("md"), order).alias("versions").column()
    )
    # For the by-columns lookup: each table's newest column set, with all its versions.
    versions = E.col("versions")
    per_table = E.transform(
        E.array_distinct(E.transform(versions, lambda v: v["qualified"])),
        lambda q: E.struct(
            q.alias("qualified"),
            E.map_keys(
                E.try_element_at(E.filter(versions, lambda v: v["qualified"] == q), -1)["columns"]
            ).alias("names"),
            E.filter(versions, lambda v: v["qualified"] == q).alias("versions"),
        ),
    )
    return grouped.select(
        "tag",
        "key",
        *E.columns(
            E.when(E.col("tag") == _BY_ID, E.slice(versions, -1, 1)).otherwise(versions).alias("versions"),
            E.when(E.col("tag") == _BY_COLUMNS, per_table).alias("tables"),
        ),
    )


def _choose_version(versions: Expr, event_ms: Expr) -> Expr:
    """The newest table version announced at or before the change, else the oldest one."""
    preceding = E.filter(versions, lambda v: v["lineage_ms"] <= event_ms)
    chosen = E.coalesce(E.try_element_at(preceding, -1), E.try_element_at(versions, 1))
    # A table with one version (the usual case) needs no walk over its versions.
    return E.when(E.size(versions) == 1, E.element_at(versions, 1)).otherwise(chosen)


def _text(v: Expr) -> Expr:
    """A DT value as text (a number keeps its JSON digits); JSON null -> null."""
    return E.when(~E.is_variant_null(v), E.try_variant_get(v, "$", "string"))


def _declared_value(text: Expr, spark_type: Expr) -> Expr:
    """A value's text converted to its declared type (binary columns are hex in Replicate's JSON)."""
    return E.when(spark_type == "binary", E.try_to_binary(text, "hex").cast("variant")).otherwise(
        text_to_variant(text, spark_type)
    )


# Declared columns (summed over table versions) whose typing is specialised to literal types.
_SPECIALISED_COLUMNS = 512


@dataclass(frozen=True)
class _DeclaredVersion:
    """One MD message's columns, in the order a DT image holds them (a JSON object read as a
    variant has its keys sorted). Images holding exactly these columns, all captured, are typed by
    one compiled expression per column with a literal type, not by a lambda per value."""

    vid: int
    names: tuple[str, ...]
    types: tuple[str, ...]
    ordinals: tuple[int, ...]

    @classmethod
    def of(cls, version: dict[str, Any]) -> _DeclaredVersion:
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
        return E.array(*[_declared_value(E.get(texts, i), E.lit(t)) for i, t in enumerate(self.types)])


class _Specialised:
    """The typing of images that fit a specialised version, in steps a select each reads once."""

    def __init__(self, declared: list[_DeclaredVersion]) -> None:
        self.declared = declared
        self.width = max((len(v.names) for v in declared), default=0)

    def version(self, md: Expr, image: Expr, mask: Expr) -> Expr:
        """The ``vid`` of the specialised version the image fits; null when none does."""
        return self._first(lambda v: v.fits(md, image, mask), lambda v: E.lit(v.vid), "int")

    def texts(self, vid: Expr, image: Expr) -> Expr:
        values = E.map_values(image)
        return E.when(vid.isNotNull(), E.array(*[_text(E.get(values, i)) for i in range(self.width)]))

    def _first(
        self,
        condition: Callable[[_DeclaredVersion], Expr],
        value: Callable[[_DeclaredVersion], Expr],
        null: str,
    ) -> Expr:
        """``CASE`` over the specialised versions: the value of the first whose condition holds."""
        if not self.declared:
            return E.null(null)
        chosen = E.when(condition(self.declared[0]), value(self.declared[0]))
        for v in self.declared[1:]:
            chosen = chosen.when(condition(v), value(v))
        return chosen

    def _by_version(self, vid: Expr, value: Callable[[_DeclaredVersion], Expr], null: str) -> Expr:
        return self._first(lambda v: vid == v.vid, value, null)

    def typed(self, vid: Expr, texts: Expr) -> Expr:
        return self._by_version(vid, lambda v: v.typed(texts), "array<variant>")

    def image(self, vid: Expr, typed: Expr) -> Expr:
        names = self._by_version(vid, lambda v: E.array(*[E.lit(n) for n in v.names]), "array<string>")
        return E.map_from_arrays(names, typed)

    def failed(self, texts: Expr, typed: Expr) -> Expr:
        """Some value's text did not convert to its declared type."""
        checks = [E.get(texts, i).isNotNull() & E.get(typed, i).isNull() for i in range(self.width)]
        return functools.reduce(operator.or_, checks) if checks else E.lit(False)


def _declared_versions(versions: list[dict[str, Any]]) -> list[_DeclaredVersion]:
    """The versions whose typing is specialised, oldest first, up to ``_SPECIALISED_COLUMNS`` columns."""
    chosen, budget = [], _SPECIALISED_COLUMNS
    for version in sorted(versions, key=lambda v: v["vid"]):
        columns = version["columns"]
        if columns and len(columns) <= budget:
            chosen.append(_DeclaredVersion.of(version))
            budget -= len(columns)
    return chosen


def _lookup(spark: SparkSession, files: list[LandedFile]) -> tuple[DataFrame, list[_DeclaredVersion]]:
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


class QlikJsonDecoder(Decoder):
    name = "qlik-json"
    description = (
        "Qlik Replicate JSON envelope (atMSG): MD messages give table, types and key; DT messages "
        "REFRESH/INSERT/UPDATE/DELETE ordered by changeSequence, columnMask partial images"
    )
    needs = ""
    partial_images = True
    table_from_filter = True
    transaction_ids = True

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        parsed = parse_json_records(spark, files, RECORD_SCHEMA)
        msg = E.col("j.message")
        headers = msg["headers"]
        event_ms = utc_millis(_blank_to_null(headers["timestamp"]))
        dt_schema = _blank_to_null(E.coalesce(msg["schema"], E.col("j.schema")))
        dt_table = _blank_to_null(E.coalesce(msg["table"], E.col("j.table")))
        schema_id = _blank_to_null(E.col("j.messageSchemaId"))
        named = E.when(dt_table.isNotNull(), E.concat_ws(".", dt_schema, dt_table))
        data_map, before_map = object_map(msg["data"]), object_map(msg["beforeData"])
        image_keys = E.array_distinct(
            E.concat(
                E.coalesce(E.map_keys(data_map), E.array()), E.coalesce(E.map_keys(before_map), E.array())
            )
        )

        option_table = E.lit(options.table) if options.table else E.null("string")
        tag = (
            E.when(schema_id.isNotNull(), E.lit(_BY_ID))
            .when(named.isNotNull(), E.lit(_BY_NAME))
            .when(option_table.isNotNull(), E.lit(_BY_NAME))
            .otherwise(E.lit(_BY_COLUMNS))
        )
        key = E.coalesce(schema_id, named, option_table, E.lit(""))
        is_dt = E.col("bad").isNull() & ~E.col("tombstone") & E.coalesce(E.col("j.type") != "MD", E.lit(True))
        staged = parsed.select(
            "*",
            *E.columns(
                E.when(is_dt, tag).alias("_tag"),
                E.when(is_dt, key).alias("_key"),
                event_ms.alias("_event_ms"),
                data_map.alias("_data"),
                before_map.alias("_before"),
                # Only the by-columns lookup reads them: the others skip a per-record array_distinct.
                E.when(tag == _BY_COLUMNS, image_keys).alias("_image_keys"),
            ),
        )
        lookup, declared = _lookup(spark, [*files, *options.context_files])
        md = F.broadcast(lookup)
        # The names differ on either side (_tag/tag, _key/key), so the condition needs no frames.
        on = (E.col("_tag") == E.col("tag")) & (E.col("_key") == E.col("key"))
        joined = staged.join(md, on.column(), "left")

        # Resolve the table version (and, for the by-columns lookup, the one table that fits).
        fitting = E.filter(
            E.col("tables"),
            lambda t: E.forall(E.col("_image_keys"), lambda k: E.array_contains(t["names"], k)),
        )
        by_columns = E.when(E.size(fitting) == 1, E.try_element_at(fitting, 1))
        ambiguous = E.size(E.array_distinct(E.col("versions")["qualified"])) > 1
        versions = (
            E.when(E.col("_tag") == _BY_COLUMNS, by_columns["versions"])
            .when(ambiguous, E.lit(None))
            .otherwise(E.col("versions"))
        )
        chosen = _choose_version(versions, E.col("_event_ms"))
        lineage_table = msg["lineage"]["table"]
        table = E.when(
            E.col("j.type") == "MD",
            E.when(lineage_table.isNotNull(), E.concat_ws(".", msg["lineage"]["schema"], lineage_table)),
        ).otherwise(E.coalesce(chosen["qualified"], named, option_table))
        resolved = joined.select(
            *[c for c in staged.columns if not c.startswith("_") or c in ("_event_ms", "_data", "_before")],
            *E.columns(chosen.alias("_md"), table.alias("_table")),
        )
        return self._events(resolved, declared)

    def _events(self, df: DataFrame, declared: list[_DeclaredVersion]) -> DataFrame:
        msg = E.col("j.message")
        headers = msg["headers"]
        md = E.col("_md")
        operation = E.upper(E.trim(_blank_to_null(headers["operation"])))
        ops = list(_OPS.items())
        op = E.when(operation == ops[0][0], E.lit(ops[0][1]))
        for name, canonical_op in ops[1:]:
            op = op.when(operation == name, E.lit(canonical_op))
        mask = _blank_to_null(E.trim(headers["columnMask"]))

        def present(k: Expr) -> Expr:
            ordinal = md["columns"][k]["ordinal"]
            return mask.isNull() | ordinal.isNull() | column_present(mask, ordinal)

        def captured(image: Expr) -> Expr:
            # Without a column mask every column is present: no lambda.
            return E.when(mask.isNull(), image).otherwise(E.map_filter(image, lambda k, v: present(k)))

        def convert(k: Expr, v: Expr) -> Expr:
            t = md["types"][k]
            return E.when(t.isNull(), v).otherwise(_declared_value(_text(v), t))

        # One select per step: each step reads the one before several times.
        spec = _Specialised(declared)
        images = {"after": E.col("_data"), "before": E.col("_delete_image")}
        df = df.select(
            "*",
            *E.columns(
                op.alias("_op"),
                mask.alias("_mask"),
                E.when(op == OP_DELETE, E.coalesce(E.col("_before"), E.col("_data")))
                .otherwise(E.col("_before"))
                .alias("_delete_image"),
            ),
        )
        md, mask = E.col("_md"), E.col("_mask")
        df = df.select(
            "*",
            *E.columns(*(spec.version(md, image, mask).alias(f"_{n}_vid") for n, image in images.items())),
        )
        df = df.select(
            "*",
            *E.columns(
                *(spec.texts(E.col(f"_{n}_vid"), image).alias(f"_{n}_texts") for n, image in images.items()),
                *(
                    E.when(E.col(f"_{n}_vid").isNull(), captured(image)).alias(f"_{n}_captured")
                    for n, image in images.items()
                ),
            ),
        )
        df = df.select(
            "*",
            *E.columns(
                *(spec.typed(E.col(f"_{n}_vid"), E.col(f"_{n}_texts")).alias(f"_{n}_typed") for n in images),
                *(
                    E.transform_values(E.col(f"_{n}_captured"), convert).alias(f"_{n}_general")
                    for n in images
                ),
            ),
        )

        def image_and_failed(n: str) -> tuple[Expr, Expr]:
            vid, texts, typed = E.col(f"_{n}_vid"), E.col(f"_{n}_texts"), E.col(f"_{n}_typed")
            general, captured_ = E.col(f"_{n}_general"), E.col(f"_{n}_captured")
            image = E.when(vid.isNotNull(), spec.image(vid, typed)).otherwise(general)
            failed = E.when(vid.isNotNull(), spec.failed(texts, typed)).otherwise(
                failed_conversions(E.transform_values(captured_, lambda k, v: _text(v)), general)
            )
            return image, failed

        after, after_failed = image_and_failed("after")
        before, before_failed = image_and_failed("before")
        staged = df.select(
            "*",
            *E.columns(
                after.alias("_after"),
                before.alias("_before_img"),
                (after_failed | before_failed).alias("_bad_value"),
            ),
        )
        op = E.col("_op")
        # Some column of the table is absent from the mask: by literal ordinals for a specialised
        # version, else read by ordinal (no lookup per column).
        ordinals = E.map_values(md["columns"])["ordinal"]
        missing = E.exists(ordinals, lambda o: o.isNotNull() & ~column_present(mask, o))
        for version in reversed(declared):
            missing = E.when(md["vid"] == version.vid, ~version.all_present(mask)).otherwise(missing)
        partial = (op != OP_DELETE) & mask.isNotNull() & missing
        kind, reason = classify(
            (E.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
            (E.col("bad").isNotNull(), KIND_QUARANTINED, E.col("bad")),
            (E.col("j.type") == "MD", KIND_IGNORED, IGNORED_DDL),
            (E.col("j.type").isNotNull() & (E.col("j.type") != "DT"), KIND_QUARANTINED, Q_UNKNOWN_OP),
            (operation.isNull(), KIND_QUARANTINED, Q_MISSING_OP),
            (op.isNull(), KIND_QUARANTINED, Q_UNKNOWN_OP),
            (
                not_an_object(msg["data"], E.col("_data"))
                | not_an_object(msg["beforeData"], E.col("_before")),
                KIND_QUARANTINED,
                Q_IMAGE_NOT_OBJECT,
            ),
            (md.isNull() | md["columns"].isNull(), KIND_QUARANTINED, Q_UNKNOWN_TABLE),
            (mask.isNotNull() & ~mask.rlike("^[0-9A-Fa-f]+$"), KIND_QUARANTINED, Q_TYPE_MISMATCH),
            (E.col("_bad_value"), KIND_QUARANTINED, Q_TYPE_MISMATCH),
            (
                op.isin(OP_READ, OP_INSERT, OP_UPDATE) & E.col("_data").isNull(),
                KIND_QUARANTINED,
                Q_MISSING_IMAGE,
            ),
            ((op == OP_DELETE) & E.col("_before_img").isNull(), KIND_QUARANTINED, Q_KEY_UNKNOWN),
        )
        # Full-load rows carry no change sequence: they order before every change.
        log_pos = E.when(op == OP_READ, E.array(*[E.lit(0).cast("bigint")] * 3)).otherwise(
            change_sequence_position(headers["changeSequence"])
        )
        return staged.select(
            *canonical(
                table=E.col("_table"),
                kind=kind,
                op=op,
                reason=reason,
                event_ms=E.col("_event_ms"),
                log_pos=log_pos,
                sub_pos=E.lit(0),
                tx_id=_blank_to_null(headers["transactionId"]),
                tx_end=E.lower(E.trim(headers["transactionLastEvent"])).try_cast("boolean"),
                before=E.col("_before_img"),
                after=E.when(op != OP_DELETE, E.col("_after")),
                partial=E.coalesce(partial, E.lit(False)),
                key_cols=md["key_cols"],
                types=md["types"],
                raw=E.col("text"),
            )
        )

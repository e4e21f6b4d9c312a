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
``"MD"`` are parsed, and the result is one small row per table version. The main pass parses every
record once; nothing is cached.

``columnMask`` (hex, little-endian bytes: bit ``ordinal - 1``) says which columns the message
carries. A column whose bit is clear was not captured (Oracle without full supplemental logging): it
is left out of the image and the image is marked partial, so the column keeps its previous value.
``changeSequence`` (``YYYYMMDDHHmmSShh`` + a 19-digit counter) becomes the log position. Full-load
``REFRESH`` rows get position ``[0, 0, 0]`` (Replicate leaves their CDC headers empty), so they order
before every change of their table, and no event time, so no AS OF excludes them.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType, VariantType

from airflow_cdc_provider.formats.base import DecodeOptions, Decoder
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
)
from airflow_cdc_provider.formats.jsonlines import parse_json_records
from airflow_cdc_provider.formats.landed_files import LandedFile, read_records
from airflow_cdc_provider.formats.values import REPLICATE_TYPES, failed_conversions, text_to_variant


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


def _blank_to_null(c: Column) -> Column:
    return F.when(F.trim(c) != "", c)


def utc_millis(text: Column) -> Column:
    """Epoch ms of a Replicate timestamp: ISO text in UTC (with or without offset), or epoch ms."""
    t = F.trim(text)
    with_zone = F.when(t.rlike(r"(Z|[+-]\d\d:?\d\d)$"), t).otherwise(F.concat(t, F.lit("Z")))
    return F.when(t.rlike(r"^\d+$"), t.try_cast("bigint")).otherwise(
        F.unix_millis(F.try_to_timestamp(with_zone))
    )


def change_sequence_position(seq: Column) -> Column:
    """``changeSequence`` -> ``[time part, counter high, counter low]``, order-preserving.

    35 digits do not fit a long; fixed-width slices of the zero-padded digits compare element-wise
    exactly like the string. Not all digits (or longer than 35): null.
    """
    s = F.trim(seq)
    padded = F.lpad(s, 35, "0")
    parts = F.array(
        F.substring(padded, 1, 16).try_cast("bigint"),
        F.substring(padded, 17, 10).try_cast("bigint"),
        F.substring(padded, 27, 9).try_cast("bigint"),
    )
    return F.when(s.rlike(r"^\d{1,35}$"), parts)


def spark_type(column: Column) -> Column:
    """A Replicate column (type, precision, scale) -> Spark SQL type name."""
    t = F.upper(F.trim(column["type"]))
    p, s = column["precision"], F.coalesce(column["scale"], F.lit(0))
    decimal_fits = (p >= 1) & (p <= 38) & (s >= 0) & (s <= p)
    out = F.lit("string")
    for name, spark in _TYPES.items():
        out = F.when(t == name, F.lit(spark)).otherwise(out)
    numeric = F.when(decimal_fits, F.format_string("decimal(%d,%d)", p, s)).otherwise(F.lit("string"))
    return F.when(t.isin("NUMERIC", "DECIMAL"), numeric).otherwise(out)


def column_present(mask: Column, ordinal: Column) -> Column:
    """Whether the bit of ``ordinal`` (1-based) is set in a little-endian hex mask.

    Byte ``i`` of the mask (hex digits ``2i+1..2i+2``) holds ordinals ``8i+1..8i+8``, lowest bit
    first; bytes past the end of the mask are zero (Replicate trims trailing zero bytes).
    """
    bit = ordinal - 1
    byte = F.conv(F.substring(mask, (F.floor(bit / 8) * 2 + 1).cast("int"), 2), 16, 10).try_cast("int")
    weight = F.pow(F.lit(2), bit % 8).cast("int")
    return F.coalesce(byte.bitwiseAND(weight) > 0, F.lit(False))


def _metadata(spark: SparkSession, files: list[LandedFile]) -> DataFrame:
    """One row per lookup key (tag, key) -> the MD versions it resolves to (small; broadcast)."""
    text = F.col("text")
    records = read_records(spark, files).where(F.instr(text, '"MD"') > 0)
    j = F.from_json(text, _MD_SCHEMA)
    m = F.col("j.message")
    described = F.transform_values(
        F.try_variant_get(m["tableStructure"]["tableColumns"], "$", f"map<string,{_COLUMN}>"),
        lambda name, c: F.struct(
            c["ordinal"].alias("ordinal"), spark_type(c).alias("type"), c["primaryKeyPosition"].alias("pk")
        ),
    )
    # In ordinal order, the table's own (a JSON object read as a variant comes back sorted by name):
    # the snapshot's columns follow this map's order.
    by_ordinal = F.array_sort(
        F.transform(
            F.map_entries(described),
            lambda e: F.struct(e["value"]["ordinal"].alias("o"), e["key"].alias("k"), e["value"].alias("v")),
        )
    )
    columns = F.map_from_entries(F.transform(by_ordinal, lambda x: F.struct(x["k"], x["v"])))
    md = (
        records.select("file", "file_pos", j.alias("j"))
        .where(F.col("j.type") == "MD")
        .select(
            "file",
            "file_pos",
            m["schemaId"].alias("schema_id"),
            m["lineage"].alias("lineage"),
            columns.alias("columns"),
        )
    )
    lineage, columns = F.col("lineage"), F.col("columns")
    key_positions = F.array_sort(
        F.transform(
            F.filter(F.map_entries(columns), lambda e: e["value"]["pk"] > 0),
            lambda e: F.struct(e["value"]["pk"].alias("pk"), e["key"].alias("name")),
        )
    )
    key_cols = F.transform(key_positions, lambda k: k["name"])
    qualified = F.when(lineage["table"].isNotNull(), F.concat_ws(".", lineage["schema"], lineage["table"]))
    lineage_ms = F.coalesce(utc_millis(lineage["timestamp"]), F.lit(-1))
    version = F.struct(
        # Versions of a table sort by tableVersion, then announcement time, then landing order.
        F.struct(
            F.coalesce(lineage["tableVersion"].try_cast("bigint"), F.lit(-1)).alias("version"),
            lineage_ms.alias("lineage_ms"),
            F.col("file").alias("file"),
            F.col("file_pos").alias("file_pos"),
        ).alias("order"),
        lineage_ms.alias("lineage_ms"),
        qualified.alias("qualified"),
        columns.alias("columns"),
        F.when(F.size(key_cols) > 0, key_cols).alias("key_cols"),
        F.transform_values(columns, lambda k, c: c["type"]).alias("types"),
    )
    entries = md.select(
        version.alias("md"),
        F.col("schema_id"),
        lineage["table"].alias("bare"),
        lineage["schema"].isNotNull().alias("has_schema"),
    )
    entry = lambda tag, key: F.struct(F.lit(tag).alias("tag"), key.alias("key"))  # noqa: E731
    keys = F.filter(
        F.array(
            entry(_BY_ID, F.col("schema_id")),
            entry(_BY_NAME, F.col("md.qualified")),
            entry(_BY_NAME, F.when(F.col("has_schema"), F.col("bare"))),
            entry(_BY_COLUMNS, F.when(F.col("md.qualified").isNotNull(), F.lit(""))),
        ),
        lambda e: e["key"].isNotNull(),
    )
    exploded = entries.select("md", F.explode(keys).alias("k")).select("md", "k.tag", "k.key")
    order = lambda l, r: F.when(l["order"] < r["order"], -1).when(l["order"] > r["order"], 1).otherwise(0)  # noqa: E731,E741
    grouped = exploded.groupBy("tag", "key").agg(F.array_sort(F.collect_list("md"), order).alias("versions"))
    # For the by-columns lookup: each table's newest column set, with all its versions.
    per_table = F.transform(
        F.array_distinct(F.transform(F.col("versions"), lambda v: v["qualified"])),
        lambda q: F.struct(
            q.alias("qualified"),
            F.map_keys(
                F.try_element_at(F.filter(F.col("versions"), lambda v: v["qualified"] == q), F.lit(-1))[
                    "columns"
                ]
            ).alias("names"),
            F.filter(F.col("versions"), lambda v: v["qualified"] == q).alias("versions"),
        ),
    )
    return grouped.select(
        "tag",
        "key",
        F.when(F.col("tag") == _BY_ID, F.slice("versions", -1, 1))
        .otherwise(F.col("versions"))
        .alias("versions"),
        F.when(F.col("tag") == _BY_COLUMNS, per_table).alias("tables"),
    )


def _choose_version(versions: Column, event_ms: Column) -> Column:
    """The newest table version announced at or before the change, else the oldest one."""
    preceding = F.filter(versions, lambda v: v["lineage_ms"] <= event_ms)
    return F.coalesce(F.try_element_at(preceding, F.lit(-1)), F.try_element_at(versions, F.lit(1)))


def _is_object(v: Column) -> Column:
    return F.startswith(F.schema_of_variant(v), F.lit("OBJECT"))


def _not_null(v: Column) -> Column:
    return F.when(v.isNotNull() & ~F.is_variant_null(v), v)


class QlikJsonDecoder(Decoder):
    name = "qlik-json"
    description = (
        "Qlik Replicate JSON envelope (atMSG): MD messages give table, types and key; DT messages "
        "REFRESH/INSERT/UPDATE/DELETE ordered by changeSequence, columnMask partial images"
    )
    needs = ""
    partial_images = True
    table_from_filter = True

    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        parsed = parse_json_records(spark, files, RECORD_SCHEMA)
        msg = F.col("j.message")
        headers = msg["headers"]
        data = _not_null(msg["data"])
        before_data = _not_null(msg["beforeData"])
        event_ms = utc_millis(_blank_to_null(headers["timestamp"]))
        dt_schema = _blank_to_null(F.coalesce(msg["schema"], F.col("j.schema")))
        dt_table = _blank_to_null(F.coalesce(msg["table"], F.col("j.table")))
        schema_id = _blank_to_null(F.col("j.messageSchemaId"))
        named = F.when(dt_table.isNotNull(), F.concat_ws(".", dt_schema, dt_table))
        as_map = lambda v: F.try_variant_get(v, "$", "map<string,variant>")  # noqa: E731
        data_map, before_map = as_map(data), as_map(before_data)
        image_keys = F.array_distinct(
            F.concat(
                F.coalesce(F.map_keys(data_map), F.array()), F.coalesce(F.map_keys(before_map), F.array())
            )
        )

        option_table = F.lit(options.table) if options.table else F.lit(None).cast("string")
        tag = (
            F.when(schema_id.isNotNull(), F.lit(_BY_ID))
            .when(named.isNotNull(), F.lit(_BY_NAME))
            .when(option_table.isNotNull(), F.lit(_BY_NAME))
            .otherwise(F.lit(_BY_COLUMNS))
        )
        key = F.coalesce(schema_id, named, option_table, F.lit(""))
        is_dt = F.col("bad").isNull() & ~F.col("tombstone") & F.coalesce(F.col("j.type") != "MD", F.lit(True))
        staged = parsed.select(
            "*",
            F.when(is_dt, tag).alias("_tag"),
            F.when(is_dt, key).alias("_key"),
            event_ms.alias("_event_ms"),
            data_map.alias("_data"),
            before_map.alias("_before"),
            image_keys.alias("_image_keys"),
        )
        md = F.broadcast(_metadata(spark, [*files, *options.context_files]))
        joined = staged.join(md, (staged["_tag"] == md["tag"]) & (staged["_key"] == md["key"]), "left")

        # Resolve the table version (and, for the by-columns lookup, the one table that fits).
        fitting = F.filter(
            F.col("tables"),
            lambda t: F.forall(F.col("_image_keys"), lambda k: F.array_contains(t["names"], k)),
        )
        by_columns = F.when(F.size(fitting) == 1, F.try_element_at(fitting, F.lit(1)))
        ambiguous = F.size(F.array_distinct(F.transform(F.col("versions"), lambda v: v["qualified"]))) > 1
        versions = (
            F.when(F.col("_tag") == _BY_COLUMNS, by_columns["versions"])
            .when(ambiguous, F.lit(None))
            .otherwise(F.col("versions"))
        )
        chosen = _choose_version(versions, F.col("_event_ms"))
        lineage_table = msg["lineage"]["table"]
        table = F.when(
            F.col("j.type") == "MD",
            F.when(lineage_table.isNotNull(), F.concat_ws(".", msg["lineage"]["schema"], lineage_table)),
        ).otherwise(F.coalesce(chosen["qualified"], named, option_table))
        resolved = joined.select(
            *[c for c in staged.columns if not c.startswith("_") or c in ("_event_ms", "_data", "_before")],
            chosen.alias("_md"),
            table.alias("_table"),
        )
        return self._events(resolved)

    def _events(self, df: DataFrame) -> DataFrame:
        msg = F.col("j.message")
        headers = msg["headers"]
        md = F.col("_md")
        operation = F.upper(F.trim(_blank_to_null(headers["operation"])))
        op = F.lit(None).cast("string")
        for name, canonical_op in _OPS.items():
            op = F.when(operation == name, F.lit(canonical_op)).otherwise(op)
        mask = _blank_to_null(F.trim(headers["columnMask"]))

        def present(k: Column) -> Column:
            ordinal = md["columns"][k]["ordinal"]
            return mask.isNull() | ordinal.isNull() | column_present(mask, ordinal)

        def typed(image: Column) -> tuple[Column, Column]:
            captured = F.map_filter(image, lambda k, v: present(k))
            text = F.transform_values(
                captured, lambda k, v: F.when(~F.is_variant_null(v), F.try_variant_get(v, "$", "string"))
            )

            def convert(k: Column, v: Column) -> Column:
                t = md["types"][k]
                s = F.when(~F.is_variant_null(v), F.try_variant_get(v, "$", "string"))
                return (
                    F.when(t.isNull(), v)
                    .when(t == "binary", F.try_to_binary(s, F.lit("hex")).cast("variant"))
                    .otherwise(text_to_variant(s, t))
                )

            return text, F.transform_values(captured, convert)

        after_text, after = typed(F.col("_data"))
        delete_image = F.when(op == OP_DELETE, F.coalesce(F.col("_before"), F.col("_data"))).otherwise(
            F.col("_before")
        )
        before_text, before = typed(delete_image)
        staged = df.select(
            "*",
            op.alias("_op"),
            after_text.alias("_after_text"),
            after.alias("_after"),
            before_text.alias("_before_text"),
            before.alias("_before_img"),
        )
        op = F.col("_op")
        not_object = lambda v: _not_null(v).isNotNull() & ~_is_object(v)  # noqa: E731
        bad_value = failed_conversions(F.col("_after_text"), F.col("_after")) | failed_conversions(
            F.col("_before_text"), F.col("_before_img")
        )
        partial = (
            (op != OP_DELETE) & mask.isNotNull() & F.exists(F.map_keys(md["columns"]), lambda k: ~present(k))
        )
        kind, reason = classify(
            (F.col("tombstone"), KIND_IGNORED, IGNORED_TOMBSTONE),
            (F.col("bad").isNotNull(), KIND_QUARANTINED, "<bad>"),
            (F.col("j.type") == "MD", KIND_IGNORED, IGNORED_DDL),
            (F.col("j.type").isNotNull() & (F.col("j.type") != "DT"), KIND_QUARANTINED, Q_UNKNOWN_OP),
            (operation.isNull(), KIND_QUARANTINED, Q_MISSING_OP),
            (op.isNull(), KIND_QUARANTINED, Q_UNKNOWN_OP),
            (not_object(msg["data"]) | not_object(msg["beforeData"]), KIND_QUARANTINED, Q_IMAGE_NOT_OBJECT),
            (md.isNull() | md["columns"].isNull(), KIND_QUARANTINED, Q_UNKNOWN_TABLE),
            (mask.isNotNull() & ~mask.rlike("^[0-9A-Fa-f]+$"), KIND_QUARANTINED, Q_TYPE_MISMATCH),
            (bad_value, KIND_QUARANTINED, Q_TYPE_MISMATCH),
            (
                op.isin(OP_READ, OP_INSERT, OP_UPDATE) & F.col("_data").isNull(),
                KIND_QUARANTINED,
                Q_MISSING_IMAGE,
            ),
            ((op == OP_DELETE) & F.col("_before_img").isNull(), KIND_QUARANTINED, Q_KEY_UNKNOWN),
        )
        reason = F.when(reason == "<bad>", F.col("bad")).otherwise(reason)
        # Full-load rows carry no change sequence: they order before every change.
        log_pos = F.when(op == OP_READ, F.array(*[F.lit(0).cast("bigint")] * 3)).otherwise(
            change_sequence_position(headers["changeSequence"])
        )
        return staged.select(
            *canonical(
                table=F.col("_table"),
                kind=kind,
                op=op,
                reason=reason,
                event_ms=F.col("_event_ms"),
                log_pos=log_pos,
                sub_pos=F.lit(0),
                tx_id=_blank_to_null(headers["transactionId"]),
                tx_end=F.lower(F.trim(headers["transactionLastEvent"])).try_cast("boolean"),
                before=F.col("_before_img"),
                after=F.when(op != OP_DELETE, F.col("_after")),
                partial=F.coalesce(partial, F.lit(False)),
                key_cols=md["key_cols"],
                types=md["types"],
                file=F.col("file"),
                file_pos=F.col("file_pos"),
                line=F.col("line"),
                raw=F.col("text"),
            )
        )

"""DTS Avro decoder: real Avro messages written with fastavro, decoded through Spark.

There are no real DTS binary samples (see ../shared/conformance/PROVENANCE.md): the messages here
are written with the package's ``record_schema`` (``reference.records.dts_avro``), the way DTS writes them (schemaless for Kafka,
``fastavro.writer`` for container files), and decoded by the real decoder and engine.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import os
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest
from pyspark.sql import functions as F

# The decoder runs fastavro in Python workers: they must be this interpreter (with fastavro,
# pyarrow and this package), not whatever `python3` is first on PATH. Set before the session.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from tests.conftest import assert_events_add_up  # noqa: E402

from airflow_cdc_provider.formats import DecodeOptions, get_decoder  # noqa: E402
from airflow_cdc_provider.formats.dts_avro.decoder import head_layout  # noqa: E402
from airflow_cdc_provider.formats.dts_avro.records import (  # noqa: E402
    LAYOUT_CONTAINER,
    LAYOUT_JSON_LINES,
    LAYOUT_MESSAGE,
    key_columns,
    log_position,
    read_message,
)
from airflow_cdc_provider.formats.dts_avro.schema import NAMESPACE, OPERATIONS, VALUE_TYPES, record_schema  # noqa: E402
from airflow_cdc_provider.formats.dts_avro.values import decimal_type, integer_type, parse_zone  # noqa: E402
from airflow_cdc_provider.formats.events import Q_BAD_AVRO  # noqa: E402
from airflow_cdc_provider.spark.reader import list_landed_files  # noqa: E402
from reference.records.dts_avro import (  # noqa: E402
    T0,
    WRITER,
    chars,
    empty,
    integer,
    message,
    record,
    value,
)

OLD_WRITER = fastavro.parse_schema(record_schema(born_timestamp=False))


# ------------------------------------------------------------------ building DTS messages


def dec(text: str, precision: int = 10, scale: int = 2) -> tuple[str, Any]:
    return value("Decimal", value=text, precision=precision, scale=scale)


def flt(v: float, precision: int = 12) -> tuple[str, Any]:
    return value("Float", value=v, precision=precision, scale=0)


def date_time(**parts: int | None) -> tuple[str, Any]:
    return value(
        "DateTime",
        **{p: parts.get(p) for p in ("year", "month", "day", "hour", "minute", "second", "millis")},
    )


def product(id_: int, name: str, price: str, weight: float) -> list[Any]:
    """A products row covering every common value record type."""
    return [
        integer(id_),
        chars(name),
        dec(price),
        flt(weight),
        flt(0.1, precision=22),
        value("Timestamp", timestamp=T0, millis=250000),  # the "millis" field carries microseconds
        date_time(year=2024, month=9, day=2, hour=14, minute=53, second=20, millis=123),
        date_time(year=2024, month=9, day=2),
        value("BinaryObject", type="BLOB", value=bytes([0, 1, 254])),
        value("TextObject", type="JSON", value='{"a": 1}'),
    ]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def kafka_json_lines(path: Path, values: list[bytes | str | None]) -> Path:
    """A Kafka sink dump: one JSON object per message, the bytes Base64 in ``value``."""
    lines = []
    for offset, v in enumerate(values):
        text = b64(v) if isinstance(v, bytes) else v
        lines.append(json.dumps({"topic": "dts_shop", "partition": 0, "offset": offset, "value": text}))
    path.write_text("\n".join(lines) + "\n")
    return path


def container(path: Path, records: list[dict[str, Any]]) -> Path:
    with path.open("wb") as out:
        fastavro.writer(out, WRITER, records)
    return path


# ------------------------------------------------------------------ decoding to plain rows

_EVENT_COLUMNS = (
    "kind",
    "op",
    "reason",
    "table",
    "event_ms",
    "log_pos",
    "tx_id",
    "partial",
    "key_cols",
    "types",
)


def _typed(image: F.Column) -> F.Column:
    """Each image value as "VARIANT_TYPE json" so tests see the variant's type, not just its text."""
    return F.transform_values(
        image, lambda _k, v: F.when(v.isNotNull(), F.concat_ws(" ", F.schema_of_variant(v), F.to_json(v)))
    )


def decode(spark, *paths: Path) -> list[dict[str, Any]]:
    files = list_landed_files(spark, [str(p) for p in paths])
    events = get_decoder("dts-avro").decode(spark, files, DecodeOptions())
    rows = events.select(
        F.element_at(F.split("file", "/"), -1).alias("file"),
        "file_pos",
        "line",
        "sub_pos",
        *_EVENT_COLUMNS,
        _typed(F.col("before")).alias("before"),
        _typed(F.col("after")).alias("after"),
        "raw",
    ).collect()
    return sorted((r.asDict(recursive=True) for r in rows), key=lambda r: (r["file"], r["file_pos"]))


def shape(rows: list[dict[str, Any]]) -> list[tuple]:
    return [(r["file"], r["file_pos"], r["line"], r["kind"], r["op"], r["reason"]) for r in rows]


PRODUCT_TYPES = {
    "id": "bigint",
    "name": "string",
    "price": "decimal(10,2)",
    "weight": "float",
    "score": "double",
    "created": "timestamp",
    "updated": "timestamp",
    "day": "date",
    "photo": "binary",
    "doc": "string",
}


def product_image(id_: int, name: str, price: str, weight: str) -> dict[str, str]:
    return {
        "id": f"BIGINT {id_}",
        "name": f'STRING "{name}"',
        "price": price,
        "weight": f"FLOAT {weight}",
        "score": "DOUBLE 0.1",
        "created": 'TIMESTAMP "2024-09-02 06:53:20.25+00:00"',
        "updated": 'TIMESTAMP "2024-09-02 14:53:20.000123+00:00"',
        "day": 'DATE "2024-09-02"',
        "photo": 'BINARY "AAH+"',
        "doc": 'STRING "{\\"a\\": 1}"',
    }


# ------------------------------------------------------------------ pure helpers (no Spark)


def test_schema_has_the_published_record_fields_in_order():
    names = [f["name"] for f in record_schema()["fields"]]
    assert names == [
        "version",
        "id",
        "sourceTimestamp",
        "sourcePosition",
        "safeSourcePosition",
        "sourceTxid",
        "source",
        "operation",
        "objectName",
        "processTimestamps",
        "tags",
        "fields",
        "beforeImages",
        "afterImages",
        "bornTimestamp",
    ]
    assert [f["name"] for f in record_schema(born_timestamp=False)["fields"]] == names[:-1]
    image_union = record_schema()["fields"][13]["type"][2]["items"]
    assert image_union == ["null", *(f"{NAMESPACE}.{t}" for t in VALUE_TYPES)]
    assert OPERATIONS[:9] == (
        "INSERT",
        "UPDATE",
        "DELETE",
        "DDL",
        "BEGIN",
        "COMMIT",
        "ROLLBACK",
        "ABORT",
        "HEARTBEAT",
    )


def test_read_message_accepts_records_with_and_without_born_timestamp():
    new = record("INSERT", 1, after=product(1, "a", "1.00", 1.5))
    old = {k: v for k, v in new.items() if k != "bornTimestamp"}
    assert read_message(message(new))["bornTimestamp"] == (T0 + 1) * 1000
    assert "bornTimestamp" not in read_message(message(old, OLD_WRITER))
    assert read_message(message(old, OLD_WRITER))["afterImages"][1] == (
        f"{NAMESPACE}.Character",
        {"charset": "utf8mb4", "value": b"a"},
    )


@pytest.mark.parametrize(
    "payload",
    [
        message(record("INSERT", 1, after=product(1, "a", "1.00", 1.5)))[:-9],  # cut short
        message(record("INSERT", 1, after=product(1, "a", "1.00", 1.5))) + b"\x00\x01",  # trailing garbage
        b"",
        b"\x02\x04garbage",
    ],
    ids=["truncated", "trailing-bytes", "empty", "garbage"],
)
def test_read_message_rejects_what_is_not_one_record(payload):
    with pytest.raises(Exception) as raised:
        read_message(payload)
    assert raised.value.reason == Q_BAD_AVRO


@pytest.mark.parametrize(
    "head, layout",
    [
        (b"Obj\x01\x04\x14avro.codec", LAYOUT_CONTAINER),
        (b'{"topic":"t","value":"AgI="}', LAYOUT_JSON_LINES),
        (b'\xef\xbb\xbf\n  {"value":null}', LAYOUT_JSON_LINES),
        (b"null\n", LAYOUT_JSON_LINES),
        (b"", LAYOUT_JSON_LINES),
        (b"\x02\x02\x82\xc4", LAYOUT_MESSAGE),
    ],
)
def test_head_layout(head, layout):
    assert head_layout(head) == layout


@pytest.mark.parametrize(
    "position, expected",
    [
        ("1234@mysql-bin.000007", [9, 7, 1234]),
        ("1234@7", [9, 7, 1234]),
        ("98765432101", [9, 98765432101]),
        ("16/B374D848", [9, (0x16 << 32) | 0xB374D848]),
        ("checkpoint-xyz", [9]),
        ("", [9]),
    ],
)
def test_log_position(position, expected):
    assert log_position(9, position) == expected


@pytest.mark.parametrize(
    "info, expected",
    [
        ('{"PRIMARY":["id"]}', ["id"]),
        ('{"uk_sku":["sku","shop"],"PRIMARY":["id","region"]}', ["id", "region"]),
        ('{"uk_sku":["sku","shop"],"uk_ean":["ean"]}', ["sku", "shop"]),
        ('{"PRIMARY":[]}', None),
        ("{}", None),
        ("not json", None),
        (None, None),
    ],
)
def test_key_columns(info, expected):
    assert key_columns(info) == expected


def test_numeric_types_follow_declared_precision():
    assert [integer_type(p) for p in (3, 9, 10, 19, 20, 0, 60)] == [
        "int",
        "int",
        "bigint",
        "bigint",
        "decimal(20,0)",
        "bigint",
        "decimal(38,0)",
    ]
    assert [decimal_type(*ps) for ps in ((10, 2), (0, 0), (65, 30), (5, 9))] == [
        "decimal(10,2)",
        "decimal(38,0)",
        "decimal(38,30)",
        "decimal(5,5)",
    ]


def test_parse_zone():
    moment = dt.datetime(2024, 9, 2, 12, 0)
    offsets = {
        z: moment.replace(tzinfo=parse_zone(z)).utcoffset()
        for z in ("+08:00", "GMT+8", "-0530", "UTC", "Asia/Shanghai")
    }
    assert offsets == {
        "+08:00": dt.timedelta(hours=8),
        "GMT+8": dt.timedelta(hours=8),
        "-0530": -dt.timedelta(hours=5, minutes=30),
        "UTC": dt.timedelta(0),
        "Asia/Shanghai": dt.timedelta(hours=8),
    }


# ------------------------------------------------------------------ decoding through Spark


def test_insert_update_delete_typed(spark, tmp_path):
    path = kafka_json_lines(
        tmp_path / "dts.json",
        [
            message(record("INSERT", 11, after=product(1, "Zoë", "10.50", 5.170000076293945))),
            message(
                record(
                    "UPDATE",
                    12,
                    before=product(1, "Zoë", "10.50", 5.170000076293945),
                    after=product(1, "Zoe", "12.00", 0.75),
                )
            ),
            message(record("DELETE", 13, before=product(1, "Zoe", "12.00", 0.75))),
        ],
    )
    rows = decode(spark, path)
    assert shape(rows) == [
        ("dts.json", 0, 1, "change", "insert", None),
        ("dts.json", 1, 2, "change", "update", None),
        ("dts.json", 2, 3, "change", "delete", None),
    ]
    first = product_image(1, "Zoë", "DECIMAL(3,1) 10.5", "5.17")
    second = product_image(1, "Zoe", "DECIMAL(2,0) 12", "0.75")
    assert [(r["before"], r["after"]) for r in rows] == [(None, first), (first, second), (second, None)]
    for r, id_ in zip(rows, (11, 12, 13)):
        assert (
            r["table"],
            r["event_ms"],
            r["log_pos"],
            r["tx_id"],
            r["partial"],
            r["key_cols"],
            r["types"],
            r["sub_pos"],
        ) == (
            "shop.products",
            (T0 + id_) * 1000,
            [id_, 7, 1000 + id_],
            "tx1",
            False,
            ["id"],
            PRODUCT_TYPES,
            0,
        )
    # raw is the message itself, as the Kafka value carried it
    assert rows[0]["raw"] == b64(
        message(record("INSERT", 11, after=product(1, "Zoë", "10.50", 5.170000076293945)))
    )


def test_update_that_changes_the_key_carries_the_old_row(spark, tmp_path):
    fields = [("id", 3), ("sku", 253)]
    path = kafka_json_lines(
        tmp_path / "k.json",
        [
            message(
                record(
                    "UPDATE",
                    20,
                    fields=fields,
                    before=[integer(7, 10), chars("a")],
                    after=[integer(8, 10), chars("a")],
                )
            )
        ],
    )
    [row] = decode(spark, path)
    assert (row["op"], row["before"], row["after"], row["types"]) == (
        "update",
        {"id": "BIGINT 7", "sku": 'STRING "a"'},
        {"id": "BIGINT 8", "sku": 'STRING "a"'},
        {"id": "bigint", "sku": "string"},
    )


def test_non_row_operations_are_ignored_with_their_reason(spark, tmp_path):
    path = kafka_json_lines(
        tmp_path / "ops.json",
        [
            message(record("BEGIN", 30, fields=None)),
            message(
                record(
                    "DDL",
                    31,
                    fields=None,
                    after="ALTER TABLE products ADD COLUMN note varchar(20)",
                    table="shop",
                )
            ),
            message(record("HEARTBEAT", 32, fields=None, table=None, pk=None)),
            message(record("CHECKPOINT", 33, fields=None, table=None, pk=None)),
            message(record("COMMIT", 34, fields=None)),
        ],
    )
    rows = decode(spark, path)
    assert [(r["kind"], r["reason"], r["table"], r["before"], r["after"], r["types"]) for r in rows] == [
        ("ignored", "transaction marker", "shop.products", None, None, None),
        ("ignored", "ddl", "shop", None, None, None),
        ("ignored", "heartbeat", None, None, None, None),
        ("ignored", "heartbeat", None, None, None, None),
        ("ignored", "transaction marker", "shop.products", None, None, None),
    ]


def test_three_landing_layouts_give_the_same_events(spark, tmp_path):
    records = [
        record("INSERT", 41, after=product(1, "a", "1.00", 1.5)),
        record("COMMIT", 42, fields=None),
        record("UPDATE", 43, before=product(1, "a", "1.00", 1.5), after=product(1, "b", "2.00", 2.5)),
    ]
    (tmp_path / "json").mkdir()
    (tmp_path / "raw").mkdir()
    (tmp_path / "avro").mkdir()
    kafka_json_lines(
        tmp_path / "json" / "dts_shop+0+0000000041", [message(r) for r in records]
    )  # no suffix: sniffed
    for i, r in enumerate(records):
        (tmp_path / "raw" / f"msg-{i}").write_bytes(message(r))
    container(tmp_path / "avro" / "part-0.avro", records)

    def content(rows):
        return [tuple(r[c] for c in (*_EVENT_COLUMNS, "before", "after")) for r in rows]

    as_json = decode(spark, tmp_path / "json")
    as_raw = decode(spark, tmp_path / "raw")
    as_container = decode(spark, tmp_path / "avro")
    assert content(as_json) == content(as_raw) == content(as_container)
    assert [r["kind"] for r in as_json] == ["change", "ignored", "change"]
    assert [(r["file"], r["file_pos"], r["line"]) for r in as_raw] == [
        ("msg-0", 0, None),
        ("msg-1", 0, None),
        ("msg-2", 0, None),
    ]
    assert [(r["file"], r["file_pos"], r["line"]) for r in as_container] == [
        ("part-0.avro", i, None) for i in range(3)
    ]
    # One message, one raw text, whichever way it landed (duplicate detection relies on it).
    assert [r["raw"] for r in as_json] == [r["raw"] for r in as_raw] == [r["raw"] for r in as_container]


def test_records_that_do_not_decode_are_quarantined_with_file_and_position(spark, tmp_path):
    good = message(record("INSERT", 51, after=product(1, "a", "1.00", 1.5)))
    lines = kafka_json_lines(tmp_path / "a.json", [good, "%%% not base64 %%%", good[:-20], None])
    with lines.open("a") as out:
        out.write('{"topic":"dts_shop","offset":4}\n')  # no value at all
        out.write('{"topic":"dts_shop","offset":5,"value":12}\n')  # a number is not Base64
        out.write("{not json\n")
    (tmp_path / "b.bin").write_bytes(b"\x02\x04\x00garbage that is not a record")
    broken = io.BytesIO()
    fastavro.writer(
        broken,
        WRITER,
        [record("INSERT", 52 + i, after=product(i, "x" * 300, "1.00", 1.0)) for i in range(40)],
        sync_interval=2000,
    )
    (tmp_path / "c.avro").write_bytes(broken.getvalue()[:-3000])
    rows = decode(spark, tmp_path / "a.json", tmp_path / "b.bin", tmp_path / "c.avro")
    decoded_from_c = [r for r in rows if r["file"] == "c.avro"]
    assert shape(rows[:9]) == [
        ("a.json", 0, 1, "change", "insert", None),
        ("a.json", 1, 2, "quarantined", None, "bad Base64"),
        ("a.json", 2, 3, "quarantined", None, "bad Avro"),
        ("a.json", 3, 4, "ignored", None, "tombstone"),
        ("a.json", 4, 5, "quarantined", None, "missing image"),
        ("a.json", 5, 6, "quarantined", None, "bad Base64"),
        ("a.json", 6, 7, "quarantined", None, "not JSON"),
        ("b.bin", 0, None, "quarantined", None, "bad Avro"),
        ("c.avro", 0, None, "change", "insert", None),
    ]
    # The container decodes up to the block that breaks off, then says where it stopped.
    assert [r["kind"] for r in decoded_from_c[:-1]] == ["change"] * (len(decoded_from_c) - 1)
    assert (decoded_from_c[-1]["kind"], decoded_from_c[-1]["reason"], decoded_from_c[-1]["file_pos"]) == (
        "quarantined",
        "bad Avro",
        len(decoded_from_c) - 1,
    )
    assert 0 < len(decoded_from_c) - 1 < 40
    assert [r["raw"] for r in rows[1:3]] == [
        '{"topic": "dts_shop", "partition": 0, "offset": 1, "value": "%%% not base64 %%%"}',
        b64(good[:-20]),
    ]
    assert rows[7]["raw"] == b64(b"\x02\x04\x00garbage that is not a record")


def test_records_with_bad_shape_or_values_are_quarantined(spark, tmp_path):
    two = [("id", 3), ("v", 253)]
    path = kafka_json_lines(
        tmp_path / "bad.json",
        [
            message(record("INSERT", 61, fields=two, after=[integer("12x", 10), chars("a")])),
            message(record("INSERT", 62, fields=two, after=[integer(1, 10)])),
            message(record("INSERT", 63, fields=two, after=None)),
            message(record("DELETE", 64, fields=two, before=None)),
            message(
                record(
                    "INSERT",
                    65,
                    fields=two,
                    after=[integer(1, 10), value("Character", charset="klingon", value=b"a")],
                )
            ),
            message(record("INSERT", 66, fields=two, after=[integer(1, 10), chars("a")], table=None)),
            message(record("INSERT", 67, fields=two, after=[integer(1, 10), dec("NaN")])),
            message(record("INSERT", 68, fields=None, after=[integer(1, 10)])),
            message(
                record(
                    "INSERT",
                    69,
                    fields=two,
                    after=[integer(1, 10), value("Character", charset="utf8", value=b"\xff\xfe")],
                )
            ),
        ],
    )
    rows = decode(spark, path)
    assert [(r["kind"], r["reason"], r["after"]) for r in rows] == [
        ("quarantined", "type mismatch", None),
        ("quarantined", "row image not an object", None),
        ("quarantined", "missing image", None),
        ("quarantined", "key unknown: delete with neither before nor after image", None),
        ("quarantined", "type mismatch", None),
        ("quarantined", "missing table", None),
        ("quarantined", "type mismatch", None),
        ("quarantined", "row image not an object", None),
        ("quarantined", "type mismatch", None),
    ]
    assert [r["event_ms"] for r in rows] == [(T0 + i) * 1000 for i in range(61, 70)]


def test_value_edge_cases(spark, tmp_path):
    fields = [
        ("id", 8),
        ("big", 8),
        ("t", 11),
        ("y", 13),
        ("zero", 10),
        ("zoned", 7),
        ("named", 7),
        ("gbk", 253),
        ("bin", 254),
        ("geo", 255),
        ("gone", 252),
        ("nothing", 253),
    ]
    after = [
        integer(1),
        integer("18446744073709551615", precision=20),
        date_time(hour=-838, minute=59, second=59),
        date_time(year=2024),
        date_time(year=0, month=0, day=0),
        value(
            "TimestampWithTimeZone",
            value=date_time(year=2024, month=9, day=2, hour=8, minute=0, second=0, millis=5)[1],
            timezone="+08:00",
        ),
        value(
            "TimestampWithTimeZone",
            value=date_time(year=2024, month=1, day=15, hour=8, minute=0, second=0)[1],
            timezone="Asia/Shanghai",
        ),
        chars("数据", charset="gbk"),
        value("Character", charset="binary", value=b"\x00\xff"),
        value("BinaryGeometry", type="POINT", value=b"\x01\x01"),
        empty("NONE"),
        empty("NULL"),
    ]
    oracle_fields = [("id", 2), ("at", 93)]
    oracle_after = [
        integer(2, 5),
        date_time(year=2024, month=9, day=2, hour=1, minute=2, second=3, millis=123456789),
    ]
    path = kafka_json_lines(
        tmp_path / "edge.json",
        [
            message(record("UPDATE", 71, fields=fields, before=None, after=after)),
            message(
                record(
                    "INSERT",
                    72,
                    fields=oracle_fields,
                    after=oracle_after,
                    source="Oracle",
                    position="98765",
                    table="HR.EMP",
                )
            ),
            message(
                {
                    k: v
                    for k, v in record("INSERT", 73, fields=[("id", 3)], after=[integer(3, 10)]).items()
                    if k != "bornTimestamp"
                },
                OLD_WRITER,
            ),
        ],
    )
    rows = decode(spark, path)
    first, oracle, old = rows
    assert first["after"] == {
        "id": "BIGINT 1",
        "big": "DECIMAL(20,0) 18446744073709551615",
        "t": 'STRING "-838:59:59"',
        "y": "BIGINT 2024",
        "zero": None,
        "zoned": 'TIMESTAMP "2024-09-02 00:00:00.000005+00:00"',
        "named": 'TIMESTAMP "2024-01-15 00:00:00+00:00"',
        "gbk": 'STRING "数据"',
        "bin": 'BINARY "AP8="',
        "geo": 'BINARY "AQE="',
        "nothing": None,
    }  # "gone" (EmptyObject NONE) is not carried by the image: it keeps its value, so partial
    assert (first["partial"], first["types"]) == (
        True,
        {
            "id": "bigint",
            "big": "decimal(20,0)",
            "t": "string",
            "y": "int",
            "zero": "date",
            "zoned": "timestamp",
            "named": "timestamp",
            "gbk": "string",
            "bin": "binary",
            "geo": "binary",
        },
    )
    # Oracle DateTime fractions are nanoseconds (MySQL and PostgreSQL send microseconds).
    assert (oracle["after"], oracle["types"], oracle["log_pos"], oracle["table"]) == (
        {"id": "BIGINT 2", "at": 'TIMESTAMP "2024-09-02 01:02:03.123456+00:00"'},
        {"id": "int", "at": "timestamp"},
        [72, 98765],
        "HR.EMP",
    )
    # A record from a DTS release before bornTimestamp existed.
    assert (old["kind"], old["after"]) == ("change", {"id": "BIGINT 3"})


# ------------------------------------------------------------------ end to end through the engine


def test_replay_exact_rows(replay, spark, tmp_path):
    landing = tmp_path / "landing"
    (landing / "kafka").mkdir(parents=True)
    (landing / "raw").mkdir()
    (landing / "archive").mkdir()
    insert_1 = record("INSERT", 101, after=product(1, "Zoë", "10.50", 5.170000076293945))
    insert_2 = record("INSERT", 102, after=product(2, "Bob", "3.00", 1.0))
    update_2 = record(
        "UPDATE", 105, before=product(2, "Bob", "3.00", 1.0), after=product(3, "Bob", "3.25", 1.0)
    )
    kafka_json_lines(
        landing / "kafka" / "dts-0.json",
        [
            message(record("BEGIN", 100, fields=None)),
            message(insert_1),
            message(insert_1),  # at-least-once delivery: the same message twice
            message(record("COMMIT", 103, fields=None)),
            "@@not base64@@",
        ],
    )
    (landing / "raw" / "msg-104").write_bytes(
        message(record("HEARTBEAT", 104, fields=None, table=None, pk=None))
    )
    (landing / "raw" / "msg-105").write_bytes(message(update_2))  # key change 2 -> 3
    (landing / "raw" / "msg-106").write_bytes(b"\x02corrupt")
    container(
        landing / "archive" / "older.avro",
        [
            insert_2,
            record("DDL", 107, fields=None, after="ALTER TABLE products COMMENT 'x'", table="shop"),
            record(
                "UPDATE",
                108,
                before=product(1, "Zoë", "10.50", 5.170000076293945),
                after=product(1, "Zoe", "11.00", 5.170000076293945),
            ),
            record("DELETE", 200, before=product(3, "Bob", "3.25", 1.0), ts=T0 + 10_000),  # after AS OF
        ],
    )
    metrics, tables = replay("dts-avro", landing, as_of=(T0 + 1000) * 1000)
    assert_events_add_up(metrics)
    assert metrics["events"] == {
        "read": 12,
        "applied": 4,
        "after_as_of": 1,
        "ignored": 4,
        "duplicates": 1,
        "quarantined": 2,
    }
    assert metrics["ignored"] == {"ddl": 1, "heartbeat": 1, "transaction marker": 2}
    assert metrics["quarantine"]["reasons"] == {"bad Avro": 1, "bad Base64": 1}
    info = metrics["tables"]["shop.products"]
    assert (info["rows"], info["inserts"], info["updates"], info["deletes"], info["last_event_ms"]) == (
        2,
        2,
        2,
        0,
        (T0 + 108) * 1000,
    )

    def row(id_, name, price, weight):
        return {
            "id": id_,
            "name": name,
            "price": Decimal(price),
            "weight": weight,
            "score": 0.1,
            "created": dt.datetime(2024, 9, 2, 6, 53, 20, 250000),
            "updated": dt.datetime(2024, 9, 2, 14, 53, 20, 123),
            "day": dt.date(2024, 9, 2),
            "photo": bytearray([0, 1, 254]),
            "doc": '{"a": 1}',
        }

    assert tables == {
        "shop.products": [row(1, "Zoe", "11.00", pytest.approx(5.17)), row(3, "Bob", "3.25", 1.0)]
    }
    # The record's `fields` order, the source table's (not by name).
    assert spark.read.parquet(info["path"]).columns == list(product_image(1, "", "", "").keys())

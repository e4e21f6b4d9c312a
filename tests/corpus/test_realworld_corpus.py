"""The second real-world corpus (../shared/realworld): every case rebuilds exactly.

Each ``*.expected.json`` names its format, inputs, ``--key`` and the final table; PROVENANCE.md
says how a rebuild is compared: rows matched by key, only the columns an expected row lists,
numbers by value (1e-6 relative), booleans against ``0/1/"true"/...``, timestamps by instant
(zone-less text is UTC), dates and times by value, bytes against their Base64 text, and
``{"any_of": [...]}`` where a logical type has two defensible representations.
"""

from __future__ import annotations

import base64
import json
import math
from datetime import date, datetime, time, timezone
from decimal import Decimal, InvalidOperation

import pytest
from pyspark.sql import functions as F

from tests.conftest import REALWORLD, assert_events_add_up, corpus_parametrize

CASES = sorted(REALWORLD.glob("*/*.expected.json"))
_TRUE = ("1", "true", "t", "y", "yes")
_FALSE = ("0", "false", "f", "n", "no")


def _number(v) -> Decimal | None:
    """The exact value of a JSON number or of a text that spells one (not of a boolean)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float, Decimal)):
        return Decimal(str(v)) if isinstance(v, float) else Decimal(v)
    if isinstance(v, str):
        try:
            d = Decimal(v.strip())
        except InvalidOperation:
            return None
        return d if d.is_finite() else None
    return None


def _instant(text: str) -> datetime | None:
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _time_of_day(text: str) -> time | None:
    if len(text) < 8 or text[2] != ":":
        return None
    try:
        return time.fromisoformat(text)
    except ValueError:
        return None


def matches(expected, actual) -> bool:
    """Whether a snapshot value equals an expected value under PROVENANCE.md's rules."""
    if isinstance(expected, dict) and set(expected) == {"any_of"}:
        return any(matches(e, actual) for e in expected["any_of"])
    if expected is None or actual is None:
        return expected is None and actual is None
    if isinstance(actual, bool):
        if isinstance(expected, bool):
            return expected == actual
        text = str(expected).strip().lower()
        return text in (_TRUE if actual else _FALSE)
    if isinstance(actual, (int, float, Decimal)):
        want = _number(expected)
        if want is None:
            return False
        got = Decimal(str(actual)) if isinstance(actual, float) else Decimal(actual)
        if want == got:
            return True
        # Only a floating-point column needs the tolerance (a float32 against its decimal text);
        # integers and decimals are exact.
        return isinstance(actual, float) and math.isclose(float(want), actual, rel_tol=1e-6, abs_tol=0.0)
    if isinstance(actual, datetime):  # read back as UTC text below, so this is a TIMESTAMP_NTZ
        want = _instant(expected) if isinstance(expected, str) else None
        return want is not None and want == actual.replace(tzinfo=timezone.utc)
    if isinstance(actual, date):
        return isinstance(expected, str) and expected == actual.isoformat()
    if isinstance(actual, time):
        return isinstance(expected, str) and time.fromisoformat(expected) == actual
    if isinstance(actual, (bytes, bytearray)):
        return isinstance(expected, str) and base64.b64decode(expected) == bytes(actual)
    if isinstance(actual, str):
        if isinstance(expected, str):
            if expected == actual:
                return True
            # A timestamp column read back as UTC text (see _snapshot): compare instants.
            want, got = _instant(expected), _instant(actual)
            if actual.endswith("+00:00") and want is not None and want == got:
                return True
            # A time of day kept as text ("14:30:00.000000"): compare times.
            want_time, got_time = _time_of_day(expected), _time_of_day(actual)
            return want_time is not None and want_time == got_time
        return False
    return expected == actual


def _snapshot(spark, path) -> list[dict]:
    """The snapshot's rows; timestamps as their UTC instant in ISO text (independent of local time)."""
    df = spark.read.parquet(str(path))
    cols = [
        F.concat(F.date_format(f.name, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"), F.lit("+00:00")).alias(f.name)
        if f.dataType.typeName() == "timestamp"
        else F.col(f.name)
        for f in df.schema.fields
    ]
    return [r.asDict(recursive=True) for r in df.select(*cols).collect()]


def _key_text(v) -> str:
    n = _number(v)
    if n is not None:
        return format(n.normalize(), "f")
    return str(v)


def _records(expected: dict):
    """The JSON-object records of a case's inputs, in file order (other lines are skipped)."""
    for rel in expected["inputs"]:
        for line in (REALWORLD / rel).read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record


def _declared_order(expected: dict) -> list[str] | None:
    """The column order the capture declares for the case's table, from its last declaring record.

    Debezium: the schema block's ``after`` fields; Canal: ``mysqlType``. None when nothing declares one.
    """
    order = None
    for record in _records(expected):
        if expected["format"] == "canal-json":
            if record.get("table") == expected["table"] and record.get("mysqlType"):
                order = list(record["mysqlType"])
        elif isinstance(record.get("schema"), dict):
            for f in record["schema"].get("fields") or []:
                if f.get("field") == "after" and f.get("fields"):
                    order = [c["field"] for c in f["fields"]]
    return order


def _landing_order(expected: dict) -> list[str]:
    """The order in which the table's columns first appear in the landing (row images in file order)."""
    from airflow_cdc_provider.replay.schemas import merge_column_order

    order: list[str] = []
    for record in _records(expected):
        if expected["format"] == "canal-json":
            images = record.get("data") or [] if record.get("table") == expected["table"] else []
        else:
            envelope = record.get("payload") if isinstance(record.get("payload"), dict) else record
            source = envelope.get("source") or {}
            same = source.get("table") == expected["table"]
            images = [envelope.get("after") or envelope.get("before")] if same else []
        for image in images:
            if isinstance(image, dict):
                merge_column_order(order, list(image))
    return order


def _table_of(metrics: dict, name: str) -> str:
    found = [t for t in metrics["tables"] if t == name or t.endswith("." + name)]
    assert len(found) == 1, f"table {name} in {sorted(metrics['tables'])}"
    return found[0]


@pytest.mark.corpus
@corpus_parametrize("case", CASES, ids=lambda p: p.name.removesuffix(".expected.json"))
def test_realworld_case_rebuilds_exactly(replay, spark, case):
    expected = json.loads(case.read_text(encoding="utf-8"))
    key = expected["key_arg"].split(",") if expected["key_arg"] else ()
    metrics, _ = replay(expected["format"], [REALWORLD / p for p in expected["inputs"]], key=key)
    assert_events_add_up(metrics)
    if "min_quarantined" in expected:
        assert metrics["events"]["quarantined"] >= expected["min_quarantined"]
    else:
        assert metrics["events"]["quarantined"] == 0, metrics.get("quarantine")

    table = _table_of(metrics, expected["table"])
    rows = _snapshot(spark, metrics["tables"][table]["path"])
    key_columns = expected["key_columns"]
    by_key = {tuple(_key_text(r[c]) for c in key_columns): r for r in rows}
    assert len(by_key) == len(rows), "duplicate keys in the snapshot"
    want_keys = {tuple(_key_text(r[c]) for c in key_columns) for r in expected["rows"]}
    assert sorted(by_key) == sorted(want_keys)

    mismatches = []
    for want in expected["rows"]:
        got = by_key[tuple(_key_text(want[c]) for c in key_columns)]
        for col, value in want.items():
            if col not in got:
                mismatches.append((col, "missing column", value))
            elif not matches(value, got[col]):
                mismatches.append((tuple(want[c] for c in key_columns), col, value, got[col]))
    assert mismatches == []
    assert metrics["tables"][table]["rows"] == len(expected["rows"])
    declared = _declared_order(expected)
    columns = spark.read.parquet(metrics["tables"][table]["path"]).columns
    if declared is not None:
        # The source declares its column order: the snapshot has it.
        assert columns == declared
    else:
        # Otherwise the order in which the columns first appear in the landing.
        assert columns == _landing_order(expected)


# --- the comparison itself: a check that cannot fail is no check ------------------------------------


@pytest.mark.parametrize(
    "expected, actual",
    [
        (3.14, 3.140000104904175),  # float32 column against its decimal text
        ("1500.62", Decimal("1500.62")),
        (123, Decimal("123")),
        ("0", False),
        ("true", True),
        ("2022-10-14T23:55:31.989360", "2022-10-14T23:55:31.989360+00:00"),
        ("2024-12-17T15:23:37.618Z", "2024-12-17T15:23:37.618000+00:00"),
        ("2022-10-14", date(2022, 10, 14)),
        ({"any_of": ["23:55:31.989360", 86131989360]}, 86131989360),
        ("AQ==", b"\x01"),
        ("14:30:00", "14:30:00.000000"),
        (None, None),
    ],
)
def test_matches_accepts_equal_values(expected, actual):
    assert matches(expected, actual)


@pytest.mark.parametrize(
    "expected, actual",
    [
        (3.14, 3.15),
        (1.0, "1"),  # a JSON number that came back as text changed type
        ("2022-10-14T23:55:31.989360", "2022-10-14T23:55:31.989361+00:00"),
        ("2024-12-17T15:23:37.618Z", "2024-12-17T15:23:37.618Z "),
        ({"any_of": ["23:55:31.989360", 86131989360]}, 86131989361),
        (0.1373, 0.1374),
        (123, Decimal("123.0001")),
        ("AQ==", b"\x02"),
        ("14:30:00", "14:30:01.000000"),
        ("0", True),
        (None, 0),
        (0, None),
        ("a", "b"),
    ],
)
def test_matches_rejects_different_values(expected, actual):
    assert not matches(expected, actual)


@pytest.mark.corpus
def test_the_corpus_has_its_seventeen_cases():
    assert len(CASES) == 17

"""The Debezium files of the external conformance corpus (../shared/conformance) rebuild exactly."""

from __future__ import annotations

import json
import struct

import pytest

from tests.conftest import CONFORMANCE, assert_events_add_up

pytestmark = pytest.mark.corpus

FLINK = CONFORMANCE / "flink"
PAIMON_DBZ = CONFORMANCE / "paimon" / "debezium" / "table" / "schema" / "schemaevolution"


def _float32(x):
    return struct.unpack("f", struct.pack("f", x))[0] if isinstance(x, float) else x


def _normalise(rows, columns, float_columns=()):
    out = []
    for r in rows:
        full = {c: r.get(c) for c in columns}
        for c in float_columns:
            full[c] = _float32(full[c])
        out.append(full)
    return sorted(out, key=lambda r: r["id"])


def _expected(name):
    return json.loads((FLINK / f"{name}.expected.json").read_text())


@pytest.mark.parametrize(
    "name, table",
    [
        ("debezium-data-schema-include", "inventory.products"),
        ("debezium-data-schema-exclude", "inventory.products"),
        ("debezium-postgres-data-schema-include", "postgres.inventory.products"),
        ("debezium-postgres-data-schema-exclude", "postgres.inventory.products"),
    ],
)
def test_flink_debezium_files(replay, spark, name, table):
    metrics, tables = replay("debezium-json", FLINK / f"{name}.txt", key="id")
    expected = _expected(name)
    assert list(tables) == [table]
    columns = ["id", "name", "description", "weight"]
    schema = {
        f.name: f.dataType.simpleString() for f in spark.read.parquet(metrics["tables"][table]["path"]).schema
    }
    # The source table's column order: the schema block's field order, else the order the values are written.
    assert list(schema) == columns
    floats = [c for c, t in schema.items() if t == "float"]
    assert _normalise(tables[table], columns, floats) == _normalise(expected["rows"], columns, floats)
    assert metrics["rows"] == expected["row_count"] == 10
    assert metrics["events"]["read"] == 16
    assert metrics["events"]["quarantined"] == 0
    assert_events_add_up(metrics)


def test_flink_postgres_replica_identity_default_quarantines_the_keyless_delete(replay, tmp_path):
    metrics, tables = replay("debezium-json", FLINK / "debezium-postgres-data-replica-identity.txt", key="id")
    expected = _expected("debezium-postgres-data-replica-identity")
    alternative = expected["rows_if_updates_applied_and_keyless_delete_skipped_not_asserted"]
    columns = ["id", "name", "description", "weight"]
    assert _normalise(tables["postgres.inventory.products"], columns) == _normalise(alternative, columns)
    assert metrics["quarantine"]["reasons"] == {"key unknown: delete with neither before nor after image": 1}
    assert metrics["events"]["quarantined"] == 1
    assert_events_add_up(metrics)
    quarantined = [
        json.loads(line)
        for p in (tmp_path / "out1" / "_quarantine").glob("part-*")
        for line in p.read_text().splitlines()
    ]
    assert len(quarantined) == 1
    assert quarantined[0]["file"].endswith("debezium-postgres-data-replica-identity.txt")
    assert quarantined[0]["line"] == 16
    assert quarantined[0]["reason"] == "key unknown: delete with neither before nor after image"
    assert '"op":"d"' in quarantined[0]["record"]


@pytest.mark.parametrize("name", ["serde-with-schema.json", "serde-without-schema.json"])
def test_debezium_serde_pretty_printed_documents(replay, name):
    metrics, tables = replay("debezium-json", CONFORMANCE / "debezium" / name, key="id")
    assert tables == {
        "inventory.customers": [
            {"id": 1004, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
        ]
    }
    assert metrics["events"] == {
        "read": 1,
        "applied": 1,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 0,
    }


def test_paimon_schema_evolution_files_in_order(replay):
    expected = json.loads((PAIMON_DBZ / "schemaevolution.expected.json").read_text())
    columns = ["id", "name", "description", "weight", "age"]
    files = [PAIMON_DBZ / f"debezium-data-{i}.txt" for i in range(1, 5)]
    for i, step in enumerate(expected["steps"][:4], start=1):
        metrics, tables = replay("debezium-json", files[:i], key="id")
        (rows,) = tables.values()
        assert _normalise(rows, columns) == _normalise(step["rows"], columns), f"after file {i}"
        # Every file starts with a licence comment: its lines are quarantined as "not JSON", never lost.
        assert set(metrics["quarantine"]["reasons"]) == {"not JSON"}
        assert_events_add_up(metrics)


def test_paimon_schema_evolution_bigint_to_string_stops_the_job(replay):
    from airflow_cdc_provider.replay.schemas import SchemaDriftError

    files = [PAIMON_DBZ / f"debezium-data-{i}.txt" for i in range(1, 6)]
    with pytest.raises(SchemaDriftError) as err:
        replay("debezium-json", files, key="id")
    message = str(err.value)
    assert "column age changes type from bigint to string" in message
    assert "debezium-data-5.txt" in message

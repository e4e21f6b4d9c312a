"""The decoders' table names in Spark agree with the contract's rules, whatever the characters."""

from __future__ import annotations

import random

from airflow_cdc_provider.contract.tables import matching_reading, qualify
from airflow_cdc_provider.formats.events import dotted_table, qualified_table, table_matches
from airflow_cdc_provider.spark import sqlexpr as E

_ALPHABET = ["a", "b", ".", '"', "/", "\\", "'", "%", " ", "_", "é", "库", "\n", "`", "$", "{"]


def _part(rng: random.Random) -> str | None:
    if rng.random() < 0.1:
        return None
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 5)))


def test_qualified_and_dotted_names_in_spark_are_the_contracts(spark):
    rng = random.Random(7)
    rows = [tuple(_part(rng) for _ in range(3)) for _ in range(400)]
    df = spark.createDataFrame(rows, "a string, b string, c string")
    got = df.select(
        qualified_table(E.col("a"), E.col("b"), E.col("c")).alias("q").column(),
        dotted_table(E.col("a")).alias("d").column(),
    ).collect()
    for (a, b, c), row in zip(rows, got):
        parts = [p for p in (a, b, c) if p is not None]
        assert row["q"] == (qualify(parts) if parts else ""), (a, b, c)
        assert row["d"] == (None if a is None else qualify(a.split("."))), a


def test_table_matching_in_spark_is_the_contracts(spark):
    rng = random.Random(11)
    tables = sorted(
        {qualify([p for p in (_part(rng), _part(rng), _part(rng)) if p is not None]) for _ in range(150)}
    )
    tables = [t for t in tables if t]
    names = ["b", "a.b", "x.a.b", 'x."a.b"', '"a.b"', "a", ".", "é.库"] + [
        t.split(".")[-1] for t in tables[:40] if '"' not in t
    ]
    names += [t for t in tables[:40]]
    df = spark.createDataFrame([(t,) for t in tables], "t string")
    got = df.select(
        "t", *[table_matches(E.col("t"), (n,)).alias(f"m{i}").column() for i, n in enumerate(names)]
    ).collect()
    for row in got:
        for i, name in enumerate(names):
            assert row[f"m{i}"] == (matching_reading(name, row["t"]) is not None), (name, row["t"])

"""``sqlexpr`` writes the brackets Spark's grammar needs and no others, and means what PySpark means.

Every expression below is evaluated by Spark twice, once from ``sqlexpr``'s text and once built
with PySpark's own ``Column`` operators, on rows chosen so that a wrong grouping gives another value.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from airflow_cdc_provider.spark import sqlexpr as E

a, b, c = E.col("a"), E.col("b"), E.col("c")
x, y, z = E.col("x"), E.col("y"), E.col("z")


def _pairs() -> dict:
    """Name -> (sqlexpr's expression, PySpark's); PySpark's need a running context."""
    A, B, C = F.col("a"), F.col("b"), F.col("c")  # noqa: N806
    X, Y, Z = F.col("x"), F.col("y"), F.col("z")  # noqa: N806
    return {
        "sum then product": ((a + b) * c, (A + B) * C),
        "product inside a sum": (a + b * c, A + B * C),
        "difference of a difference": (a - (b - c), A - (B - C)),
        "left-associative difference": (a - b - c, A - B - C),
        "negated difference": (-(a - b), -(A - B)),
        "minus a negative literal": (a - (-5), A - F.lit(-5)),
        "negative literal times": ((a * -2) % c, (A * F.lit(-2)) % C),
        "remainder of a product": (a % (b * c), A % (B * C)),
        "bitwise and of a sum": ((a + b).bitwiseAND(c), (A + B).bitwiseAND(C)),
        "not of a conjunction": (~(x & y), ~(X & Y)),
        "conjunction with a negation": (~x & y, ~X & Y),
        "disjunction inside a conjunction": ((x | y) & z, (X | Y) & Z),
        "conjunction inside a disjunction": (x | (y & z), X | (Y & Z)),
        "comparison of comparisons": ((a > b) == (b > c), (A > B) == (B > C)),
        "null test of a comparison": ((a == b).isNull(), (A == B).isNull()),
        "membership of a comparison": ((a < b).isin(True), (A < B).isin(True)),
        "membership in no values": (c.isin([]), C.isin([])),
        "negated null test": (~a.isNull(), ~A.isNull()),
        "null-safe equality of a sum": ((a + b).eqNullSafe(c), (A + B).eqNullSafe(C)),
        "element of a built array": (
            E.call("array", a + b, c)[a.isNull().cast("int")],
            F.array(A + B, C)[A.isNull().cast("int")],
        ),
        "else branch holding a case": (
            E.when(x, 1).otherwise(E.when(y, 2).when(z, 3).otherwise(4)),
            F.when(X, 1).otherwise(F.when(Y, 2).when(Z, 3).otherwise(4)),
        ),
        "else branch holding a case without default": (
            E.when(x, 1).otherwise(E.when(y, 2)),
            F.when(X, 1).otherwise(F.when(Y, 2)),
        ),
    }


def test_sql_text_means_what_pyspark_means(spark):
    rows = spark.createDataFrame(
        [
            (7, 3, 2, True, False, True),
            (-4, 9, 5, False, True, False),
            (6, 6, None, None, True, True),
            (None, 1, 1, False, None, False),
        ],
        "a int, b int, c int, x boolean, y boolean, z boolean",
    )
    pairs = _pairs()
    names = sorted(pairs)
    columns = [pairs[n][0].alias(f"ours{i}").column() for i, n in enumerate(names)]
    columns += [pairs[n][1].alias(f"theirs{i}") for i, n in enumerate(names)]
    got = rows.select(*columns).collect()
    differ = {
        name: [(r[f"ours{i}"], r[f"theirs{i}"]) for r in got]
        for i, name in enumerate(names)
        if any(r[f"ours{i}"] != r[f"theirs{i}"] for r in got)
    }
    assert differ == {}


def test_only_the_brackets_the_grammar_needs_are_written():
    assert ((a + 1) * 2).sql == "(`a` + 1) * 2"
    assert (a + b * 2).sql == "`a` + `b` * 2"
    assert (a - (b - c)).sql == "`a` - (`b` - `c`)"
    assert ((x & y) | ~z).sql == "`x` AND `y` OR NOT `z`"
    assert (x & (y | z)).sql == "`x` AND (`y` OR `z`)"
    assert ((a == b).isNull()).sql == "(`a` = `b`) IS NULL"
    assert (~(a > 1)).sql == "NOT `a` > 1"
    assert ((a + b)[0]).sql == "(`a` + `b`)[0]"
    assert (
        E.when(x, 1).otherwise(E.when(y, 2).otherwise(3)).sql
        == "CASE WHEN `x` THEN 1 WHEN `y` THEN 2 ELSE 3 END"
    )
    assert E.max(a).over("PARTITION BY `b`")["f"].sql == "(max(`a`) OVER (PARTITION BY `b`))['f']"


def test_a_typed_literal_gives_back_the_value_it_was_made_from_in_order(spark):
    from pyspark.sql.types import ArrayType, BooleanType, MapType, StringType, StructField, StructType

    entry = StructType([StructField("type", StringType()), StructField("codec", StringType())])
    data_type = StructType(
        [
            StructField("columns", MapType(StringType(), entry)),
            StructField("names", ArrayType(StringType())),
            StructField("flag", BooleanType()),
            StructField("none", MapType(StringType(), StringType())),
        ]
    )
    # Entries as map_entries collects them: the order is the value, as a dict from collect loses it.
    columns = [("zeta", {"type": "bigint", "codec": None}), ("alpha", {"type": "binary", "codec": "base64"})]
    value = {"columns": columns, "names": ["it's", None], "flag": True, "none": None}
    row = spark.range(1).select(E.typed_lit(value, data_type).alias("v").column()).collect()[0]
    assert row.v.columns == {"zeta": ("bigint", None), "alpha": ("binary", "base64")}
    ordered = spark.range(1).select(E.map_keys(E.typed_lit(value, data_type)["columns"]).alias("k").column())
    assert ordered.collect()[0].k == ["zeta", "alpha"]
    assert (row.v.names, row.v.flag, row.v.none) == (["it's", None], True, None)

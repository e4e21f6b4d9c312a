"""Column expressions written like PySpark's, sent to Spark as one SQL text each.

Every PySpark column function costs about four JVM round trips (two reflection lookups, the call,
and a release when its Python proxy is collected). A decoder's expressions are thousands of such
calls: a rebuild of the 305-event sample made 20,000 round trips, 1.9 s of a warm 5.2 s run and
more while the JVM is cold. ``Expr`` has the operators and function names of PySpark's ``Column``
and ``functions`` that the decoders and the fold use, builds SQL text in Python, and ``column()``
turns the whole expression into one ``Column`` with one call.

Rules that differ from PySpark's (on purpose, so that the SQL is never ambiguous):
- In module functions a ``str`` argument is a column name, as in PySpark; in operators and methods
  (``e == "c"``, ``e.isin("a")``, ``e.startswith("x")``) it is a string literal. Functions whose
  PySpark signature takes literal parameters (patterns, separators, paths, types) take them as
  Python values here too; anything else that should be a literal goes through ``lit``.
- ``struct`` needs named fields: an ``alias`` or a plain column reference.

The text carries only the parentheses Spark's grammar needs (each ``Expr`` knows how tightly its
top operator binds), and a ``CASE`` in another's ``ELSE`` joins its branches. Redundant brackets
are not free: the first parse of a text in a fresh JVM is most of a cold run's planning, and
ANTLR predicts each bracket by scanning to its match.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

_lambda_names = itertools.count()

# How tightly an expression's top operator binds, loosest first (the order of Spark's grammar).
OR, AND, NOT, PREDICATE, COMPARISON, BIT_OR, BIT_XOR, BIT_AND = range(8)
ADDITIVE, MULTIPLICATIVE, UNARY, ATOM = range(8, 12)
_BINARY = {
    "OR": OR,
    "AND": AND,
    "=": COMPARISON,
    "!=": COMPARISON,
    "<": COMPARISON,
    "<=": COMPARISON,
    ">": COMPARISON,
    ">=": COMPARISON,
    "<=>": COMPARISON,
    "|": BIT_OR,
    "^": BIT_XOR,
    "&": BIT_AND,
    "+": ADDITIVE,
    "-": ADDITIVE,
    "*": MULTIPLICATIVE,
    "/": MULTIPLICATIVE,
    "%": MULTIPLICATIVE,
}


class Expr:
    """A SQL expression (text) with an optional output name and the binding of its top operator
    (``ATOM`` for anything that needs no brackets: names, literals, calls, ``CASE``, bracketed text)."""

    __slots__ = ("sql", "name", "binding")
    __hash__ = None  # ``==`` builds an expression

    def __init__(self, sql: str, name: str | None = None, binding: int = ATOM) -> None:
        self.sql = sql
        self.name = name
        self.binding = binding

    def __repr__(self) -> str:
        return f"Expr({self.sql!r}{', ' + repr(self.name) if self.name else ''})"

    def __bool__(self) -> bool:
        raise TypeError("an Expr has no truth value: use & | ~ instead of and/or/not")

    def column(self) -> Column:
        """The expression as a PySpark ``Column`` (one JVM call), named when it has a name."""
        c = F.expr(self.sql)
        return c.alias(self.name) if self.name else c

    def alias(self, name: str) -> Expr:
        return Expr(self.sql, name, self.binding)

    def over(self, window: str) -> Expr:
        """This aggregate or window function ``OVER (window)`` (bracketed before a subscript)."""
        return Expr(f"{_operand(self, ATOM)} OVER ({window})", binding=UNARY)

    # Operators: the other side is a literal unless it is an Expr.
    def _op(self, op: str, other: Any) -> Expr:
        return _binary(self, op, other)

    def _rop(self, op: str, other: Any) -> Expr:
        return _binary(other, op, self)

    def __eq__(self, other: Any) -> Expr:  # type: ignore[override]
        return self._op("=", other)

    def __ne__(self, other: Any) -> Expr:  # type: ignore[override]
        return self._op("!=", other)

    def __lt__(self, other: Any) -> Expr:
        return self._op("<", other)

    def __le__(self, other: Any) -> Expr:
        return self._op("<=", other)

    def __gt__(self, other: Any) -> Expr:
        return self._op(">", other)

    def __ge__(self, other: Any) -> Expr:
        return self._op(">=", other)

    def __and__(self, other: Any) -> Expr:
        return self._op("AND", other)

    def __rand__(self, other: Any) -> Expr:
        return self._rop("AND", other)

    def __or__(self, other: Any) -> Expr:
        return self._op("OR", other)

    def __ror__(self, other: Any) -> Expr:
        return self._rop("OR", other)

    def __invert__(self) -> Expr:
        return Expr(f"NOT {_operand(self, NOT)}", binding=NOT)

    def __add__(self, other: Any) -> Expr:
        return self._op("+", other)

    def __radd__(self, other: Any) -> Expr:
        return self._rop("+", other)

    def __sub__(self, other: Any) -> Expr:
        return self._op("-", other)

    def __rsub__(self, other: Any) -> Expr:
        return self._rop("-", other)

    def __mul__(self, other: Any) -> Expr:
        return self._op("*", other)

    def __rmul__(self, other: Any) -> Expr:
        return self._rop("*", other)

    def __truediv__(self, other: Any) -> Expr:
        return self._op("/", other)

    def __mod__(self, other: Any) -> Expr:
        return self._op("%", other)

    def __neg__(self) -> Expr:
        return Expr(f"- {_operand(self, UNARY)}", binding=UNARY)

    def bitwiseAND(self, other: Any) -> Expr:  # noqa: N802 (PySpark's name)
        return self._op("&", other)

    def eqNullSafe(self, other: Any) -> Expr:  # noqa: N802
        return self._op("<=>", other)

    def __getitem__(self, key: Any) -> Expr:
        """A struct field, a map value or an array element (0-based), as ``col[key]`` in PySpark."""
        return Expr(f"{_operand(self, ATOM)}[{_operand(key, BIT_OR)}]")

    getItem = __getitem__

    def isNull(self) -> Expr:  # noqa: N802
        return self._predicate("IS NULL")

    def isNotNull(self) -> Expr:  # noqa: N802
        return self._predicate("IS NOT NULL")

    def isin(self, *values: Any) -> Expr:
        """``IN (...)``; false for no values, where SQL has no empty list."""
        if len(values) == 1 and isinstance(values[0], (list, tuple, set)):
            values = tuple(values[0])
        if not values:
            return Expr("false")
        return self._predicate(f"IN ({', '.join(_value(v) for v in values)})")

    def cast(self, data_type: str | DataType) -> Expr:
        return Expr(f"CAST({self.sql} AS {_type(data_type)})")

    def try_cast(self, data_type: str | DataType) -> Expr:
        return Expr(f"TRY_CAST({self.sql} AS {_type(data_type)})")

    def startswith(self, prefix: Any) -> Expr:
        return Expr(f"startswith({self.sql}, {_value(prefix)})")

    def endswith(self, suffix: Any) -> Expr:
        return Expr(f"endswith({self.sql}, {_value(suffix)})")

    def contains(self, part: Any) -> Expr:
        return Expr(f"contains({self.sql}, {_value(part)})")

    def rlike(self, pattern: str) -> Expr:
        return self._predicate(f"RLIKE {_literal(pattern)}")

    def _predicate(self, test: str) -> Expr:
        # A comparison would bind first (``a = b IS NULL`` tests ``a = b``); bracketed for the reader.
        return Expr(f"{_operand(self, BIT_OR)} {test}", binding=PREDICATE)


class When(Expr):
    """``CASE WHEN``: ``when(c, v).when(c2, v2).otherwise(o)``; without ``otherwise`` the rest is NULL."""

    __slots__ = ("cases", "default")

    def __init__(self, cases: tuple[tuple[str, str], ...], default: str | None = None) -> None:
        self.cases = cases
        self.default = default
        branches = " ".join(f"WHEN {c} THEN {v}" for c, v in cases)
        super().__init__(f"CASE {branches}{'' if default is None else ' ELSE ' + default} END")

    def when(self, condition: Any, value: Any) -> When:
        if self.default is not None:
            raise ValueError("when() after otherwise()")
        return When((*self.cases, (_value(condition), _value(value))))

    def otherwise(self, value: Any) -> Expr:
        if isinstance(value, When):  # ELSE CASE WHEN ... END: the same as more branches
            return When((*self.cases, *value.cases), value.default)
        return When(self.cases, _value(value))


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if -(2**31) <= value < 2**31 else f"{value}L"
    if isinstance(value, float):
        return f"{value!r}D"
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace("'", "\\'")
        escaped = "".join(c if c >= " " else f"\\u{ord(c):04x}" for c in escaped)
        return "'" + escaped + "'"
    if isinstance(value, (list, tuple)):
        return f"array({', '.join(_literal(v) for v in value)})"
    raise TypeError(f"no SQL literal for {type(value).__name__}")


def _value(value: Any) -> str:
    """An operand: an Expr's SQL, anything else a literal."""
    if isinstance(value, Expr):
        return value.sql
    if isinstance(value, Column):
        raise TypeError("a PySpark Column cannot go into SQL text; build it with sqlexpr")
    return _literal(value)


def _binding(value: Any) -> int:
    if isinstance(value, Expr):
        return value.binding
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        return UNARY  # -5 is the minus operator applied to 5
    return ATOM


def _operand(value: Any, at_least: int) -> str:
    """``value``'s SQL, bracketed unless its top operator binds at least as tightly as ``at_least``."""
    sql = _value(value)
    return sql if _binding(value) >= at_least else f"({sql})"


def _binary(left: Any, op: str, right: Any) -> Expr:
    """``left op right`` grouped as written: left-associative, so an operand on the right of the
    same binding is bracketed; comparisons bracket both sides (``a = b = c`` reads badly)."""
    binding = _BINARY[op]
    left_at_least = binding + 1 if binding == COMPARISON else binding
    return Expr(f"{_operand(left, left_at_least)} {op} {_operand(right, binding + 1)}", binding=binding)


def _arg(value: Any) -> str:
    """A function argument: an Expr's SQL, a str a column name, a callable a lambda, else a literal."""
    if isinstance(value, str):
        return col(value).sql
    if callable(value) and not isinstance(value, Expr):
        return _lambda(value)
    return _value(value)


def _type(data_type: str | DataType) -> str:
    """A type as SQL: strings as given, DataTypes as DDL with quoted field names."""
    if isinstance(data_type, str):
        return data_type
    if isinstance(data_type, StructType):
        return f"struct<{', '.join(f'{_quote(f.name)}: {_type(f.dataType)}' for f in data_type.fields)}>"
    if isinstance(data_type, ArrayType):
        return f"array<{_type(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"map<{_type(data_type.keyType)}, {_type(data_type.valueType)}>"
    return data_type.simpleString()


def _lambda(body: Callable[..., Expr]) -> str:
    arity = len(inspect.signature(body).parameters)
    names = [f"lv{next(_lambda_names)}" for _ in range(arity)]
    result = body(*[Expr(n) for n in names])
    params = names[0] if arity == 1 else f"({', '.join(names)})"
    return f"{params} -> {_value(result)}"


def call(function: str, *args: Any) -> Expr:
    """``function(args...)``, arguments as ``_arg`` reads them."""
    return Expr(f"{function}({', '.join(_arg(a) for a in args)})")


def col(name: str) -> Expr:
    """A column, or a nested field with dots (``j.payload``), as ``F.col``."""
    return Expr(".".join(_quote(part) for part in name.split(".")), name.split(".")[-1])


def lit(value: Any) -> Expr:
    return Expr(_literal(value))


def expr(sql: str) -> Expr:
    return Expr(f"({sql})")


def when(condition: Any, value: Any) -> When:
    return When(((_value(condition), _value(value)),))


def struct(*fields: Expr | str) -> Expr:
    parts = []
    for f in fields:
        e = col(f) if isinstance(f, str) else f
        if not e.name:
            raise ValueError(f"struct field without a name: {e.sql}")
        parts += [_literal(e.name), e.sql]
    return Expr(f"named_struct({', '.join(parts)})")


def typed_lit(value: Any, data_type: DataType) -> Expr:
    """A literal of ``data_type`` from a value as ``collect`` returns it (structs as Rows or dicts,
    arrays as lists, maps as dicts or, to keep their order, lists of key-value pairs such as
    ``map_entries`` gives: a collected dict has lost it): a value computed once on the driver,
    which Spark can then fold into the expressions that read it."""
    return Expr(_nested_literal(value, data_type))


def _nested_literal(value: Any, data_type: DataType) -> str:
    if value is None:
        return f"CAST(NULL AS {_type(data_type)})"
    if isinstance(data_type, MapType):
        entries = [
            part
            for k, v in (value.items() if isinstance(value, dict) else value)
            for part in (_nested_literal(k, data_type.keyType), _nested_literal(v, data_type.valueType))
        ]
        return f"CAST(map({', '.join(entries)}) AS {_type(data_type)})"
    if isinstance(data_type, StructType):
        fields = [
            f"{_literal(f.name)}, {_nested_literal(value[f.name], f.dataType)}" for f in data_type.fields
        ]
        return f"named_struct({', '.join(fields)})"
    if isinstance(data_type, ArrayType):
        items = [_nested_literal(v, data_type.elementType) for v in value]
        return f"CAST(array({', '.join(items)}) AS {_type(data_type)})"
    return f"CAST({_literal(value)} AS {_type(data_type)})"


def null(data_type: str | DataType) -> Expr:
    """A typed NULL (``F.lit(None).cast(t)``)."""
    return Expr(f"CAST(NULL AS {_type(data_type)})")


def columns(*exprs: Expr | Iterable[Expr]) -> list[Column]:
    """PySpark Columns for a select list."""
    out = []
    for e in exprs:
        out.extend(x.column() for x in (e if isinstance(e, (list, tuple)) else [e]))
    return out


# Functions whose PySpark signature takes literal parameters: the same here.
def concat_ws(separator: str, *cols: Any) -> Expr:
    return call("concat_ws", lit(separator), *cols)


def regexp_extract(text: Any, pattern: str, index: int) -> Expr:
    return call("regexp_extract", text, lit(pattern), index)


def regexp_extract_all(text: Any, pattern: str, index: int = 1) -> Expr:
    return call("regexp_extract_all", text, lit(pattern), index)


def regexp_replace(text: Any, pattern: str, replacement: str) -> Expr:
    return call("regexp_replace", text, lit(pattern), lit(replacement))


def split(text: Any, pattern: str, limit: int = -1) -> Expr:
    return call("split", text, lit(pattern), limit)


def date_format(value: Any, fmt: str) -> Expr:
    return call("date_format", value, lit(fmt))


def lpad(text: Any, length: Any, pad: str) -> Expr:
    return call("lpad", text, length, lit(pad))


def translate(text: Any, matching: str, replace: str) -> Expr:
    return call("translate", text, lit(matching), lit(replace))


def format_string(fmt: str, *cols: Any) -> Expr:
    return call("format_string", lit(fmt), *cols)


def get_json_object(text: Any, path: str) -> Expr:
    return call("get_json_object", text, lit(path))


def variant_get(v: Any, path: str, data_type: str = "variant") -> Expr:
    return call("variant_get", v, lit(path), lit(data_type))


def try_variant_get(v: Any, path: str, data_type: str = "variant") -> Expr:
    return call("try_variant_get", v, lit(path), lit(data_type))


def array_join(array: Any, delimiter: str) -> Expr:
    return call("array_join", array, lit(delimiter))


def array_contains(array: Any, value: Any) -> Expr:
    return Expr(f"array_contains({_arg(array)}, {_value(value)})")


def map_contains_key(map_: Any, key: Any) -> Expr:
    return Expr(f"map_contains_key({_arg(map_)}, {_value(key)})")


def element_at(container: Any, key: Any) -> Expr:
    return Expr(f"element_at({_arg(container)}, {_value(key)})")


def try_element_at(container: Any, key: Any) -> Expr:
    return Expr(f"try_element_at({_arg(container)}, {_value(key)})")


def from_json(text: Any, schema: str | DataType, options: dict[str, str] | None = None) -> Expr:
    ddl = _type(schema)
    opts = ""
    if options:
        opts = ", map(" + ", ".join(f"{_literal(k)}, {_literal(v)}" for k, v in options.items()) + ")"
    return Expr(f"from_json({_arg(text)}, {_literal(ddl)}{opts})")


def try_to_binary(text: Any, fmt: str) -> Expr:
    return call("try_to_binary", text, lit(fmt))


def lookup(table: Mapping[str, str], key: Any) -> Expr:
    """``table[key]`` as one map literal (null for keys it lacks), not a chain of ``when``."""
    return try_element_at(call("map", *[lit(x) for pair in table.items() for x in pair]), key)


def let(value: Any, body: Callable[[Expr], Expr]) -> Expr:
    """Bind ``value`` once and use it in ``body`` (a lambda), instead of copying its expression."""
    return call("transform", call("array", value), body)[0]


def __getattr__(function: str) -> Callable[..., Expr]:
    """Any other Spark SQL function by its name: ``sqlexpr.coalesce(a, b)`` is ``coalesce(a, b)``."""
    if function.startswith("__"):
        raise AttributeError(function)
    return lambda *args: call(function, *args)

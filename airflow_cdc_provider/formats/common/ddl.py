"""Column changes read from the text of a DDL statement.

Several formats land DDL as SQL text beside the row changes (Canal's ``sql``, DataWorks' ``ddl.text``).
The engine never applies DDL, but two of its effects change a snapshot: a column added by
``ALTER TABLE ... ADD`` belongs to every snapshot taken after it (null where never set), and a column
removed by ``... DROP`` disappears from it. Decoders put the first on the ignored DDL event's ``types``
and the second on its ``before`` image (the dropped columns, as nulls); ``replay.resolve`` does the rest.
"""

from __future__ import annotations

from airflow_cdc_provider.formats.events import IMAGE_TYPE
from airflow_cdc_provider.spark import sqlexpr as E
from airflow_cdc_provider.spark.sqlexpr import Expr

_NOT_A_COLUMN = r"(?!(?:INDEX|KEY|PRIMARY|UNIQUE|CONSTRAINT|FOREIGN|FULLTEXT|SPATIAL|PARTITION|CHECK)\b)"
_ADD_COLUMN = (
    r"(?i)\bADD\s+(?:COLUMN\s+)?"
    + _NOT_A_COLUMN
    + r"`?([A-Za-z0-9_$]+)`?\s+([A-Za-z]+(?:\s+precision)?(?:\s*\([^)]*\))?(?:\s+unsigned)?)"
)
_DROP_COLUMN = r"(?i)\bDROP\s+(?:COLUMN\s+)?" + _NOT_A_COLUMN + r"`?([A-Za-z0-9_$]+)`?"


def added_columns(sql: Expr) -> Expr:
    """``map<column, SQL type text>`` of the columns an ``ALTER TABLE ... ADD`` adds (null when none)."""
    names = E.regexp_extract_all(sql, _ADD_COLUMN, 1)
    types = E.regexp_extract_all(sql, _ADD_COLUMN, 2)
    return E.when(E.size(names) > 0, E.map_from_arrays(names, types))


def dropped_columns(sql: Expr) -> Expr:
    """The columns an ``ALTER TABLE ... DROP`` removes, as an image of nulls (null when none)."""
    names = E.regexp_extract_all(sql, _DROP_COLUMN, 1)
    nulls = E.transform(names, lambda n: E.null("variant"))
    return E.when(E.size(names) > 0, E.map_from_arrays(names, nulls).cast(IMAGE_TYPE))

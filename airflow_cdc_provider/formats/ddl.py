"""Column changes read from the text of a DDL statement.

Several formats land DDL as SQL text beside the row changes (Canal's ``sql``, DataWorks' ``ddl.text``).
The engine never applies DDL, but two of its effects change a snapshot: a column added by
``ALTER TABLE ... ADD`` belongs to every snapshot taken after it (null where never set), and a column
removed by ``... DROP`` disappears from it. Decoders put the first on the ignored DDL event's ``types``
and the second on its ``before`` image (the dropped columns, as nulls); ``replay.resolve`` does the rest.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from airflow_cdc_provider.formats.events import IMAGE_TYPE

_NOT_A_COLUMN = r"(?!(?:INDEX|KEY|PRIMARY|UNIQUE|CONSTRAINT|FOREIGN|FULLTEXT|SPATIAL|PARTITION|CHECK)\b)"
_ADD_COLUMN = (
    r"(?i)\bADD\s+(?:COLUMN\s+)?"
    + _NOT_A_COLUMN
    + r"`?([A-Za-z0-9_$]+)`?\s+([A-Za-z]+(?:\s+precision)?(?:\s*\([^)]*\))?(?:\s+unsigned)?)"
)
_DROP_COLUMN = r"(?i)\bDROP\s+(?:COLUMN\s+)?" + _NOT_A_COLUMN + r"`?([A-Za-z0-9_$]+)`?"


def added_columns(sql: Column) -> Column:
    """``map<column, SQL type text>`` of the columns an ``ALTER TABLE ... ADD`` adds (null when none)."""
    names = F.regexp_extract_all(sql, F.lit(_ADD_COLUMN), 1)
    types = F.regexp_extract_all(sql, F.lit(_ADD_COLUMN), 2)
    return F.when(F.size(names) > 0, F.map_from_arrays(names, types))


def dropped_columns(sql: Column) -> Column:
    """The columns an ``ALTER TABLE ... DROP`` removes, as an image of nulls (null when none)."""
    names = F.regexp_extract_all(sql, F.lit(_DROP_COLUMN), 1)
    nulls = F.transform(names, lambda n: F.lit(None).cast("variant"))
    return F.when(F.size(names) > 0, F.map_from_arrays(names, nulls).cast(IMAGE_TYPE))

"""Rows a Python worker builds in ``mapInArrow``, gathered column by column and sent back as Arrow batches.

Imported inside Spark's Python workers: it needs only pyarrow, never the JVM.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa


class ArrowRows:
    """Output rows of a ``mapInArrow`` worker gathered column by column, flushed as one Arrow batch."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._data: dict[str, list[Any]] = {name: [] for name in schema.names}

    def __len__(self) -> int:
        return len(self._data[self.schema.names[0]])

    def append(self, row: dict[str, Any]) -> None:
        for name, values in self._data.items():
            values.append(row.get(name))

    def flush(self) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_pydict(self._data, schema=self.schema)
        self._data = {name: [] for name in self.schema.names}
        return batch

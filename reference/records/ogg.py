"""Oracle GoldenGate JSON records."""

from __future__ import annotations

import json

T_TEXT = "2024-09-02 08:00:00.000000"


def rec(
    op_type: str | None,
    *,
    after=None,
    before=None,
    table: str | None = "OGG.T",
    op_ts: str | None = T_TEXT,
    pos: str | int | None = 1,
    pk=("id",),
    **extra,
) -> str:
    """One GoldenGate JSON record as a line (test input built from literals); an int ``pos`` is zero-padded."""
    record = {
        "table": table,
        "op_type": op_type,
        "op_ts": op_ts,
        "current_ts": "2024-09-02T08:00:01.000000",
        "pos": f"{pos:020d}" if isinstance(pos, int) else pos,
        "primary_keys": list(pk) if pk is not None else None,
        "before": before,
        "after": after,
        **extra,
    }
    return json.dumps({k: v for k, v in record.items() if v is not None})

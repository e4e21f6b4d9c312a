"""Maxwell records."""

from __future__ import annotations

import json

T = 1_725_264_000  # 2024-09-02T08:00:00Z, in seconds as Maxwell writes ts


def rec(
    type_: str | None,
    data=None,
    *,
    old=None,
    database="db",
    table="t",
    ts: int | str | None = T,
    xid: int | None = None,
    xoffset: int | None = None,
    commit: bool | None = None,
    position: str | None = None,
    pk=("id",),
    **extra,
) -> str:
    """One Maxwell record as a JSON line (test input built from literals)."""
    record = {
        "database": database,
        "table": table,
        "type": type_,
        "ts": ts,
        "xid": xid,
        "xoffset": xoffset,
        "commit": commit,
        "position": position,
        "data": data,
        "old": old,
        "primary_key_columns": list(pk) if pk is not None else None,
        **extra,
    }
    return json.dumps({k: v for k, v in record.items() if v is not None})

"""Shareplex JSON records."""

from __future__ import annotations

import json


def rec(
    op: str,
    data=None,
    key=None,
    *,
    table="S.T",
    time="2024-01-01T00:00:00",
    scn=100,
    trans="1.2.3",
    seq=1,
    size=None,
    rowid=None,
    **meta,
) -> str:
    """One Shareplex record as a JSON line (test input built from literals)."""
    m = {
        "time": time,
        "op": op,
        "scn": scn,
        "trans": trans,
        "seq": seq,
        "size": size,
        "table": table,
        "rowid": rowid,
        **meta,
    }
    record = {"meta": {k: v for k, v in m.items() if v is not None}}
    if data is not None:
        record["data"] = data
    if key is not None:
        record["key"] = key
    return json.dumps(record)

"""Canal JSON messages."""

from __future__ import annotations

import json


def msg(
    type_: str, data, *, old=None, table="t", es=1000, id_=1, mysql=None, pk=("id",), db="db", **extra
) -> str:
    """One Canal message as a JSON line (test input built from literals)."""
    record = {
        "data": data,
        "database": db,
        "es": es,
        "id": id_,
        "isDdl": False,
        "mysqlType": mysql if mysql is not None else {"id": "int(11)", "name": "varchar(20)"},
        "old": old,
        "pkNames": list(pk) if pk is not None else None,
        "sql": "",
        "table": table,
        "ts": es + 5 if isinstance(es, int) else es,
        "type": type_,
    }
    record.update(extra)
    return json.dumps({k: v for k, v in record.items() if v is not None or k in ("data", "old")})

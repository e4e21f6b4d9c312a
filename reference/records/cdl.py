"""Huawei CDL JSON 1.0 messages, built from the seed sample."""

from __future__ import annotations

import json
from typing import Any

# Seed 001 (Huawei MRS CDL), "A sample in CDL JSON format", verbatim.
SEED_CDL_1_0 = '{"schema":{"type":"struct","fields":[{"type":"string","optional":false,"field":"DATA_STORE"},{"type":"string","optional":false,"field":"SEG_OWNER"},{"type":"string","optional":false,"field":"TABLE_NAME"},{"type":"int64","optional":false,"name":"org.apache.kafka.connect.data.Timestamp","version":1,"field":"TIMESTAMP"},{"type":"string","optional":false,"field":"OPERATION"},{"type":"string","optional":true,"field":"LOB_COLUMNS"},{"type":"struct","fields":[{"type":"array","items":{"type":"struct","fields":[{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"value"}],"optional":false},"optional":false,"field":"properties"}],"optional":false,"name":"transaction","field":"transaction"},{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":true,"name":"unique","field":"unique"},{"type":"struct","fields":[{"type":"int64","optional":true,"field":"count1"},{"type":"int32","optional":false,"field":"id"},{"type":"int64","optional":true,"name":"org.apache.kafka.connect.data.Timestamp","version":1,"field":"time1"},{"type":"string","optional":true,"name":"com.xxx.cdc.data.Decimal","field":"decimalNum"}],"optional":true,"name":"data","field":"data"},{"type":"struct","fields":[{"type":"int64","optional":true,"field":"count1"},{"type":"int32","optional":false,"field":"id"},{"type":"int64","optional":true,"name":"org.apache.kafka.connect.data.Timestamp","version":1,"field":"time1"},{"type":"string","optional":true,"name":"com.xxx.cdc.data.Decimal","field":"decimalNum"}],"optional":true,"name":"before","field":"before"},{"type":"string","optional":false,"field":"message_version"},{"type":"string","optional":false,"field":"message_type"},{"type":"string","optional":true,"field":"HEARTBEAT_IDENTIFIER"}],"optional":false,"name":"public.ct_pg2hudi"},"payload":{"DATA_STORE":"POSTGRESQL","SEG_OWNER":"public","TABLE_NAME":"ct_pg2hudi","TIMESTAMP":1707047996013,"OPERATION":"INSERT","LOB_COLUMNS":null,"transaction":{"properties":[{"name":"lsn","value":163955221008},{"name":"txId","value":57227595}]},"unique":{"id":34},"data":{"count1":13,"id":34,"time1":null,"decimalNum":null},"before":null,"message_version":"1.0","message_type":"0","HEARTBEAT_IDENTIFIER":"279fb050-0143-45c1-b184-50bc48c2461c"}}'  # noqa: E501

T0 = 1707047996013


def change(
    operation: str | None,
    data: Any,
    before: Any = None,
    *,
    lsn: int,
    tx: int = 57227595,
    ms: int = T0,
    unique: Any = "from-row",
    schema: bool = True,
    **payload: Any,
) -> dict[str, Any]:
    """A CDL 1.0 message built from the seed sample, with its schema block or ``"schema": {}``."""
    msg = json.loads(SEED_CDL_1_0)
    p = msg["payload"]
    row = data if isinstance(data, dict) else before if isinstance(before, dict) else {}
    p.update(
        TIMESTAMP=ms,
        data=data,
        before=before,
        unique={"id": row.get("id")} if unique == "from-row" else unique,
        transaction={"properties": [{"name": "lsn", "value": lsn}, {"name": "txId", "value": tx}]},
    )
    if operation is None:
        del p["OPERATION"]
    else:
        p["OPERATION"] = operation
    p.update(payload)
    if not schema:
        msg["schema"] = {}
    return msg

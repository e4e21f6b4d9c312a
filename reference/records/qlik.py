"""Qlik Replicate JSON messages: the MD (table structure) and DT (row change) envelopes."""

from __future__ import annotations

from typing import Any

# Columns of dbo.CUSTOMERS as an MD message lists them: name -> (ordinal, type, precision, scale, pk position).
CUSTOMERS = {
    "ID": (1, "INT4", 10, 0, 1),
    "NAME": (2, "WSTRING", 0, 0, 0),
    "BALANCE": (3, "NUMERIC", 10, 2, 0),
    "ACTIVE": (4, "BOOLEAN", 0, 0, 0),
    "BORN": (5, "DATE", 0, 0, 0),
    "UPDATED": (6, "DATETIME", 0, 0, 0),
    "PHOTO": (7, "BYTES", 0, 0, 0),
    "SCORE": (8, "REAL8", 0, 0, 0),
    "VISITS": (9, "UINT8", 0, 0, 0),
}

ALL_COLUMNS = "FF01"  # little-endian: byte 0 = ordinals 1-8, byte 1 bit 0 = ordinal 9


def md(
    table: str = "CUSTOMERS",
    columns: dict[str, tuple[int, str, int, int, int]] = CUSTOMERS,
    *,
    schema: str = "dbo",
    schema_id: str = "md-customers-1",
    version: int = 1,
    at: str = "2024-09-01T00:00:00.000",
) -> dict[str, Any]:
    table_columns = {
        name: {"ordinal": o, "type": t, "length": 0, "precision": p, "scale": s, "primaryKeyPosition": k}
        for name, (o, t, p, s, k) in columns.items()
    }
    return {
        "magic": "atMSG",
        "type": "MD",
        "headers": None,
        "messageSchemaId": None,
        "messageSchema": None,
        "message": {
            "schemaId": schema_id,
            "lineage": {
                "server": "replicate-01",
                "task": "crm-to-kafka",
                "schema": schema,
                "table": table,
                "tableVersion": version,
                "timestamp": at,
            },
            "tableStructure": {"tableColumns": table_columns},
            "dataSchema": '{"type":"record","name":"DataRecord","fields":[]}',
        },
    }


def dt_msg(
    operation: str | None,
    data: Any,
    before: Any = None,
    *,
    seq: str = "",
    at: str = "",
    mask: str | None = ALL_COLUMNS,
    tx: str = "",
    last: bool = True,
    schema_id: str | None = None,
    schema: str | None = None,
    table: str | None = None,
    **envelope: Any,
) -> dict[str, Any]:
    """A DT message; ``schema``/``table`` go inside ``message`` (the seed's layout), ``envelope`` beside it."""
    headers: dict[str, Any] = {
        "changeSequence": seq,
        "timestamp": at,
        "streamPosition": "",
        "transactionId": tx,
        "changeMask": mask,
        "columnMask": mask,
        "transactionEventCounter": 1,
        "transactionLastEvent": last,
    }
    if operation is not None:
        headers["operation"] = operation
    message: dict[str, Any] = {"data": data, "beforeData": before, "headers": headers}
    if table is not None:
        message.update(schema=schema, table=table)
    return {
        "magic": "atMSG",
        "type": "DT",
        "headers": None,
        "messageSchemaId": schema_id,
        "messageSchema": None,
        "message": message,
        **envelope,
    }

"""DataHub BLOB messages in the seed's layout."""

from __future__ import annotations


def message(
    op: str,
    *,
    seq: str | int | None,
    event_ms: int | None = 1700000000000,
    table: str = "t",
    before: object = None,
    after: object = None,
    columns: dict[str, str] | None = None,
    keys: list[str] | None = ("id",),
    db: str = "db",
    **payload,
) -> dict:
    """A BLOB message in the seed's layout; ``before``/``after`` dicts are wrapped in ``dataColumn``."""
    columns = columns or {"id": "LONG", "name": "STRING"}

    def wrap(image: object) -> object:
        return {"dataColumn": image} if isinstance(image, dict) else image

    body = {
        "op": op,
        "before": wrap(before),
        "after": wrap(after),
        "sequenceId": seq,
        "timestamp": {"eventTime": event_ms, "systemTime": (event_ms or 0) + 5},
        **payload,
    }
    schema = {
        "dataColumn": [{"name": n, "type": t} for n, t in columns.items()],
        "source": {"dbType": "MySQL", "dbName": db, "tableName": table},
    }
    if keys is not None:
        schema["primaryKey"] = list(keys)
    return {"schema": schema, "payload": body, "version": "0.0.1"}

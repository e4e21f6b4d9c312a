"""The reference fold: what a rebuild as of T must hold, by the replay rules of docs/design.md, in plain Python.

Written apart from the replay engine (no Spark, nothing from ``airflow_cdc_provider``) so that the
tests, ``scripts/make_sample_data.py`` and the benchmarks check the engine against something it
did not compute itself. Its input is the row changes already read from the landing, one
``Event`` each; reading records (tombstones, tables not selected, quarantine) is the caller's.

The rules it applies (docs/design.md, "Replay semantics"):

- an event applies when its event time is at or before AS OF (an event without one applies at
  every AS OF); the others are counted in ``after_as_of``;
- an event landed again (the same ``identity`` as one before it) is counted in ``duplicates`` and
  applied once;
- per table, the applied events are replayed in position order (``order``; ties keep the order
  the events were given in);
- an insert makes the row its image (over an existing row too);
- an update writes its image under the image's key: a full image replaces the row (a column it
  lacks is gone), a partial image overlays the row's columns. An update whose ``before`` names
  another key moves the row: the old key's row is removed and, under a partial image, carried to
  the new key with the image on top. An update of a key without a row creates the row and is
  counted in ``updates_of_unknown_key``;
- a delete removes the row of its key (``before``, else ``after``); a delete of a key without a row
  changes nothing and is counted in ``deletes_of_unknown_key``;
- a truncate empties its table; rows written after it stay.

    folded = fold(events, as_of_ms, key=("id",))
    folded.rows("db.customers")  # the table's rows, every column, sorted
    folded.counts["db.customers"]  # inserts, updates, deletes, truncates, *_of_unknown_key
    folded.events  # applied, after_as_of, duplicates
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

INSERT, UPDATE, DELETE, TRUNCATE = "insert", "update", "delete", "truncate"
OPS = (INSERT, UPDATE, DELETE, TRUNCATE)


@dataclass(frozen=True)
class Event:
    """One row change as landed."""

    op: str  # INSERT, UPDATE, DELETE or TRUNCATE
    ms: int | None  # event time (epoch ms), compared with AS OF; None: applies at every AS OF
    order: tuple = ()  # position order: log position, event time, landing place, compared as tuples
    table: str = ""
    # The row as it was before the change, at least its key: the key an update or delete finds.
    # None: the key of ``after``.
    before: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None  # the image an insert or update writes
    partial: bool = False  # an update image that carries only the key and the columns it sets
    # The same record landed twice has the same identity; None: never a duplicate.
    identity: Hashable | None = None

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"op must be one of {', '.join(OPS)}, not {self.op!r}")


def _by_json(row: Mapping[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, default=str)


@dataclass
class Folded:
    """The fold's result: rows by table and key, counts by table, and the events' accounting."""

    key: tuple[str, ...]
    tables: dict[str, dict[tuple, dict[str, Any]]] = field(default_factory=dict)  # table -> key -> row
    # table -> inserts, updates, deletes, truncates, updates_of_unknown_key, deletes_of_unknown_key
    counts: dict[str, Counter] = field(default_factory=dict)
    last_event_ms: dict[str, int] = field(default_factory=dict)  # table -> latest applied event time
    events: Counter = field(default_factory=Counter)  # applied, after_as_of, duplicates

    def rows(
        self, table: str = "", *, order: Callable[[dict[str, Any]], Any] | None = None
    ) -> list[dict[str, Any]]:
        """The table's rows, each with every column the table's rows have (null where a row has none,
        columns in name order), sorted by ``order`` (default: the row as JSON with sorted keys)."""
        current = self.tables.get(table, {})
        columns = sorted({c for row in current.values() for c in row})
        rows = [{c: row.get(c) for c in columns} for row in current.values()]
        return sorted(rows, key=order or _by_json)


def fold(events: Iterable[Event], as_of_ms: int, key: Sequence[str]) -> Folded:
    """Apply ``events`` as of ``as_of_ms`` (epoch ms); ``key``: the key columns of every table."""
    key = tuple(key)
    out = Folded(key)
    seen: set[Hashable] = set()
    applied: list[Event] = []
    for event in events:
        if event.identity is not None:
            if event.identity in seen:
                out.events["duplicates"] += 1
                continue
            seen.add(event.identity)
        if event.ms is not None and event.ms > as_of_ms:
            out.events["after_as_of"] += 1
            continue
        out.events["applied"] += 1
        applied.append(event)

    def key_of(image: Mapping[str, Any]) -> tuple:
        return tuple(image[c] for c in key)

    for event in sorted(applied, key=lambda e: e.order):
        rows = out.tables.setdefault(event.table, {})
        counts = out.counts.setdefault(event.table, Counter())
        if event.ms is not None:
            out.last_event_ms[event.table] = max(out.last_event_ms.get(event.table, event.ms), event.ms)
        if event.op == TRUNCATE:
            counts["truncates"] += 1
            rows.clear()
        elif event.op == INSERT:
            counts["inserts"] += 1
            rows[key_of(event.after)] = dict(event.after)
        elif event.op == UPDATE:
            counts["updates"] += 1
            new = key_of(event.after)
            old = key_of(event.before) if event.before is not None else new
            found = rows.get(old)
            counts["updates_of_unknown_key"] += found is None
            if old != new:
                rows.pop(old, None)
            rows[new] = {**(found or {}), **event.after} if event.partial else dict(event.after)
        else:
            gone = key_of(event.before if event.before is not None else event.after)
            if gone in rows:
                counts["deletes"] += 1
                del rows[gone]
            else:
                counts["deletes_of_unknown_key"] += 1
    return out

"""The metrics of a run: the group counts of its one aggregation, as ``_cdc_metrics.json`` reports them.

Takes the run's spec, output, group counts (``group_counts``), table paths and ``Input``. Gives the
metrics object the write stage writes beside the tables (and a history's, with its versions). The
object's layout is the job's contract: docs/contract.md, "``_cdc_metrics.json``".
"""

from __future__ import annotations

from datetime import datetime, timezone

from pyspark.sql import Row

from airflow_cdc_provider.contract.as_of import format_as_of
from airflow_cdc_provider.contract.metrics import QUARANTINE_DIR
from airflow_cdc_provider.contract.tables import TableNameError, split_qualified
from airflow_cdc_provider.replay import columns as C
from airflow_cdc_provider.replay.group_counts import quarantine_reasons
from airflow_cdc_provider.replay.output import OutputTarget
from airflow_cdc_provider.replay.read import Input
from airflow_cdc_provider.replay.spec import SnapshotSpec


def table_parts(name: str) -> tuple[str, ...]:
    """The parts of a table's qualified name; a name a user gave that does not parse is one part."""
    try:
        return split_qualified(name)
    except TableNameError:
        return (name,)


def _zero_table() -> dict:
    """A table's entry before its groups are counted in."""
    return {
        "rows": 0,
        "path": None,
        "parts": [],
        "inserts": 0,
        "updates": 0,
        "deletes": 0,
        "last_event_ms": None,
        "updates_of_unknown_key": 0,
        "deletes_of_unknown_key": 0,
        "truncates": 0,
        "unavailable_values": {},
        "events": {
            "read": 0,
            "applied": 0,
            "after_as_of": 0,
            "ignored": 0,
            "duplicates": 0,
            "quarantined": 0,
        },
    }


def _count_groups(groups: list[Row], tables: dict[str, dict]) -> tuple[dict[str, int], dict[str, int]]:
    """Add each group's counts to its table's entry in ``tables``; return the events' totals and
    the ignored records' counts by reason."""
    totals = {"read": 0, "applied": 0, "after_as_of": 0, "ignored": 0, "duplicates": 0, "quarantined": 0}
    ignored_reasons: dict[str, int] = {}
    for g in groups:
        tag, n = g[C.TAG], int(g[C.EVENTS] or 0)
        after = int(g[C.EVENTS_AFTER_AS_OF] or 0)
        entry = {
            "read": n,
            "applied": 0,
            "after_as_of": after,
            "ignored": 0,
            "duplicates": 0,
            "quarantined": 0,
        }
        t = tables.get(g["table"]) if g["table"] in tables else None
        if tag == C.TAG_ROW:
            applied = sum(int(g[k] or 0) for k in (C.INSERTS, C.UPDATES, C.DELETES, C.DELETES_UNKNOWN))
            entry.update(applied=applied, duplicates=int(g[C.DUPLICATES] or 0))
            if t is not None:
                _count_rows(g, t)
        elif tag == C.TAG_TRUNCATE:
            entry.update(applied=n - after)
            if t is not None:
                t["truncates"] += n - after
        elif tag == C.TAG_IGNORED:
            entry.update(ignored=n)
            ignored_reasons[g["reason"]] = ignored_reasons.get(g["reason"], 0) + n
        elif tag == C.TAG_QUARANTINED:
            entry.update(quarantined=n)
        for k, v in entry.items():
            totals[k] += v
            if t is not None:
                t["events"][k] += v
    return totals, ignored_reasons


def _count_rows(g: Row, t: dict) -> None:
    """A row group's counts added to its table's entry ``t``."""
    t["rows"] += int(g[C.ROWS] or 0)
    t["inserts"] += int(g[C.INSERTS] or 0)
    t["updates"] += int(g[C.UPDATES] or 0)
    t["deletes"] += int(g[C.DELETES] or 0)
    t["updates_of_unknown_key"] += int(g[C.UPDATES_UNKNOWN] or 0)
    t["deletes_of_unknown_key"] += int(g[C.DELETES_UNKNOWN] or 0)
    if g[C.LAST_EVENT_MS] is not None:
        t["last_event_ms"] = max(t["last_event_ms"] or g[C.LAST_EVENT_MS], g[C.LAST_EVENT_MS])


def _finish_tables(
    tables: dict[str, dict],
    table_paths: dict[str, str],
    read: Input,
    unavailable: dict[str, dict[str, int]] | None,
) -> None:
    """Each table's path, name parts and unavailable values; its newest event also from the base."""
    for name, t in tables.items():
        t["path"] = table_paths[name]
        t["parts"] = list(table_parts(name))
        t["unavailable_values"] = dict((unavailable or {}).get(name, {}))
        earlier = read.base.tables.get(name, {}).get("last_event_ms") if read.base is not None else None
        if earlier is not None:
            t["last_event_ms"] = max(t["last_event_ms"] or earlier, earlier)


def build_metrics(
    spec: SnapshotSpec,
    target: OutputTarget,
    groups: list[Row],
    table_paths: dict[str, str],
    read: Input,
    quarantine_count: int,
    unavailable: dict[str, dict[str, int]] | None = None,
) -> dict:
    """The metrics object; ``unavailable`` is ``unavailable_values`` of the run's rows."""
    tables: dict[str, dict] = {t: _zero_table() for t in table_paths}
    totals, ignored_reasons = _count_groups(groups, tables)
    _finish_tables(tables, table_paths, read, unavailable)
    files, skipped = read.files, [f for group in read.skipped.values() for f in group]
    metrics = {
        "format": spec.source_format,
        "as_of": format_as_of(spec.as_of_ms),
        "as_of_ms": spec.as_of_ms,
        "output": target.uri,
        "rows": sum(t["rows"] for t in tables.values()),
        "events": totals,
        "tables": tables,
        "ignored": dict(sorted(ignored_reasons.items())),
        "quarantine": {
            "records": quarantine_count,
            "path": target.final_uri(QUARANTINE_DIR) if quarantine_count else None,
            "reasons": quarantine_reasons(groups),
        },
        "files": {
            "read": len(files),
            "bytes": sum(f.size for f in files),
            "skipped": len(skipped),
            "bytes_skipped": sum(f.size for f in skipped),
            "skipped_because": {why: len(group) for why, group in read.skipped.items() if group},
        },
        # Records whose log position could not be read, ordered by event time and place instead.
        "ordering": {"unreadable_log_position": sum(int(g[C.UNPOSITIONED] or 0) for g in groups)},
        "mode": "incremental" if read.base is not None else "full",
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    _add_options(metrics, spec, groups, totals)
    if read.incremental is not None:
        metrics["incremental"] = read.incremental
    return metrics


def _add_options(metrics: dict, spec: SnapshotSpec, groups: list[Row], totals: dict[str, int]) -> None:
    """The blocks only some options add: ``--max-quarantined``, ``--whole-transactions``."""
    if spec.max_quarantined is not None:
        # Only with --max-quarantined: the limit, and how many records it allowed this run.
        metrics["quarantine"]["limit"] = spec.max_quarantined.text
        metrics["quarantine"]["allowed"] = spec.max_quarantined.allowed(totals["read"])
    if spec.whole_transactions:
        # Row changes on time for AS OF whose transaction is not; they count in events.after_as_of.
        metrics["transactions"] = {
            "whole": True,
            "held_back": sum(int(g[C.HELD_BACK_TRANSACTIONS] or 0) for g in groups),
            "events_held_back": sum(int(g[C.HELD_BACK] or 0) for g in groups),
        }


def with_versions(metrics: dict, versions: dict[str, int]) -> dict:
    """A history's metrics: ``versions`` beside ``rows`` (the current versions), per table and in all."""
    out = {}
    for name, value in metrics.items():
        out[name] = value
        if name == "rows":
            out["versions"] = sum(versions.values())
    for table, entry in metrics["tables"].items():
        entry_out = {}
        for name, value in entry.items():
            entry_out[name] = value
            if name == "rows":
                entry_out["versions"] = versions.get(table, 0)
        out["tables"][table] = entry_out
    return out

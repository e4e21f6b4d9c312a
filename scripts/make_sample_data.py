#!/usr/bin/env python3
"""Regenerate the bundled Debezium sample landing and its expected snapshot figures.

Writes ``airflow_cdc_provider/sample_data/debezium/dt=YYYY-MM-DD/*.jsonl`` (what a Kafka sink would
land for two topics, partitioned by event day, with a ``_SUCCESS`` marker in every finished day),
``airflow_cdc_provider/sample_data/expected.json`` and
``airflow_cdc_provider/sample_data/README.md``. The records are shaped like the vendor samples the
product is built from: Lindorm SQL tables (``"schema": {}`` with a ``payload`` wrapper, no log
position; seed 000) and Huawei CDL open-source Debezium JSON ``message_version`` 2.0 (full schema
block, PostgreSQL ``source.lsn``; seed 001).

The expected figures come from the reference fold (``reference/fold.py``, plain Python written
apart from the replay engine), so that the example DAG and its test check the engine against
something it did not compute itself. Deterministic: the same bytes on every run (``--check``
verifies that).

Usage: python scripts/make_sample_data.py [--check] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script: the repository's reference package

from reference import fold  # noqa: E402

SAMPLE_DIR = REPO / "airflow_cdc_provider" / "sample_data"
SEED = 20240902
DAY_MS = 24 * 3600 * 1000
LATENESS_MS = 3600 * 1000  # the job's default --lateness: partitions starting after AS OF + 1 h are not read
START_MS = 1725148800000  # 2024-09-01T00:00:00Z
# Landed events span 2024-09-01T00:00Z to 09-03T12:00Z: two finished days and one still landing.
END_MS = START_MS + 60 * 3600 * 1000
FINISHED_DAYS = ("2024-09-01", "2024-09-02")  # these partitions get a _SUCCESS marker
# Gaps between generated changes are stretched by this factor so that the stream covers END_MS.
TIME_SCALE = 5
MARKER = "_SUCCESS"
ONE_TABLE = "default.customers"  # the point-in-time example's default --table
AS_OF = "2024-09-02T09:00:00+00:00"  # the point-in-time example's default
AS_OF_MS = START_MS + DAY_MS + 9 * 3600 * 1000
KEY = "id"

FIRST_NAMES = ["Anne", "Anne Marie", "Sally", "George", "Edward", "Jane", "Wei", "Priya", "Tomas", "Ines"]
LAST_NAMES = ["Kretchmar", "Thomas", "Bailey", "Walker", "Zhang", "Rao", "Novak", "Garcia"]

# The schema block of seed 001 (Huawei CDL, open-source Debezium JSON message_version 2.0), verbatim.
CDL_SCHEMA: dict[str, Any] = json.loads(
    '{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int64","optional":true,"field":"count1"},'
    '{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"name":"com.xxx.cdc.data.timestamp",'
    '"field":"time1"},{"type":"string","optional":true,"name":"com.xxx.cdc.data.Decimal","field":"decimalNum"}],'
    '"optional":true,"name":"before","field":"before"},{"type":"struct","fields":[{"type":"int64","optional":true,'
    '"field":"count1"},{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,'
    '"name":"com.xxx.cdc.data.timestamp","field":"time1"},{"type":"string","optional":true,'
    '"name":"com.xxx.cdc.data.Decimal","field":"decimalNum"}],"optional":true,"name":"data","field":"after"},'
    '{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"string","optional":false,'
    '"field":"connector"},{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,'
    '"field":"ts_ms"},{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":'
    '{"allowed":"true,last,false"},"default":"false","field":"snapshot"},{"type":"string","optional":false,"field":"db"},'
    '{"type":"string","optional":false,"field":"schema"},{"type":"string","optional":false,"field":"table"},'
    '{"type":"int64","optional":true,"field":"txId"},{"type":"int64","optional":true,"field":"lsn"}],"optional":false,'
    '"name":"io.debezium.connector.postgresql.Source","field":"source"},{"type":"string","optional":false,"field":"op"},'
    '{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":false,"field":"message_version"},'
    '{"type":"string","optional":false,"field":"message_type"},{"type":"string","optional":true,"field":"LOB_COLUMNS"},'
    '{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":true,"name":"unique",'
    '"field":"unique"}],"optional":false,"name":"public.ct_pg2hudi"}'
)


@dataclass
class Event:
    """One change as the generator made it; ``text`` is the landed line."""

    table: str
    op: str  # c, r, u, d
    ts_ms: int
    key: Any
    before: dict | None
    after: dict | None
    lsn: int | None = None
    text: str = ""


@dataclass
class Landing:
    files: dict[str, list[str]] = field(default_factory=dict)
    markers: list[str] = field(default_factory=list)  # empty done-marker files


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------------------------
# Lindorm SQL table default.customers ("schema": {}, payload wrapper, no log position)
# --------------------------------------------------------------------------------------------


def lindorm_line(op: str, ts_ms: int, before: dict | None, after: dict | None) -> str:
    payload = {
        "op": op,
        "ts_ms": ts_ms + 8,  # when the record was written to Kafka, just after the change
        "before": before,
        "after": after,
        "source": {
            "version": "v2.0",
            "db": "ld-xxxx",
            "namespace": "default",
            "table": "customers",
            "ts_ms": ts_ms,
        },
    }
    return dumps({"schema": {}, "payload": payload})


def customer_events(rng: random.Random) -> list[Event]:
    """About 190 changes over 60 customers: inserts, full updates, column deletions, deletes."""
    state: dict[str, dict] = {}
    events: list[Event] = []
    ts = START_MS + 60_000
    ids = [str(1001 + i) for i in range(60)]
    for cid in ids:  # everyone arrives in the first hours
        ts += rng.randint(60_000, 180_000) * TIME_SCALE
        row = {"id": cid, "first_name": rng.choice(FIRST_NAMES), "last_name": rng.choice(LAST_NAMES)}
        state[cid] = row
        events.append(Event("default.customers", "c", ts, cid, None, dict(row)))
    while len(events) < 190:
        ts += rng.randint(120_000, 420_000) * TIME_SCALE
        cid = rng.choice(ids)
        row = state.get(cid)
        if row is None:
            row = {"id": cid, "first_name": rng.choice(FIRST_NAMES), "last_name": rng.choice(LAST_NAMES)}
            state[cid] = row
            events.append(Event("default.customers", "c", ts, cid, None, dict(row)))
            continue
        roll = rng.random()
        if roll < 0.55:
            new = dict(row, first_name=rng.choice(FIRST_NAMES), last_name=rng.choice(LAST_NAMES))
            events.append(Event("default.customers", "u", ts, cid, dict(row), dict(new)))
            state[cid] = new
        elif roll < 0.75 and "last_name" in row:
            # Lindorm column-deletion record: the after image omits the deleted column.
            new = {k: v for k, v in row.items() if k != "last_name"}
            events.append(Event("default.customers", "u", ts, cid, dict(row), dict(new)))
            state[cid] = new
        else:
            events.append(Event("default.customers", "d", ts, cid, dict(row), None))
            del state[cid]
    assert events[-1].ts_ms < END_MS
    for e in events:
        e.text = lindorm_line(e.op, e.ts_ms, e.before, e.after)
    return events


# --------------------------------------------------------------------------------------------
# CDL Debezium 2.0 table cdl.public.ct_pg2hudi (schema block, PostgreSQL lsn, snapshot reads)
# --------------------------------------------------------------------------------------------


def cdl_line(
    op: str, ts_ms: int, before: dict | None, after: dict | None, lsn: int, tx_id: int, snapshot: str
) -> str:
    key_row = after if after is not None else before
    payload = {
        "before": before,
        "after": after,
        "source": {
            "version": "1.4.0.Final",
            "connector": "postgresql",
            "name": "cdl",
            "ts_ms": ts_ms,
            "snapshot": snapshot,
            "db": "cdl",
            "schema": "public",
            "table": "ct_pg2hudi",
            "txId": tx_id,
            "lsn": lsn,
        },
        "op": op,
        "ts_ms": ts_ms + 3000,
        "message_version": "2.0",
        "message_type": "0",
        "LOB_COLUMNS": None,
        "unique": {"id": key_row["id"]},
    }
    return dumps({"schema": CDL_SCHEMA, "payload": payload})


def ct_row(rng: random.Random, key: int, ts_ms: int) -> dict:
    stamp = datetime.fromtimestamp(ts_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return {
        "count1": rng.randint(0, 500),
        "id": key,
        "time1": stamp if rng.random() < 0.7 else None,
        "decimalNum": f"{rng.randint(0, 99999) / 100:.2f}" if rng.random() < 0.8 else None,
    }


def ct_events(rng: random.Random) -> list[Event]:
    """A 25-row initial snapshot (op r), then about 115 streamed changes with increasing LSNs."""
    state: dict[int, dict] = {}
    events: list[Event] = []
    snapshot_lsn, tx_id = 163955000000, 57227000
    ts = START_MS + 5 * 60_000
    for key in range(1, 26):
        ts += 1
        row = ct_row(rng, key, ts)
        state[key] = row
        mark = "last" if key == 25 else "true"
        e = Event("cdl.public.ct_pg2hudi", "r", ts, key, None, row, lsn=snapshot_lsn)
        e.text = cdl_line("r", ts, None, row, snapshot_lsn, tx_id, mark)
        events.append(e)
    lsn = snapshot_lsn
    while len(events) < 140:
        ts += rng.randint(200_000, 500_000) * TIME_SCALE
        lsn += rng.randint(200, 9000)
        tx_id += rng.randint(1, 5)
        key = rng.randint(1, 40)
        row = state.get(key)
        if row is None:
            new = ct_row(rng, key, ts)
            op, before, after = "c", None, new
            state[key] = new
        elif rng.random() < 0.8:
            new = dict(
                row,
                count1=row["count1"] + rng.randint(1, 20),
                decimalNum=f"{rng.randint(0, 99999) / 100:.2f}",
            )
            op, before, after = "u", dict(row), new
            state[key] = new
        else:
            op, before, after = "d", dict(row), None
            del state[key]
        e = Event("cdl.public.ct_pg2hudi", op, ts, key, before, after, lsn=lsn)
        e.text = cdl_line(op, ts, before, after, lsn, tx_id, "false")
        events.append(e)
    assert events[-1].ts_ms < END_MS
    return events


# --------------------------------------------------------------------------------------------
# Landing: spread keys over files whose time ranges interleave, add tombstones and re-deliveries
# --------------------------------------------------------------------------------------------


def day_of(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d")


def partition(name: str, day: str) -> str:
    """Landed file name inside its event-day partition (hive style, as a time-partitioned sink writes)."""
    return f"debezium/dt={day}/{name}"


def by_day(events: list[Event]) -> dict[str, list[Event]]:
    days: dict[str, list[Event]] = {}
    for e in events:
        days.setdefault(day_of(e.ts_ms), []).append(e)
    return days


def spread(events: list[Event], n_files: int, chunk: int) -> list[list[str]]:
    """Round-robin chunks of consecutive events over files, so every file spans its whole day."""
    files: list[list[str]] = [[] for _ in range(n_files)]
    for i, e in enumerate(events):
        target = files[(i // chunk) % n_files]
        target.append(e.text)
        if e.table == "cdl.public.ct_pg2hudi" and e.op == "d":
            target.append("null")  # the Kafka tombstone Debezium emits after a delete
    return files


def build_landing(rng: random.Random) -> Landing:
    landing = Landing()
    customers = customer_events(rng)
    for day, events in by_day(customers).items():
        for i, lines in enumerate(spread(events, 3, 25)):
            if lines:
                landing.files[partition(f"lindorm_customers-part-{i}.jsonl", day)] = lines
    cts = ct_events(rng)
    # At-least-once delivery: after a restart the sink re-wrote three records it had already landed.
    redelivered = cts[26:29]
    assert all(e.ts_ms <= AS_OF_MS for e in redelivered)
    assert len({day_of(e.ts_ms) for e in redelivered}) == 1
    for day, events in by_day(cts).items():
        files = spread(events, 2, 30)
        if day == day_of(redelivered[0].ts_ms):
            files[1] = files[1][:10] + [e.text for e in redelivered] + files[1][10:]
        for i, lines in enumerate(files):
            if lines:
                landing.files[partition(f"cdl_ct_pg2hudi-part-{i}.jsonl", day)] = lines
    landed_days = {name.split("/")[1].removeprefix("dt=") for name in landing.files}
    assert set(FINISHED_DAYS) < landed_days, landed_days
    landing.markers = [partition(MARKER, day) for day in FINISHED_DAYS]
    return landing


# --------------------------------------------------------------------------------------------
# What a snapshot as of AS_OF must hold: the landed lines read here, folded by reference.fold
# --------------------------------------------------------------------------------------------


def table_of(source: dict) -> str:
    if source.get("namespace") is not None:
        return f"{source['namespace']}.{source['table']}"
    return f"{source['db']}.{source['schema']}.{source['table']}"


def _partition_start_ms(name: str) -> int:
    day = name.split("/dt=", 1)[1].split("/", 1)[0]
    return int(datetime.fromisoformat(f"{day}T00:00:00+00:00").timestamp() * 1000)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")


def expected_snapshot(
    files: dict[str, list[str]], as_of_ms: int, key: str = KEY, table: str | None = None
) -> dict[str, Any]:
    """Read the landed lines and fold them per table and key with the reference fold.

    ``table`` selects one table (``--table``): records of the others are ignored as "table not
    selected" (before any duplicate check: they are never considered at all). Files in day
    partitions that start after AS OF + the default lateness are not read (``--partitions auto``).
    """
    read, ignored_count = 0, 0
    ignored: dict[str, int] = {}
    changes: list[fold.Event] = []
    ops = {"c": fold.INSERT, "r": fold.INSERT, "u": fold.UPDATE, "d": fold.DELETE}
    for name in sorted(files):
        if _partition_start_ms(name) > as_of_ms + LATENESS_MS:
            continue
        for pos, text in enumerate(files[name]):
            if text.strip() == "" and text != "":
                continue  # whitespace-only lines are not records
            read += 1
            if text.strip() in ("", "null"):
                ignored_count += 1  # Kafka tombstone
                ignored["tombstone"] = ignored.get("tombstone", 0) + 1
                continue
            p = json.loads(text)["payload"]
            src = p["source"]
            if table is not None and table_of(src) != table:
                ignored_count += 1
                ignored["table not selected"] = ignored.get("table not selected", 0) + 1
                continue
            position = (src.get("lsn"),) if src.get("lsn") is not None else ()
            changes.append(
                fold.Event(
                    ops[p["op"]],
                    src["ts_ms"],
                    order=(position, src["ts_ms"], name, pos),
                    table=table_of(src),
                    before=p["before"],
                    after=p["after"],
                    identity=(position, src["ts_ms"], text),
                )
            )
    folded = fold.fold(changes, as_of_ms, key=(key,))
    events = {
        "read": read,
        "applied": folded.events["applied"],
        "after_as_of": folded.events["after_as_of"],
        "ignored": ignored_count,
        "duplicates": folded.events["duplicates"],
        "quarantined": 0,
    }
    tables: dict[str, dict[str, Any]] = {}
    out_rows: dict[str, list[dict[str, Any]]] = {}
    for t in sorted(folded.tables):
        out_rows[t] = folded.rows(t, order=lambda r: str(r[key]))
        counts = folded.counts[t]
        tables[t] = {
            "rows": len(out_rows[t]),
            "inserts": counts["inserts"],
            "updates": counts["updates"],
            "deletes": counts["deletes"],
            "last_event_ms": folded.last_event_ms[t],
        }
    assert sum(v for k, v in events.items() if k != "read") == events["read"]
    return {
        "format": "debezium-json",
        "as_of": iso(as_of_ms),
        "as_of_ms": as_of_ms,
        "key": [key],
        "rows": sum(info["rows"] for info in tables.values()),
        "events": events,
        "ignored": dict(sorted(ignored.items())),
        "tables": tables,
        "snapshot": out_rows,
    }


def _table_figures(tables: dict[str, Any]) -> list[str]:
    lines = [
        "| table | rows | inserts | updates | deletes | last_event_ms |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, info in tables.items():
        lines.append(
            f"| `{name}` | {info['rows']} | {info['inserts']} | {info['updates']} | {info['deletes']} | {info['last_event_ms']} |"
        )
    return lines


def _events_line(expected: dict[str, Any]) -> str:
    ev = expected["events"]
    return (
        f"Total rows: {expected['rows']}. Events: read {ev['read']} = applied {ev['applied']} + after AS OF "
        f"{ev['after_as_of']} + ignored {ev['ignored']} (tombstones) + duplicates {ev['duplicates']} + "
        f"quarantined {ev['quarantined']}."
    )


def readme(expected: dict[str, Any], landing: Landing) -> str:
    lines = [
        "# Bundled sample: Debezium JSON landing",
        "",
        "Generated by `scripts/make_sample_data.py` (deterministic; do not edit by hand). Two Kafka",
        "topics as a time-partitioned sink would land them, one JSON record per line, in one hive-style",
        "folder per event day (`debezium/dt=YYYY-MM-DD/`):",
        "",
        "- `lindorm_customers-part-*.jsonl`: Lindorm SQL table `default.customers` in Debezium",
        '  Format V2.0 with `"schema": {}` (seed 000): inserts, full updates, column-deletion updates',
        "  (the after image omits `last_name`, which becomes null), deletes and re-inserts. No log",
        "  position: events order by `source.ts_ms`.",
        "- `cdl_ct_pg2hudi-part-*.jsonl`: Huawei CDL open-source Debezium JSON",
        "  `message_version` 2.0 with the schema block (seed 001), table `cdl.public.ct_pg2hudi`: an",
        "  initial snapshot (`op` `r`), then inserts, updates and deletes ordered by `source.lsn`; a",
        "  Kafka tombstone (`null`) after every delete, and three records delivered twice.",
        "",
        "Within a day, consecutive runs of events are dealt round-robin over the files of a topic, so",
        "every key's history is spread over several files whose time ranges interleave. Events fall between",
        f"{iso(START_MS)} and {iso(END_MS)}. The finished days ({', '.join(FINISHED_DAYS)}) carry a",
        f"`{MARKER}` marker; the last day is still landing and has none, as a sink's current partition would.",
        "",
        "| file | records |",
        "| --- | --- |",
    ]
    for name in sorted(landing.files):
        lines.append(f"| `{name}` | {len(landing.files[name])} |")
    for name in landing.markers:
        lines.append(f"| `{name}` | marker (empty) |")
    lines += [
        "",
        f"## Expected snapshot as of `{expected['as_of']}` (`--key {','.join(expected['key'])}`)",
        "",
        "Computed by the script's own plain-Python fold, not by the replay engine; the full expected",
        "rows are in `expected.json`.",
        "",
        *_table_figures(expected["tables"]),
        "",
        _events_line(expected),
        "",
        "## Daily snapshots (what each run of the daily and backfill example DAGs rebuilds)",
        "",
        "A run for day D rebuilds the snapshot as of the end of D (its data interval end). Full rows",
        "are under `daily` in `expected.json`. The event counts are those of a full rebuild, which",
        "does not read day partitions starting more than an hour (the default `--lateness`) after AS OF.",
        "",
    ]
    for day, daily in expected["daily"].items():
        lines += [
            f"### `{day}` (as of `{daily['as_of']}`)",
            "",
            *_table_figures(daily["tables"]),
            "",
            _events_line(daily),
            "",
        ]
    lines += [
        "Rebuild it yourself:",
        "",
        "```bash",
        "cdc-replay snapshot --format debezium-json --input airflow_cdc_provider/sample_data/debezium \\",
        f"    --as-of {expected['as_of']} --key {','.join(expected['key'])} --output /tmp/cdc-sample-snapshot",
        "```",
        "",
    ]
    return "\n".join(lines)


def daily_expectations(files: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    """What a daily run rebuilds for each finished day: the snapshot as of the day's end."""
    out = {}
    for day in FINISHED_DAYS:
        day_start_ms = int(datetime.fromisoformat(f"{day}T00:00:00+00:00").timestamp() * 1000)
        out[day] = expected_snapshot(files, day_start_ms + DAY_MS)
    return out


def render(out: Path) -> dict[Path, str]:
    """Every file the script owns, path -> exact text."""
    landing = build_landing(random.Random(SEED))
    expected = expected_snapshot(landing.files, AS_OF_MS)
    expected["daily"] = daily_expectations(landing.files)
    expected["one_table"] = expected_snapshot(landing.files, AS_OF_MS, table=ONE_TABLE)
    rendered = {out / name: "\n".join(lines) + "\n" for name, lines in landing.files.items()}
    rendered.update({out / name: "" for name in landing.markers})
    rendered[out / "expected.json"] = json.dumps(expected, indent=1, sort_keys=False) + "\n"
    rendered[out / "README.md"] = readme(expected, landing)
    return rendered


def stray_files(out: Path, rendered: dict[Path, str]) -> list[Path]:
    """Files in the landing folder that the script no longer makes (e.g. an older layout)."""
    landing_dir = out / "debezium"
    existing = {p for p in landing_dir.rglob("*") if p.is_file()} if landing_dir.exists() else set()
    return sorted(existing - set(rendered))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SAMPLE_DIR, help="sample_data directory to write")
    parser.add_argument(
        "--check", action="store_true", help="fail if the files on disk differ from a fresh render"
    )
    args = parser.parse_args(argv)
    rendered = render(args.out)
    stray = stray_files(args.out, rendered)
    if args.check:
        stale = [
            str(p) for p, text in rendered.items() if not p.exists() or p.read_text(encoding="utf-8") != text
        ]
        stale += [f"{p} (not made by the script any more)" for p in stray]
        if stale:
            print("stale sample data (run scripts/make_sample_data.py):", *stale, sep="\n  ", file=sys.stderr)
            return 1
        print(f"sample data up to date ({len(rendered)} files)")
        return 0
    for path in stray:
        path.unlink()
    for path, text in rendered.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    print(f"wrote {len(rendered)} files under {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

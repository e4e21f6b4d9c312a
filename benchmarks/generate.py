"""Write landed CDC files of any supported format, and what a rebuild of them must give.

    python -m benchmarks.generate --format debezium-json --events 1000000 --keys 100000 --out /tmp/bench1m/landed

A history of ``--events`` inserts, updates and deletes over ``--keys`` keys (spread over
``--tables`` tables by ``key % tables``) is written in one source format with the record encoders
the tests use (``reference/histories.py``: one way to write each format). Event ``n``
has log position ``n`` and event time ``T0 + n`` seconds. Deterministic for a seed; streamed to
the files, so memory holds only the live keys and the late events not yet landed.

Landing: every file holds the events that *landed* in one slot of time, in landing order. An event
lands at its event time, except a ``--late-share`` of them, which land in the next slot (at most an
hour into it): they sit in a later file or partition than their event time would place them, after
newer events. So a key's events are spread across files and arrival order is not position order.

``--layout none`` writes ``--files`` files ``part-NNNNN.json``; ``hive-day`` and ``hive-hour`` write
``dt=YYYY-MM-DD/[hour=HH/]part-NNNNN.json`` by landing time (``.avro`` Avro containers for
``debezium-avro``), each partition split into
``max(1, round(files / partitions))`` files, so ``--files`` is then a target, not an exact count.
``two-days`` is a daily run's landing: ``dt=<the day before AS OF's date>/`` holds ``--files`` files
of everything that landed up to the cut (the last ``--new-share`` of the events up to AS OF land after
it), ``dt=<AS OF's date>/part-00000`` the rest, late events of day 1 among them.

``--partial-share`` is the share of updates whose image holds only the key and the changed
column (formats with partial images: shareplex-json, qlik-json, ogg-json, debezium-mongodb).
``--as-of-share`` places AS OF after that share of the events (1.0: after the last one).

``DIR/_expected.json`` (hidden from the readers by its leading underscore) holds the workload,
AS OF, the key, the expected rows per table and in total, and the event counts.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timedelta, timezone
from pathlib import Path

from reference.histories import (
    DELETE,
    ENCODERS,
    FILE_ENCODERS,
    INSERT,
    T0,
    UPDATE,
    Change,
    iso,
)

EXPECTED_FILE = "_expected.json"
# Every format the generator writes: the line-oriented ones, and those landed as binary files.
WRITERS = {**ENCODERS, **FILE_ENCODERS}
LAYOUTS = ("none", "hive-day", "hive-hour", "two-days")
LATE_SPREAD_S = 3600  # a late event lands at most this far into the slot after its own
_T0_S = T0 // 1000
_PARTITION_S = {"hive-day": 86_400, "hive-hour": 3_600}


@dataclass(frozen=True)
class Workload:
    """What to write; the generator's and the runner's command-line options."""

    source_format: str = "debezium-json"
    events: int = 1_000_000
    keys: int = 100_000
    tables: int = 1
    files: int = 8
    update_share: float = 0.7
    delete_share: float = 0.1  # inserts are the rest
    partial_share: float = 0.0
    late_share: float = 0.05
    seed: int = 7
    layout: str = "none"
    as_of_share: float = 1.0
    new_share: float = 0.01  # two-days: the share of the events up to AS OF that land on day 2

    def __post_init__(self) -> None:
        if self.source_format not in WRITERS:
            raise ValueError(f"--format must be one of {', '.join(WRITERS)}, not {self.source_format!r}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"--layout must be one of {', '.join(LAYOUTS)}, not {self.layout!r}")
        if min(self.events, self.keys, self.tables, self.files) < 1:
            raise ValueError("--events, --keys, --tables and --files must be at least 1")
        shares = (self.update_share, self.delete_share, self.partial_share, self.late_share, self.as_of_share)
        if self.layout == "two-days" and not 0 < self.new_share < 1:
            raise ValueError("--layout two-days needs --new-share between 0 and 1 (both excluded)")
        if not all(0 <= s <= 1 for s in shares) or self.update_share + self.delete_share > 1:
            raise ValueError("shares are between 0 and 1, and --update-share + --delete-share is at most 1")
        if self.partial_share and not WRITERS[self.source_format].partial_images:
            partial = ", ".join(name for name, e in WRITERS.items() if e.partial_images)
            raise ValueError(
                f"--partial-share applies to formats with partial images ({partial}), "
                f"not {self.source_format}"
            )

    @property
    def as_of_position(self) -> int:
        return round(self.events * self.as_of_share)

    @property
    def as_of_ms(self) -> int:
        return Change(INSERT, 0, None, None, self.as_of_position).ms

    @property
    def cut_position(self) -> int:
        """two-days: the last position (and landing second) of day 1; the rest of AS OF's events are new."""
        return round(self.as_of_position * (1 - self.new_share))

    @property
    def cut_ms(self) -> int:
        return Change(INSERT, 0, None, None, self.cut_position).ms

    def table(self, key: int) -> str:
        """The history name (unqualified table) of ``key``."""
        return "customers" if self.tables == 1 else f"customers_{key % self.tables}"


def history(w: Workload) -> Iterator[tuple[Change, dict | None]]:
    """The changes in position order, each with the row it finds (its before image, None if none).

    Inserts take a key that is not live, updates and deletes a live one (an insert when every key
    is live becomes an update, an update or delete when none is becomes an insert).
    """
    rng = random.Random(w.seed)
    keys = list(range(w.keys))  # keys[:live] are live, the rest are not
    where = list(range(w.keys))
    live = 0
    rows: dict[int, tuple[str, int]] = {}  # live key -> (name, qty)

    def swap(i: int, j: int) -> None:
        keys[i], keys[j] = keys[j], keys[i]
        where[keys[i]], where[keys[j]] = i, j

    for n in range(1, w.events + 1):
        r = rng.random()
        op = DELETE if r < w.delete_share else UPDATE if r < w.delete_share + w.update_share else INSERT
        if op == INSERT and live == w.keys:
            op = UPDATE
        elif op != INSERT and live == 0:
            op = INSERT
        if op == INSERT:
            key = keys[rng.randrange(live, w.keys)]
            swap(where[key], live)
            live += 1
        else:
            key = keys[rng.randrange(live)]
            if op == DELETE:
                swap(where[key], live - 1)
                live -= 1
        old = rows.get(key)
        before = None if old is None else {"id": key, "name": old[0], "qty": old[1]}
        name, qty = f"n{n % 100_003}", n % 10_007
        partial = op == UPDATE and w.partial_share > 0 and rng.random() < w.partial_share
        if partial:  # one column changes, the other keeps its value
            if n % 2:
                name = before["name"]
            else:
                qty = before["qty"]
        change = Change(op, key, name, qty, n, partial=partial)
        if op == DELETE:
            del rows[key]
        else:
            rows[key] = (name, qty)
        yield change, before


class Slots:
    """Which file a landing instant (seconds after T0, like positions) is written to."""

    def __init__(self, w: Workload):
        self.layout = w.layout
        self.suffix = WRITERS[w.source_format].suffix
        if w.layout == "none":
            self.length = math.ceil(w.events / w.files)
            self.count = w.files
            return
        if w.layout == "two-days":
            # Day 1: every landing second up to the cut, in --files files; day 2: the rest, one file.
            self.cut, self.count = w.cut_position, w.files
            self.length = math.ceil(self.cut / w.files)
            last_day = datetime.fromtimestamp(w.as_of_ms // 1000, tz=timezone.utc)
            self.days = [(last_day - timedelta(days=d)).strftime("dt=%Y-%m-%d") for d in (1, 0)]
            return
        self.partition = _PARTITION_S[w.layout]
        partitions = (_T0_S + w.events) // self.partition - (_T0_S + 1) // self.partition + 1
        self.per_partition = min(self.partition, max(1, round(w.files / partitions)))
        self.length = self.partition / self.per_partition

    def slot(self, second: int) -> int:
        if self.layout == "two-days":
            return self.count if second > self.cut else min((second - 1) // self.length, self.count - 1)
        if self.layout == "none":
            return min((second - 1) // self.length, self.count - 1)
        return (_T0_S + second) * self.per_partition // self.partition

    def next_start(self, slot: int) -> int:
        """The first landing second of the slot after ``slot``."""
        if self.layout == "two-days":
            return self.cut + 1 if slot == self.count - 1 else (slot + 1) * self.length + 1
        if self.layout == "none":
            return (slot + 1) * self.length + 1
        return math.ceil((slot + 1) * self.partition / self.per_partition) - _T0_S

    def path(self, slot: int) -> str:
        if self.layout == "two-days":
            day, part = (self.days[1], 0) if slot == self.count else (self.days[0], slot)
            return f"{day}/part-{part:05d}{self.suffix}"
        if self.layout == "none":
            return f"part-{slot:05d}{self.suffix}"
        partition, part = divmod(slot, self.per_partition)
        start = datetime.fromtimestamp(partition * self.partition, tz=timezone.utc)
        folder = start.strftime("dt=%Y-%m-%d" if self.layout == "hive-day" else "dt=%Y-%m-%d/hour=%H")
        return f"{folder}/part-{part:05d}{self.suffix}"


class _Files:
    """Appends text to the file of a slot; slots come in non-decreasing order, one file open at a time.

    For a format landed as binary files (``Encoder.container``) a file's records are kept until the
    next file starts, then written as one container.
    """

    def __init__(self, root: Path, slots: Slots, container=None):
        self.root, self.slots, self.container = root, slots, container
        self.current: int | None = None
        self.handle = None
        self.records: list[str] = []
        self.written: list[Path] = []

    def write(self, slot: int, text: str) -> None:
        if slot != self.current:
            self.close()
            path = self.root / self.slots.path(slot)
            path.parent.mkdir(parents=True, exist_ok=True)
            if self.container is None:
                self.handle = path.open("a" if path in self.written else "w", encoding="utf-8")
            if path not in self.written:
                self.written.append(path)
            self.current = slot
        if self.container is None:
            self.handle.write(text)
        else:
            self.records.extend(text.splitlines())

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None
        if self.records:
            self.written[-1].write_bytes(self.container(self.records))
            self.records = []


def generate(w: Workload, out: Path) -> dict:
    """Write the landing of ``w`` into ``out`` (emptied first); return and write ``out/_expected.json``."""
    encoder = WRITERS[w.source_format]
    if out.exists() and any(out.iterdir()):
        if not (out / EXPECTED_FILE).exists():
            raise FileExistsError(
                f"{out} holds files this generator did not write: choose an empty or new folder"
            )
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / EXPECTED_FILE).write_text(
        json.dumps({"workload": asdict(w), "incomplete": True}) + "\n"
    )  # until done
    started = time.perf_counter()
    late_rng = random.Random(w.seed + 1)
    slots = Slots(w)
    files = _Files(out, slots, encoder.container)
    pending: list[tuple[int, int, str]] = []  # (landing second, position, text) of late events
    tables = sorted({w.table(k) for k in range(min(w.keys, w.tables))})
    counts = dict.fromkeys(("inserts", "updates", "partial_updates", "deletes", "late", "records"), 0)
    as_of_counts = dict.fromkeys(("inserts", "updates", "deletes"), 0)
    rows_at_as_of: dict[str, int] = dict.fromkeys(tables, 0)
    live_rows: dict[str, int] = dict.fromkeys(tables, 0)
    try:
        for table in tables:  # e.g. Qlik's MD message, before the table's first change
            preamble = encoder.preamble(table)
            counts["records"] += len(preamble)
            if preamble:
                files.write(slots.slot(1), "".join(f"{line.text}\n" for line in preamble))
        for change, before in history(w):
            n = change.position
            while pending and pending[0][0] <= n:
                landed, _, text = heapq.heappop(pending)
                files.write(slots.slot(landed), text)
            table = w.table(change.key)
            lines = encoder.write(table, change, before)
            text = "".join(f"{line.text}\n" for line in lines)
            counts["records"] += len(lines)
            kind = {INSERT: "inserts", UPDATE: "updates", DELETE: "deletes"}[change.op]
            counts[kind] += 1
            counts["partial_updates"] += change.partial
            live_rows[table] += {INSERT: 1, UPDATE: 0, DELETE: -1}[change.op]
            if n <= w.as_of_position:
                as_of_counts[kind] += 1
                if n == w.as_of_position:
                    rows_at_as_of = dict(live_rows)
            on_time = slots.slot(n)
            if w.late_share and late_rng.random() < w.late_share:
                landed = slots.next_start(on_time) + late_rng.randrange(
                    min(math.ceil(slots.length), LATE_SPREAD_S)
                )
                if slots.slot(landed) != on_time:
                    counts["late"] += 1
                    heapq.heappush(pending, (landed, n, text))
                    continue
            files.write(on_time, text)
        while pending:
            landed, _, text = heapq.heappop(pending)
            files.write(slots.slot(landed), text)
    finally:
        files.close()
    expected = {
        "workload": asdict(w),
        "as_of": iso(w.as_of_ms) + "Z",
        "as_of_ms": w.as_of_ms,
        **({"cut_ms": w.cut_ms} if w.layout == "two-days" else {}),
        "key": list(encoder.key),
        "tables": {encoder.table(t): n for t, n in rows_at_as_of.items()},
        "rows": sum(rows_at_as_of.values()),
        "counts": counts,
        "as_of_counts": as_of_counts,
        "files": len(files.written),
        "bytes": sum(p.stat().st_size for p in files.written),
        "seconds": round(time.perf_counter() - started, 1),
    }
    (out / EXPECTED_FILE).write_text(json.dumps(expected, indent=2) + "\n")
    return expected


def read_expected(landing: Path) -> dict | None:
    """What ``generate`` wrote into ``landing``; None if it wrote nothing there or did not finish."""
    path = landing / EXPECTED_FILE
    expected = json.loads(path.read_text()) if path.exists() else None
    return None if expected is None or expected.get("incomplete") else expected


# ------------------------------------------------------------------ command line


_OPTIONS = {  # Workload field -> (option, help)
    "source_format": ("--format", "source format to write (see cdc-replay formats)"),
    "events": ("--events", "changes to write"),
    "keys": ("--keys", "distinct keys over all tables (key k belongs to table k %% tables)"),
    "tables": ("--tables", "tables"),
    "files": ("--files", "files (layout none); with a hive layout, a target total"),
    "update_share": ("--update-share", "share of events that update a live key"),
    "delete_share": ("--delete-share", "share of events that delete a live key; inserts are the rest"),
    "partial_share": (
        "--partial-share",
        "share of updates carrying only the changed column (formats with partial images)",
    ),
    "late_share": (
        "--late-share",
        "share of events landing in a later file or partition than their event time's",
    ),
    "seed": ("--seed", "random seed"),
    "layout": (
        "--layout",
        "folders by landing time: none, dt=YYYY-MM-DD (hive-day), dt=.../hour=HH (hive-hour), "
        "two-days (the day before AS OF's date: --files files up to the cut; AS OF's date: one file after it)",
    ),
    "as_of_share": ("--as-of-share", "AS OF after this share of the events"),
    "new_share": ("--new-share", "two-days: the share of the events up to AS OF landing after the cut"),
}


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that describe a workload (shared by this generator and benchmarks.run)."""
    for f in fields(Workload):
        option, text = _OPTIONS[f.name]
        choices = {"layout": LAYOUTS, "source_format": list(WRITERS)}.get(f.name)
        parser.add_argument(
            option,
            dest=f.name,
            type=type(f.default),
            default=f.default,
            choices=choices,
            help=f"{text} (default {f.default})",
        )


def workload_from_args(args: argparse.Namespace) -> Workload:
    return Workload(**{f.name: getattr(args, f.name) for f in fields(Workload)})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.generate", description=__doc__.split("\n")[0])
    add_workload_arguments(parser)
    parser.add_argument(
        "--out", required=True, help="folder to write: new, empty, or an earlier output of this generator"
    )
    args = parser.parse_args(argv)
    try:
        workload = workload_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    json.dump(generate(workload, Path(args.out)), sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()

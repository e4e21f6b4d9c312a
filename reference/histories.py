"""Random change histories with injected faults, landed in any source format, and what they must give.

A history is a short run of inserts, updates and deletes on one table (a handful of keys, some
events after AS OF, some updates and deletes of keys that do not exist). ``land`` writes it in one
source format, spread over several files in shuffled order, and mixes in faults: lines that must
be quarantined (not JSON, a JSON array or scalar, bytes that are not UTF-8, a truncated last line,
a record of another format, a record whose key is null), Kafka tombstones, blank lines, exact
re-deliveries, a BOM, CRLF line ends, gzip files, a gzip file cut short and an empty file.

``Expected`` is computed from the history alone with the reference fold (``reference.fold``, the
rules of docs/design.md), so a test can compare the engine's rows and every count with it.

The per-format message builders are ``reference.records``, the ones the format tests use: one way
to write each format. The benchmarks' generator writes its landings with the same encoders.
"""

from __future__ import annotations

import base64
import gzip
import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from reference import fold
from reference.fold import DELETE, INSERT, UPDATE
from reference.records.aws_dms import record as dms_record
from reference.records.canal import msg as canal_msg
from reference.records.cdl import change as cdl_change
from reference.records.datahub_blob import message as blob_message
from reference.records.debezium_avro import container, envelope, envelope_schema
from reference.records.debezium_mongodb import value as mongo_value
from reference.records.dts_avro import chars, integer
from reference.records.dts_avro import message as avro_message
from reference.records.dts_avro import record as dts_record
from reference.records.maxwell import rec as maxwell_rec
from reference.records.ogg import rec as ogg_rec
from reference.records.qlik import dt_msg, md
from reference.records.shareplex import rec as shareplex_rec

T0 = 1_725_271_200_000  # 2024-09-02T10:00:00Z: every event time is T0 + position seconds

# Faults mixed into every landing; README "Reliability" quotes this list.
FAULT_KINDS = (
    "not JSON",
    "JSON array",
    "JSON scalar",
    "bytes that are not UTF-8",
    "truncated last line",
    "record of another format",
    "null key",
    "Kafka tombstone (empty line, null)",
    "blank lines",
    "exact re-delivery",
    "BOM",
    "CRLF line ends",
    "gzip file",
    "gzip file cut short",
    "empty file",
    "events after AS OF",
    "update or delete of an unknown key",
)


@dataclass(frozen=True)
class Change:
    op: str
    key: int | None
    name: str | None
    qty: int | None
    position: int  # 1, 2, ...: the source's log position; event time is T0 + position s
    # An update whose image holds only the key and the columns that changed (formats whose
    # encoder has partial_images; the benchmarks' generator makes them).
    partial: bool = False

    @property
    def ms(self) -> int:
        return T0 + self.position * 1000


@dataclass(frozen=True)
class Line:
    """One landed line and what the engine must make of it."""

    text: str | bytes
    role: str  # "change", "ignored", "quarantined", or "blank" (not a record)
    reason: str | None = None  # ignored / quarantine reason
    change: Change | None = None


def iso(ms: int, *, millis: bool = False) -> str:
    moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (".000" if millis else "")


# ------------------------------------------------------------------ one encoder per format


@dataclass(frozen=True)
class Encoder:
    """How one format writes a change, and what the engine must say about its odd records."""

    name: str
    write: Callable[[str, Change, dict | None], list[Line]]  # (table, change, row before) -> lines
    table: Callable[[str], str]  # history name -> qualified table in the snapshot
    columns: tuple[str, str, str] = ("id", "name", "qty")
    key: tuple[str, ...] = ()  # --key, for formats whose records do not name their key
    preamble: Callable[[str], list[Line]] = lambda table: []  # noqa: E731 - e.g. Qlik's MD message
    foreign_reason: str = "missing op"  # what a record of another format becomes
    null_key_reason: str = "missing key"
    # The record a quarantined but decodable line is kept as (dts-avro keeps the message's Base64).
    decoded_raw: Callable[[str], str] = lambda text: text  # noqa: E731
    partial_images: bool = False  # writes Change.partial updates as partial images
    # Formats landed as binary files (Avro containers): a file's records (the line texts) -> its bytes.
    container: Callable[[list[str]], bytes] | None = None
    suffix: str = ".json"  # the landed files' extension

    def row(self, key: int, name: str | None, qty: int | None) -> dict[str, Any]:
        return dict(zip(self.columns, (key, name, qty)))


def _dbz(table: str, c: Change, before: dict | None) -> list[Line]:
    image = {"id": c.key, "name": c.name, "qty": c.qty}
    record = {
        "op": {INSERT: "c", UPDATE: "u", DELETE: "d"}[c.op],
        "ts_ms": c.ms + 3,
        "before": before if c.op != INSERT else None,
        "after": None if c.op == DELETE else image,
        "source": {
            "db": "db",
            "table": table,
            "ts_ms": c.ms,
            "file": "mysql-bin.000003",
            "pos": c.position,
            "row": 0,
        },
    }
    if c.op == DELETE and before is None:
        record["before"] = image
    return [Line(json.dumps(record), "change", change=c)]


def _cdl(table: str, c: Change, before: dict | None) -> list[Line]:
    image = {"id": c.key, "name": c.name, "qty": c.qty}
    op = {INSERT: "INSERT", UPDATE: "UPDATE", DELETE: "DELETE"}[c.op]
    data, old = (None, before or image) if c.op == DELETE else (image, before if c.op == UPDATE else None)
    record = cdl_change(
        op,
        data,
        old,
        lsn=c.position,
        tx=c.position,
        ms=c.ms,
        schema=False,
        unique={"id": c.key},
        SEG_OWNER="s",
        TABLE_NAME=table,
    )
    return [Line(json.dumps(record), "change", change=c)]


_CANAL_TYPES = {"id": "int(11)", "name": "varchar(20)", "qty": "int(11)"}


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


def _canal(table: str, c: Change, before: dict | None) -> list[Line]:
    row = {"id": _text(c.key), "name": c.name, "qty": _text(c.qty)}
    old = None
    if c.op == UPDATE:
        old = [{"name": before["name"], "qty": _text(before["qty"])}] if before else [{}]
    if c.op == DELETE and before:
        row = {k: _text(v) if k != "name" else v for k, v in before.items()}
    text = canal_msg(c.op.upper(), [row], old=old, table=table, es=c.ms, id_=c.position, mysql=_CANAL_TYPES)
    return [Line(text, "change", change=c)]


def _changed(row: dict, before: dict | None) -> dict:
    """The non-key columns of ``row`` whose value differs from ``before``: a partial update's image."""
    return {k: v for k, v in row.items() if k != "id" and (before is None or before.get(k) != v)}


def _shareplex(table: str, c: Change, before: dict | None) -> list[Line]:
    row = {"id": c.key, "name": c.name, "qty": c.qty}
    op = {INSERT: "ins", UPDATE: "upd", DELETE: "del"}[c.op]
    if c.op == DELETE:
        text = shareplex_rec(
            op, before or row, table=f"s.{table}", time=iso(c.ms), scn=c.position, trans="1", seq=1
        )
    elif c.op == UPDATE:
        data = _changed(row, before) if c.partial else row  # the key block holds the id
        text = shareplex_rec(
            op, data, {"id": c.key}, table=f"s.{table}", time=iso(c.ms), scn=c.position, trans="1", seq=1
        )
    else:
        text = shareplex_rec(op, row, table=f"s.{table}", time=iso(c.ms), scn=c.position, trans="1", seq=1)
    return [Line(text, "change", change=c)]


_DTS_FIELDS = [("id", 8), ("name", 253), ("qty", 8)]


def _dts_values(row: dict | None) -> list[Any] | None:
    if row is None:
        return None
    return [
        None if row["id"] is None else integer(row["id"]),
        None if row["name"] is None else chars(row["name"]),
        None if row["qty"] is None else integer(row["qty"]),
    ]


def _dts(table: str, c: Change, before: dict | None) -> list[Line]:
    image = {"id": c.key, "name": c.name, "qty": c.qty}
    after = None if c.op == DELETE else image
    old = (before or image) if c.op == DELETE else (before if c.op == UPDATE else None)
    rec = dts_record(
        c.op.upper(),
        c.position,
        before=_dts_values(old),
        after=_dts_values(after),
        table=f"db.{table}",
        fields=_DTS_FIELDS,
        ts=c.ms // 1000,
        position=f"{c.position}@mysql-bin.000003",
    )
    value = base64.b64encode(avro_message(rec)).decode("ascii")
    text = json.dumps({"topic": "dts", "partition": 0, "offset": c.position, "value": value})
    return [Line(text, "change", change=c)]


def _tuple_record(table: str, c: Change, op: str, flags: tuple[str, str], row: dict) -> str:
    return json.dumps(
        {
            "_sequence_id_": str(1000 + c.position),
            "_operation_type_": op,
            "_excute_time_": c.ms,
            "_source_table_": table,
            "_before_image_": flags[0],
            "_after_image_": flags[1],
            **row,
        }
    )


def _datahub_tuple(table: str, c: Change, before: dict | None) -> list[Line]:
    row = {"id": c.key, "name": c.name, "qty": c.qty}
    if c.op == INSERT:
        return [Line(_tuple_record(table, c, "I", ("N", "Y"), row), "change", change=c)]
    if c.op == DELETE:
        return [Line(_tuple_record(table, c, "D", ("Y", "N"), before or row), "change", change=c)]
    return [
        Line(_tuple_record(table, c, "U", ("Y", "N"), before or row), "ignored", "update before image"),
        Line(_tuple_record(table, c, "U", ("N", "Y"), row), "change", change=c),
    ]


def _datahub_blob(table: str, c: Change, before: dict | None) -> list[Line]:
    row = {"id": c.key, "name": c.name, "qty": c.qty}
    op = {INSERT: "INSERT", UPDATE: "UPDATE_AFTER", DELETE: "DELETE"}[c.op]
    record = blob_message(
        op,
        seq=str(1000 + c.position),
        event_ms=c.ms,
        table=table,
        before=(before or row) if c.op != INSERT else None,
        after=None if c.op == DELETE else row,
        columns={"id": "LONG", "name": "STRING", "qty": "LONG"},
    )
    return [Line(json.dumps(record), "change", change=c)]


def _aws_dms(table: str, c: Change, before: dict | None) -> list[Line]:
    row = {"id": c.key, "name": c.name, "qty": c.qty}
    if c.op == DELETE:
        data = before or row
    elif c.op == UPDATE and before:  # DMS's before image: BI_ columns beside the new values
        data = {**row, **{f"BI_{k}": v for k, v in before.items()}}
    else:
        data = row
    text = dms_record(c.op, data, ms=c.ms, table=table, schema="db", tx=c.position)
    return [Line(text, "change", change=c)]


_DBZ_AVRO_COLUMNS = [
    {"name": "id", "type": "long"},
    {"name": "name", "type": ["null", "string"], "default": None},
    {"name": "qty", "type": ["null", "long"], "default": None},
]


def _debezium_avro(table: str, c: Change, before: dict | None) -> list[Line]:
    """A Debezium envelope as the Avro converter writes it; the line is its JSON, the file an Avro container."""
    image = {"id": c.key, "name": c.name, "qty": c.qty}
    op = {INSERT: "c", UPDATE: "u", DELETE: "d"}[c.op]
    record = envelope(
        op, (before or image) if c.op == DELETE else before, None if c.op == DELETE else image, c.position
    )
    record["source"].update(table=table, ts_ms=c.ms)
    return [Line(json.dumps(record), "change", change=c)]


def _debezium_avro_container(texts: list[str]) -> bytes:
    return container([json.loads(t) for t in texts], envelope_schema("customers", _DBZ_AVRO_COLUMNS))


_QLIK_COLUMNS = {"ID": (1, "INT4", 10, 0, 1), "NAME": (2, "WSTRING", 0, 0, 0), "QTY": (3, "INT4", 10, 0, 0)}


def _qlik_row(row: dict | None) -> dict | None:
    return None if row is None else {"ID": row["id"], "NAME": row["name"], "QTY": row["qty"]}


def _qlik(table: str, c: Change, before: dict | None) -> list[Line]:
    row = {"id": c.key, "name": c.name, "qty": c.qty}
    op = c.op.upper()
    data = _qlik_row(before or row) if c.op == DELETE else _qlik_row(row)
    old = _qlik_row(before) if c.op == UPDATE else None
    mask = "07"  # columnMask: bit ordinal - 1 for ID, NAME, QTY
    if c.partial:  # columns not captured are null and their bit is clear
        captured = {"id", *_changed(row, before)}
        data = {name.upper(): v if name in captured else None for name, v in row.items()}
        mask = f"{sum(1 << i for i, name in enumerate(('id', 'name', 'qty')) if name in captured):02X}"
    # changeSequence: the event time (YYYYMMDDHHmmSShh) and a 19-digit counter, both growing with the position.
    seq = (
        datetime.fromtimestamp(c.ms / 1000, tz=timezone.utc).strftime("%Y%m%d%H%M%S00") + f"{c.position:019d}"
    )
    record = dt_msg(
        op, data, old, seq=seq, at=iso(c.ms, millis=True), mask=mask, schema="dbo", table=table.upper()
    )
    return [Line(json.dumps(record), "change", change=c)]


def _qlik_md(table: str) -> list[Line]:
    message = md(
        table.upper(), _QLIK_COLUMNS, schema="dbo", schema_id=f"md-{table}", at="2024-09-01T00:00:00.000"
    )
    text = json.dumps(message)
    return [Line(text, "ignored", "ddl")]


def _maxwell(table: str, c: Change, before: dict | None) -> list[Line]:
    row = {"id": c.key, "name": c.name, "qty": c.qty}
    position = f"mysql-bin.000003:{c.position}"
    common = {"table": table, "ts": c.ms // 1000, "xid": c.position, "commit": True, "position": position}
    if c.op == DELETE:
        text = maxwell_rec("delete", before or row, **common)
    elif c.op == UPDATE:
        # old: the previous values of the columns that changed (all of them for a key never seen).
        old = {k: (before or {}).get(k) for k in _changed(row, before)}
        text = maxwell_rec("update", row, old=old, **common)
    else:
        text = maxwell_rec("insert", row, **common)
    return [Line(text, "change", change=c)]


def _ogg(table: str, c: Change, before: dict | None) -> list[Line]:
    row = {"id": c.key, "name": c.name, "qty": c.qty}
    op_ts = datetime.fromtimestamp(c.ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    common = {"table": f"OGG.{table}", "op_ts": op_ts, "pos": c.position}
    if c.op == DELETE:
        text = ogg_rec("D", before=before or row, **common)
    elif c.op == UPDATE:
        # A compressed update carries the key and the changed columns only.
        after = {"id": c.key, **_changed(row, before)} if c.partial else row
        text = ogg_rec("U", before=before, after=after, **common)
    else:
        text = ogg_rec("I", after=row, **common)
    return [Line(text, "change", change=c)]


def _mongo(table: str, c: Change, before: dict | None) -> list[Line]:
    def doc(r: dict) -> dict:
        # qty as Int64 ($numberLong), as MongoDB's extended JSON writes longs.
        qty = r["qty"]
        return {"_id": r["id"], "name": r["name"], "qty": None if qty is None else {"$numberLong": str(qty)}}

    row = {"id": c.key, "name": c.name, "qty": c.qty}
    common = {"collection": table, "ts_ms": c.ms, "ord_": c.position}
    if c.op == DELETE:
        # Odd positions carry the pre-image, even ones only the 1.x filter.
        if c.position % 2:
            text = mongo_value("d", before=doc(before or row), **common)
        else:
            text = mongo_value("d", filter=json.dumps({"_id": c.key}), **common)
    elif c.op == UPDATE and c.partial:
        changed = {k: doc(row)[k] for k in _changed(row, before)}
        patch = json.dumps({"$v": 1, "$set": changed})
        text = mongo_value("u", patch=patch, filter=json.dumps({"_id": c.key}), **common)
    else:
        text = mongo_value("u" if c.op == UPDATE else "c", after=doc(row), **common)
    return [Line(text, "change", change=c)]


ENCODERS: dict[str, Encoder] = {
    e.name: e
    for e in (
        Encoder("debezium-json", _dbz, lambda t: f"db.{t}", key=("id",), foreign_reason="missing op"),
        Encoder("cdl-json", _cdl, lambda t: f"s.{t}"),
        Encoder("canal-json", _canal, lambda t: f"db.{t}"),
        Encoder("shareplex-json", _shareplex, lambda t: f"s.{t}", key=("id",), partial_images=True),
        Encoder(
            "dts-avro",
            _dts,
            lambda t: f"db.{t}",
            foreign_reason="missing image",
            decoded_raw=lambda text: json.loads(text)["value"],
        ),
        Encoder("datahub-tuple", _datahub_tuple, lambda t: t, key=("id",)),
        Encoder("datahub-blob", _datahub_blob, lambda t: f"db.{t}"),
        Encoder(
            "qlik-json",
            _qlik,
            lambda t: f"dbo.{t.upper()}",
            columns=("ID", "NAME", "QTY"),
            preamble=_qlik_md,
            partial_images=True,
        ),
        Encoder("maxwell-json", _maxwell, lambda t: f"db.{t}"),
        Encoder("ogg-json", _ogg, lambda t: f"OGG.{t}", partial_images=True),
        Encoder(
            "debezium-mongodb",
            _mongo,
            lambda t: f"shop.{t}",
            columns=("_id", "name", "qty"),
            foreign_reason="missing table",
            partial_images=True,
        ),
        Encoder("aws-dms", _aws_dms, lambda t: f"db.{t}", key=("id",)),
    )
}
# Formats landed as binary files, which the line faults above cannot be mixed into: the benchmark
# generator writes them (one container per file), the format's own tests cover its faults.
FILE_ENCODERS: dict[str, Encoder] = {
    e.name: e
    for e in (
        Encoder(
            "debezium-avro",
            _debezium_avro,
            lambda t: f"inventory.{t}",
            key=("id",),
            container=_debezium_avro_container,
            suffix=".avro",
        ),
    )
}


# ------------------------------------------------------------------ histories and faults


def random_history(rng: random.Random, keys: int = 4) -> list[Change]:
    """6-12 changes on keys 1..keys; about one in five updates or deletes a key that does not exist."""
    changes = []
    for position in range(1, rng.randint(6, 12) + 1):
        op = rng.choice((INSERT, INSERT, UPDATE, UPDATE, DELETE))
        name = rng.choice(("ann", "bob", "cy", "dee", None))
        changes.append(Change(op, rng.randint(1, keys), name, rng.randint(0, 99), position))
    return changes


@dataclass
class Expected:
    """What the engine must report for one history, by the rules of docs/design.md ("Replay semantics").

    The part of the damaged gzip file Spark can still read is not known in advance: those lines
    are re-deliveries, each adding one to ``read`` and ``duplicates`` (tests solve for it).
    """

    rows: list[dict[str, Any]] = field(default_factory=list)
    events: Counter = field(
        default_factory=Counter
    )  # read, applied, after_as_of, ignored, duplicates, quarantined
    table_events: Counter = field(default_factory=Counter)  # the part attributed to the history's table
    counts: Counter = field(default_factory=Counter)  # inserts, updates, deletes, *_of_unknown_key
    quarantine_reasons: Counter = field(default_factory=Counter)
    ignored_reasons: Counter = field(default_factory=Counter)
    quarantine: list[tuple[str, int, str, str]] = field(
        default_factory=list
    )  # file name, line, reason, record
    damaged_file: str = ""
    damaged_copies: int = 0
    as_of_ms: int = 0

    def count(self, line: Line, encoder: Encoder) -> None:
        """Count one landed record; records that name the history's table count for it too."""
        if line.role in ("change", "duplicate"):
            kind = (
                "after_as_of"
                if line.change.ms > self.as_of_ms
                else ("duplicates" if line.role == "duplicate" else "applied")
            )
            attributed = True
        elif line.role == "ignored":
            kind, attributed = "ignored", line.reason != "tombstone"
            self.ignored_reasons[line.reason] += 1
        else:
            kind = "quarantined"
            attributed = line.reason == encoder.null_key_reason
            self.quarantine_reasons[line.reason] += 1
        for counter in (self.events, self.table_events) if attributed else (self.events,):
            counter["read"] += 1
            counter[kind] += 1

    def damaged_rest(self, delivered: int) -> None:
        """Add the damaged file: ``delivered`` re-deliveries Spark could read, then the lost rest."""
        for counter in (self.events, self.table_events):
            counter["read"] += delivered
            counter["duplicates"] += delivered
        self.events["read"] += 1
        self.events["quarantined"] += 1
        self.quarantine_reasons["truncated"] += 1
        self.quarantine.append((self.damaged_file, delivered + 1, "truncated", None))


def fold_history(
    encoder: Encoder, changes: list[Change], as_of_ms: int
) -> tuple[list[dict[str, Any]], Counter]:
    """Final rows and counts of the history's table: the reference fold of ``changes`` as of ``as_of_ms``.

    A change carries the whole row after it (a partial one too), so every image is full.
    """
    events = []
    for c in changes:
        row = encoder.row(c.key, c.name, c.qty)
        image = {"before": row} if c.op == DELETE else {"after": row}
        events.append(fold.Event(c.op, c.ms, order=(c.position,), **image))
    folded = fold.fold(events, as_of_ms, key=encoder.columns[:1])
    return folded.rows(), folded.counts.get("", Counter())


def before_images(changes: list[Change]) -> list[dict | None]:
    """The row each change finds (in position order, whatever AS OF): what before images carry."""
    state: dict[int, dict] = {}
    out = []
    for c in changes:
        out.append(dict(state[c.key]) if c.key in state else None)
        if c.op == DELETE:
            state.pop(c.key, None)
        else:
            state[c.key] = {"id": c.key, "name": c.name, "qty": c.qty}
    return out


def _foreign_record(encoder: Encoder, table: str) -> str:
    """A record of another format: Canal JSON in a Debezium landing, Debezium JSON elsewhere."""
    if encoder.name == "debezium-json":
        return canal_msg("INSERT", [{"id": "1", "name": "x"}], table=table, es=T0)
    return json.dumps(
        {
            "op": "c",
            "ts_ms": T0,
            "before": None,
            "after": {"id": 1},
            "source": {"db": "db", "table": table, "ts_ms": T0},
        }
    )


def _not_utf8(encoder: Encoder, table: str) -> bytes:
    """A change whose name holds a Latin-1 byte: it must be quarantined, never applied as U+FFFD."""
    (line,) = [x for x in encoder.write(table, Change(INSERT, 3, "cafe!", 1, 0), None) if x.role == "change"]
    if "cafe!" not in line.text:  # hidden inside Base64 (dts-avro): a Kafka envelope with the byte instead
        return b'{"topic": "t", "value": "caf\xe9"}'
    return line.text.encode("utf-8").replace(b"cafe!", b"caf\xe9")


def land(
    encoder: Encoder, folder: Path, history: str, changes: list[Change], as_of_ms: int, rng: random.Random
) -> Expected:
    """Write ``changes`` of table ``history`` in ``encoder``'s format with faults; return what they must give."""
    table = history
    befores = before_images(changes)
    lines: list[Line] = list(encoder.preamble(table))
    for change, before in zip(changes, befores):
        lines.extend(encoder.write(table, change, before))
    single = [x for x in lines if x.role == "change" and x.change.op != UPDATE]
    redelivered = rng.sample(single, k=min(2, len(single)))
    (null_key,) = [
        x for x in encoder.write(table, Change(INSERT, None, "no key", 1, 0), None) if x.role == "change"
    ]
    faults = [
        Line("/* not JSON */", "quarantined", "not JSON"),
        Line("[1, 2, 3]", "quarantined", "not a JSON object"),
        Line("42", "quarantined", "not a JSON object"),
        Line(_not_utf8(encoder, table), "quarantined", "not UTF-8"),
        Line(_foreign_record(encoder, table), "quarantined", encoder.foreign_reason),
        Line(null_key.text, "quarantined", encoder.null_key_reason),  # decodable: kept as decoded_raw
        Line("", "ignored", "tombstone"),
        Line("null", "ignored", "tombstone"),
        Line("   ", "blank"),
        *[Line(x.text, "duplicate", change=x.change) for x in redelivered],
    ]
    everything = lines + faults
    rng.shuffle(everything)

    # Three files: plain with a BOM and CRLF line ends, plain ending in a truncated line, gzip.
    parts: list[list[Line]] = [[], [], []]
    for line in everything:
        parts[rng.randrange(3)].append(line)
    truncated = Line('{"op": "c", "after": {"id": 9', "quarantined", "truncated")
    parts[1].append(truncated)
    names = (f"{history}-a.json", f"{history}-b.json", f"{history}-c.json.gz")
    _write_lines(folder / names[0], parts[0], bom=True, newline="\r\n")
    _write_lines(folder / names[1], parts[1], last_unterminated=True)
    _write_gzip(folder / names[2], parts[2])
    (folder / f"{history}-d.json").write_bytes(b"")  # an empty file
    # A gzip file cut short, holding re-deliveries of applied changes only: whatever part of it
    # Spark can still read changes no row, and the rest is one "truncated" record.
    copies = [x for x in single if x.change.ms <= as_of_ms][:3]
    damaged = f"{history}-e.json.gz"
    whole = gzip.compress(b"".join(_raw(x) + b"\n" for x in copies))
    (folder / damaged).write_bytes(whole[: len(whole) - 12])

    expected = Expected(damaged_file=damaged, damaged_copies=len(copies), as_of_ms=as_of_ms)
    expected.rows, expected.counts = fold_history(encoder, changes, as_of_ms)
    for name, part in zip(names, parts):
        for number, line in enumerate(part, start=1):
            if line.role != "blank":
                expected.count(line, encoder)
            if line.role == "quarantined":
                record = line.text.decode("utf-8", "replace") if isinstance(line.text, bytes) else line.text
                if line.reason == encoder.null_key_reason:
                    record = encoder.decoded_raw(record)
                expected.quarantine.append((name, number, line.reason, record))
    return expected


def _raw(line: Line) -> bytes:
    return line.text if isinstance(line.text, bytes) else line.text.encode("utf-8")


def _write_lines(
    path: Path, lines: list[Line], *, bom: bool = False, newline: str = "\n", last_unterminated: bool = False
) -> None:
    body = newline.encode().join(_raw(x) for x in lines)
    if not last_unterminated and lines:
        body += newline.encode()
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + body)


def _write_gzip(path: Path, lines: list[Line]) -> None:
    path.write_bytes(gzip.compress(b"".join(_raw(x) + b"\n" for x in lines)))

"""``--base``: an incremental rebuild gives exactly what a full rebuild gives, or says why it did not.

Histories are generated per format (inserts, full and partial updates, deletes, unknown keys),
landed in two folders as a sink would land two days, and rebuilt three ways: as of the end of day
one with ``keep_state`` (the base), as of day two from that base, and as of day two from scratch.
The two day-two snapshots must be identical: same columns, same types, same rows.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from tests.conftest import assert_events_add_up, rows_of

from airflow_cdc_provider.replay.runs.snapshot import run_snapshot
from airflow_cdc_provider.replay.spec import spec_from_keywords
from reference.histories import DELETE, ENCODERS, INSERT, T0, UPDATE, Change, Encoder, before_images

AS_OF_1 = T0 + 30_500  # end of "day one": changes 1..30
AS_OF_2 = T0 + 60_500  # changes 31..60 come after it; 61..66 are after both


def history(rng: random.Random, encoder: Encoder, changes: int = 66, keys: int = 9) -> list[Change]:
    out = []
    for position in range(1, changes + 1):
        op = rng.choice((INSERT, UPDATE, UPDATE, UPDATE, DELETE))
        partial = encoder.partial_images and op == UPDATE and rng.random() < 0.6
        out.append(
            Change(
                op,
                rng.randint(1, keys),
                rng.choice(("ann", "bob", "cy", None)),
                rng.randint(0, 99),
                position,
                partial,
            )
        )
    return out


def land_days(
    encoder: Encoder,
    root: Path,
    changes: list[Change],
    late: set[int] = frozenset(),
    others: dict[str, list[Change]] | None = None,
) -> Path:
    """Day one holds changes up to AS_OF_1 (and the format's preamble), day two the rest.

    ``late``: positions at or before AS_OF_1 that land on day two instead (late arrivals).
    ``others``: changes of more tables (name -> changes), landed beside table ``t``'s.
    """
    days: dict[str, list[str]] = {"day1": [], "day2": []}
    for table, table_changes in {"t": changes, **(others or {})}.items():
        days["day1"].extend(line.text for line in encoder.preamble(table))
        for change, before in zip(table_changes, before_images(table_changes)):
            day = "day1" if change.ms <= AS_OF_1 and change.position not in late else "day2"
            days[day].extend(
                line.text for line in encoder.write(table, change, before) if line.role != "blank"
            )
    return write_days(root, days)


def write_days(root: Path, days: dict[str, list[str]]) -> Path:
    """``root/landing/DAY/part-0.json`` holding each day's lines; returns the landing folder."""
    landing = root / "landing"
    for day, lines in days.items():
        (landing / day).mkdir(parents=True, exist_ok=True)
        (landing / day / "part-0.json").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return landing


def snapshot(spark, fmt: str, landing: Path, output: Path, as_of: int, **options) -> tuple[dict, dict]:
    spec = spec_from_keywords(
        source_format=fmt,
        inputs=[str(landing)],
        as_of=as_of,
        output=str(output),
        key=list(ENCODERS[fmt].key),
        **options,
    )
    metrics = run_snapshot(spark, spec)
    tables = {
        name: (
            [(f.name, f.dataType.simpleString()) for f in spark.read.parquet(info["path"]).schema],
            rows_of(spark, info["path"]),
        )
        for name, info in metrics["tables"].items()
    }
    return metrics, tables


@pytest.mark.parametrize("fmt", sorted(ENCODERS))
def test_incremental_rebuild_equals_the_full_rebuild(fmt, spark, tmp_path):
    encoder = ENCODERS[fmt]
    changes = history(random.Random(f"incremental {fmt}"), encoder)
    landing = land_days(encoder, tmp_path, changes)

    base, base_tables = snapshot(spark, fmt, landing, tmp_path / "day1", AS_OF_1, keep_state=True)
    incremental, tables = snapshot(
        spark, fmt, landing, tmp_path / "day2", AS_OF_2, base=str(tmp_path / "day1")
    )
    full, full_tables = snapshot(spark, fmt, landing, tmp_path / "full", AS_OF_2)

    assert base["mode"] == "full" and (tmp_path / "day1" / "_cdc_state" / "state.json").exists()
    assert incremental["mode"] == "incremental", incremental["incremental"]["reason"]
    assert incremental["incremental"] == {
        "base": str(tmp_path / "day1"),
        "base_as_of": "2024-09-02T10:00:30.500+00:00",
        "applied": True,
        "reason": None,
        "late_events": 0,
    }
    assert tables == full_tables
    assert base_tables != full_tables  # the history does change between the two days
    assert incremental["rows"] == full["rows"]
    # Day one's file is not read again; day two's events are all this run reads.
    assert incremental["files"]["skipped_because"] == {"already applied by the base": 1}
    assert incremental["files"]["read"] == 1
    # (DataHub TUPLE lands an update as two records; the first is ignored as a before image.)
    assert incremental["events"]["read"] - incremental["events"]["ignored"] == sum(
        1 for c in changes if c.ms > AS_OF_1
    )
    assert incremental["events"]["after_as_of"] == sum(1 for c in changes if c.ms > AS_OF_2)
    assert_events_add_up(incremental)
    (table,) = full["tables"]
    assert incremental["tables"][table]["last_event_ms"] == full["tables"][table]["last_event_ms"]


def test_a_chain_of_daily_runs_with_metadata_equals_the_full_rebuild(spark, tmp_path):
    fmt = "debezium-json"
    changes = history(random.Random("chain"), ENCODERS[fmt])
    landing = land_days(ENCODERS[fmt], tmp_path, changes)
    snapshot(spark, fmt, landing, tmp_path / "d1", AS_OF_1, keep_state=True, with_metadata=True)
    middle, _ = snapshot(
        spark, fmt, landing, tmp_path / "d2", T0 + 45_500, base=str(tmp_path / "d1"), with_metadata=True
    )
    last, tables = snapshot(
        spark, fmt, landing, tmp_path / "d3", AS_OF_2, base=str(tmp_path / "d2"), with_metadata=True
    )
    _, full_tables = snapshot(spark, fmt, landing, tmp_path / "full", AS_OF_2, with_metadata=True)

    assert (middle["mode"], last["mode"]) == ("incremental", "incremental")
    # Day two's file is read by both later runs: it also held events after the middle run's AS OF.
    assert last["files"]["read"] == 1 and last["events"]["ignored"] == sum(
        1 for c in changes if AS_OF_1 < c.ms <= T0 + 45_500
    )
    assert last["ignored"] == {"applied by the base snapshot": last["events"]["ignored"]}
    assert tables == full_tables
    ((columns, rows),) = tables.values()
    assert [c for c, _ in columns][-5:] == [
        "_cdc_op", "_cdc_event_ts", "_cdc_position", "_cdc_file", "_cdc_line",
    ]  # fmt: skip


def late_change(changes: list[Change], *, partial: bool, older_than_base_row: bool) -> Change:
    """An update of day one whose key has (or has not) a later change on day one."""
    for c in changes:
        later_same_day = any(o.key == c.key and c.position < o.position and o.ms <= AS_OF_1 for o in changes)
        if (
            c.op == UPDATE
            and c.ms <= AS_OF_1
            and c.partial == partial
            and later_same_day == older_than_base_row
        ):
            return c
    raise AssertionError("the history has no such change")


def base_without_day_two(spark, fmt: str, landing: Path, output: Path) -> None:
    """The base as built before day two's file (and the late events in it) arrived."""
    day2 = landing / "day2" / "part-0.json"
    held_back = day2.read_text(encoding="utf-8")
    day2.unlink()
    snapshot(spark, fmt, landing, output, AS_OF_1, keep_state=True)
    day2.write_text(held_back, encoding="utf-8")


def test_late_and_reordered_events_are_folded_where_a_full_rebuild_puts_them(spark, tmp_path):
    fmt = "debezium-json"
    changes = history(random.Random(f"late {fmt}"), ENCODERS[fmt])
    # Two updates of day one land on day two: one older than the base's row of its key (superseded
    # by it), one newer (applied on top of it).
    late = {
        late_change(changes, partial=False, older_than_base_row=older).position for older in (True, False)
    }
    landing = land_days(ENCODERS[fmt], tmp_path, changes, late=late)
    # And a day-two change stamped after the base's AS OF at a binlog position older than day one's last (30).
    day2 = landing / "day2" / "part-0.json"
    lines = day2.read_text(encoding="utf-8").splitlines()
    first_new = next(i for i, line in enumerate(lines) if json.loads(line)["source"]["pos"] > 30)
    record = json.loads(lines[first_new])
    record["source"]["pos"] = 3
    lines[first_new] = json.dumps(record)
    day2.write_text("\n".join(lines) + "\n", encoding="utf-8")
    base_without_day_two(spark, fmt, landing, tmp_path / "base")

    metrics, tables = snapshot(spark, fmt, landing, tmp_path / "next", AS_OF_2, base=str(tmp_path / "base"))
    _, full_tables = snapshot(spark, fmt, landing, tmp_path / "full", AS_OF_2)

    assert metrics["mode"] == "incremental", metrics["incremental"]["reason"]
    assert metrics["incremental"]["late_events"] == 2
    assert metrics["files"]["read"] == 1
    assert tables == full_tables


def late_partial_update(spark, tmp_path: Path, *, older_than_base_row: bool) -> tuple[dict, dict, dict, Path]:
    """A Shareplex partial update of day one landing on day two: (metrics, tables, full rebuild's tables, landing)."""
    fmt = "shareplex-json"
    changes = history(random.Random(f"late {fmt}"), ENCODERS[fmt])
    late = late_change(changes, partial=True, older_than_base_row=older_than_base_row)
    landing = land_days(ENCODERS[fmt], tmp_path, changes, late={late.position})
    base_without_day_two(spark, fmt, landing, tmp_path / "base")
    metrics, tables = snapshot(spark, fmt, landing, tmp_path / "next", AS_OF_2, base=str(tmp_path / "base"))
    _, full_tables = snapshot(spark, fmt, landing, tmp_path / "full", AS_OF_2)
    return metrics, tables, full_tables, landing


def test_a_late_partial_image_newer_than_the_base_row_is_applied_on_top_of_it(spark, tmp_path):
    metrics, tables, full_tables, _ = late_partial_update(spark, tmp_path, older_than_base_row=False)

    assert (metrics["mode"], metrics["incremental"]["late_events"]) == ("incremental", 1)
    assert tables == full_tables


def test_a_late_partial_image_older_than_the_base_row_forces_a_full_rebuild(spark, tmp_path):
    metrics, tables, full_tables, landing = late_partial_update(spark, tmp_path, older_than_base_row=True)

    assert (metrics["mode"], metrics["incremental"]["applied"], metrics["incremental"]["reason"]) == (
        "full",
        False,
        "1 key(s) have a partial image older than the base's row of the key (late or out of order)",
    )
    assert metrics["files"] == {
        "read": 2,
        "bytes": sum(p.stat().st_size for p in landing.rglob("*.json")),
        "skipped": 0,
        "bytes_skipped": 0,
        "skipped_because": {},
    }
    assert tables == full_tables


def test_a_late_truncate_forces_a_full_rebuild(spark, tmp_path):
    fmt = "debezium-json"
    landing = land_days(ENCODERS[fmt], tmp_path, history(random.Random("late truncate"), ENCODERS[fmt]))
    day2 = landing / "day2" / "part-0.json"
    truncate = {
        "op": "t",
        "ts_ms": AS_OF_1 - 1_000,
        "before": None,
        "after": None,
        "source": {
            "db": "db",
            "table": "t",
            "ts_ms": AS_OF_1 - 1_000,
            "file": "mysql-bin.000003",
            "pos": 29,
            "row": 1,
        },
    }
    with day2.open("a", encoding="utf-8") as out:
        out.write(json.dumps(truncate) + "\n")
    base_without_day_two(spark, fmt, landing, tmp_path / "base")

    metrics, tables = snapshot(spark, fmt, landing, tmp_path / "next", AS_OF_2, base=str(tmp_path / "base"))
    _, full_tables = snapshot(spark, fmt, landing, tmp_path / "full", AS_OF_2)

    line = len(day2.read_text(encoding="utf-8").splitlines())
    assert (metrics["mode"], metrics["incremental"]["reason"]) == (
        "full",
        f"1 DDL or truncate event(s) the base's rows cannot replay (first: truncate in {day2.as_uri().replace('file:///', 'file:/')} line {line})",
    )
    assert metrics["tables"]["db.t"]["truncates"] == 1
    assert tables == full_tables


def test_a_base_that_cannot_be_used_is_named_in_the_metrics(spark, tmp_path):
    fmt = "debezium-json"
    landing = land_days(ENCODERS[fmt], tmp_path, history(random.Random("unusable"), ENCODERS[fmt]))
    snapshot(spark, fmt, landing, tmp_path / "plain", AS_OF_1)
    snapshot(spark, fmt, landing, tmp_path / "kept", AS_OF_1, keep_state=True)

    reasons = {
        "no state": snapshot(spark, fmt, landing, tmp_path / "a", AS_OF_2, base=str(tmp_path / "plain"))[0],
        "missing": snapshot(
            spark, fmt, landing, tmp_path / "b", AS_OF_2, base=str(tmp_path / "nothing-here")
        )[0],
        "earlier": snapshot(spark, fmt, landing, tmp_path / "c", T0 + 10_000, base=str(tmp_path / "kept"))[0],
    }
    assert {k: (m["mode"], m["incremental"]["reason"]) for k, m in reasons.items()} == {
        "no state": (
            "full",
            f"the base {tmp_path / 'plain'} has no _cdc_state/state.json (missing, or written without --keep-state)",
        ),
        "missing": (
            "full",
            f"the base {tmp_path / 'nothing-here'} has no _cdc_state/state.json (missing, or written without --keep-state)",
        ),
        "earlier": (
            "full",
            "AS OF 2024-09-02T10:00:10+00:00 is before the base's 2024-09-02T10:00:30.500+00:00",
        ),
    }
    # Written with --base, each of them keeps its own state for the next run.
    assert all((tmp_path / name / "_cdc_state" / "state.json").exists() for name in "abc")


def state_rows_of(spark, output: Path) -> list[dict]:
    """``_cdc_state/rows`` as comparable dicts (images as JSON text)."""
    rows = spark.read.parquet(str(output / "_cdc_state" / "rows")).withColumn("image", F.to_json("image"))
    return sorted(
        (r.asDict(recursive=True) for r in rows.collect()), key=lambda r: json.dumps(r, sort_keys=True)
    )


@pytest.mark.parametrize("fmt", ["debezium-json", "shareplex-json"])
def test_base_rows_no_new_event_touches_are_carried_over_unchanged(fmt, spark, tmp_path):
    encoder = ENCODERS[fmt]
    rng = random.Random(f"carried {fmt}")
    # Day two changes only keys 1-3 of t, and nothing of u: every other base row is carried over.
    t = [
        c if c.ms <= AS_OF_1 else Change(c.op, c.key % 3 + 1, c.name, c.qty, c.position, c.partial)
        for c in history(rng, encoder)
    ]
    u = [c for c in history(rng, encoder) if c.ms <= AS_OF_1]
    landing = land_days(encoder, tmp_path, t, others={"u": u})
    end = T0 + 70_000

    snapshot(spark, fmt, landing, tmp_path / "d1", AS_OF_1, keep_state=True, with_metadata=True)
    d2, d2_tables = snapshot(
        spark, fmt, landing, tmp_path / "d2", AS_OF_2, base=str(tmp_path / "d1"), with_metadata=True
    )
    full2, full2_tables = snapshot(
        spark, fmt, landing, tmp_path / "full2", AS_OF_2, keep_state=True, with_metadata=True
    )
    d3, d3_tables = snapshot(
        spark, fmt, landing, tmp_path / "d3", end, base=str(tmp_path / "d2"), with_metadata=True
    )
    _, full3_tables = snapshot(spark, fmt, landing, tmp_path / "full3", end, with_metadata=True)

    assert (d2["mode"], d3["mode"]) == ("incremental", "incremental")
    assert d2_tables == full2_tables and d3_tables == full3_tables
    table_u = encoder.table("u")
    assert d2["tables"][table_u]["events"]["read"] == 0
    assert {name: info["rows"] for name, info in d2["tables"].items()} == {
        name: info["rows"] for name, info in full2["tables"].items()
    }
    assert full2["tables"][table_u]["rows"] > 0
    # What the next run starts from is the same too: the carried rows keep their last event.
    assert state_rows_of(spark, tmp_path / "d2") == state_rows_of(spark, tmp_path / "full2")
    assert_events_add_up(d2)


def test_a_truncate_after_the_base_empties_rows_no_later_event_touches(spark, tmp_path):
    fmt = "debezium-json"
    changes = [
        c if c.ms <= AS_OF_1 else Change(c.op, c.key % 2 + 1, c.name, c.qty, c.position)
        for c in history(random.Random("truncate after base"), ENCODERS[fmt])
    ]
    landing = land_days(ENCODERS[fmt], tmp_path, changes)
    day2 = landing / "day2" / "part-0.json"
    truncate = {
        "op": "t",
        "ts_ms": AS_OF_1 + 100,
        "before": None,
        "after": None,
        "source": {
            "db": "db",
            "table": "t",
            "ts_ms": AS_OF_1 + 100,
            "file": "mysql-bin.000003",
            "pos": 30,
            "row": 1,
        },
    }
    day2.write_text(json.dumps(truncate) + "\n" + day2.read_text(encoding="utf-8"), encoding="utf-8")
    snapshot(spark, fmt, landing, tmp_path / "base", AS_OF_1, keep_state=True)

    metrics, tables = snapshot(spark, fmt, landing, tmp_path / "next", AS_OF_2, base=str(tmp_path / "base"))
    _, full_tables = snapshot(spark, fmt, landing, tmp_path / "full", AS_OF_2)

    assert metrics["mode"] == "incremental"
    assert metrics["tables"]["db.t"]["truncates"] == 1
    assert tables == full_tables
    # Only keys 1 and 2 change after the truncate; every other row of day one is gone.
    ((_, rows),) = tables.values()
    assert {r["id"] for r in rows} <= {1, 2}


def test_a_column_dropped_after_the_base_leaves_rows_no_later_event_touches(spark, tmp_path):
    from tests.formats.test_canal import _ddl

    from reference.records.canal import msg

    fmt = "canal-json"
    types = {"id": "int(11)", "note": "varchar(20)"}
    day1 = [
        msg("INSERT", [{"id": str(k), "note": f"n{k}"}], mysql=types, es=T0 + k * 1000, id_=k)
        for k in (1, 2, 3)
    ]
    day2 = [
        _ddl("ALTER TABLE t DROP note", es=AS_OF_1 + 1000, id_=31),
        msg("INSERT", [{"id": "4"}], mysql={"id": "int(11)"}, es=AS_OF_1 + 2000, id_=32),
        _ddl("ALTER TABLE t ADD note VARCHAR(20)", es=AS_OF_1 + 3000, id_=33),
    ]
    landing = write_days(tmp_path, {"day1": day1, "day2": day2})
    snapshot(spark, fmt, landing, tmp_path / "base", AS_OF_1, keep_state=True)

    metrics, tables = snapshot(spark, fmt, landing, tmp_path / "next", AS_OF_2, base=str(tmp_path / "base"))
    _, full_tables = snapshot(spark, fmt, landing, tmp_path / "full", AS_OF_2)

    assert metrics["mode"] == "incremental"
    assert tables == full_tables
    # The column added back starts empty: the values written before the drop stay dropped.
    assert tables["db.t"][1] == [{"id": k, "note": None} for k in (1, 2, 3, 4)]


def test_a_key_change_after_the_base_moves_a_row_no_other_event_touches(spark, tmp_path):
    fmt = "debezium-json"
    day1 = [Change(INSERT, k, f"n{k}", k, k) for k in range(1, 6)]
    landing = land_days(ENCODERS[fmt], tmp_path, day1)
    moved = {
        "op": "u",
        "ts_ms": AS_OF_1 + 2_000,
        "before": {"id": 5, "name": "n5", "qty": 5},
        "after": {"id": 50, "name": "n5", "qty": 6},
        "source": {
            "db": "db",
            "table": "t",
            "ts_ms": AS_OF_1 + 2_000,
            "file": "mysql-bin.000003",
            "pos": 40,
            "row": 0,
        },
    }
    (landing / "day2" / "part-0.json").write_text(json.dumps(moved) + "\n", encoding="utf-8")
    snapshot(spark, fmt, landing, tmp_path / "base", AS_OF_1, keep_state=True)

    metrics, tables = snapshot(spark, fmt, landing, tmp_path / "next", AS_OF_2, base=str(tmp_path / "base"))
    _, full_tables = snapshot(spark, fmt, landing, tmp_path / "full", AS_OF_2)

    assert metrics["mode"] == "incremental"
    assert tables == full_tables
    assert tables["db.t"][1] == [{"id": k, "name": f"n{k}", "qty": k} for k in range(1, 5)] + [
        {"id": 50, "name": "n5", "qty": 6}
    ]
    assert (metrics["tables"]["db.t"]["updates"], metrics["rows"]) == (1, 5)

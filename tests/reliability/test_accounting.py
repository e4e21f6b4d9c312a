"""Every record accounted for: generated histories with injected faults, in every source format.

Each run lands several random histories (one table each) with the faults of
``histories.FAULT_KINDS`` and checks, against a plain Python fold of the same history, the exact
rows of every table, every count of ``_cdc_metrics.json`` (in total and per table), the identity
``read = applied + after_as_of + ignored + duplicates + quarantined``, and every quarantined
record: its file, line, reason and raw text.
"""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import assert_events_add_up

from reference.histories import ENCODERS, T0, Expected, land, random_history

HISTORIES_PER_RUN = 4
EVENT_KEYS = ("read", "applied", "after_as_of", "ignored", "duplicates", "quarantined")
COUNT_KEYS = ("inserts", "updates", "deletes", "updates_of_unknown_key", "deletes_of_unknown_key")


def quarantine_rows(output: Path) -> list[tuple]:
    parts = sorted((output / "_quarantine").glob("part-*"))
    rows = [json.loads(line) for part in parts for line in part.read_text().splitlines()]
    return sorted(((Path(r["file"]).name, r["line"], r["reason"], r.get("record")) for r in rows), key=repr)


def assert_accounted(
    metrics: dict, tables: dict, output: Path, fmt: str, expected: dict[str, Expected]
) -> None:
    """Compare one run with the expectations of its histories (solving for the damaged files' yield)."""
    encoder = ENCODERS[fmt]
    expected = copy.deepcopy(expected)
    totals: Counter = Counter()
    reasons: Counter = Counter()
    ignored: Counter = Counter()
    quarantine: list[tuple] = []
    assert sorted(metrics["tables"]) == sorted(encoder.table(h) for h in expected)
    for history, exp in expected.items():
        table = encoder.table(history)
        info = metrics["tables"][table]
        delivered = info["events"]["read"] - exp.table_events["read"]
        assert 0 <= delivered <= exp.damaged_copies, (table, delivered)
        exp.damaged_rest(delivered)
        assert tables[table] == exp.rows, table
        assert info["events"] == {k: exp.table_events[k] for k in EVENT_KEYS}, table
        assert {k: info[k] for k in COUNT_KEYS} == {k: exp.counts[k] for k in COUNT_KEYS}, table
        assert info["rows"] == len(exp.rows)
        assert_events_add_up(info)
        totals.update(exp.events)
        reasons.update(exp.quarantine_reasons)
        ignored.update(exp.ignored_reasons)
        quarantine.extend(exp.quarantine)
    assert metrics["events"] == {k: totals[k] for k in EVENT_KEYS}
    assert_events_add_up(metrics)
    assert metrics["quarantine"]["reasons"] == dict(reasons)
    assert metrics["ignored"] == dict(ignored)
    assert quarantine_rows(output) == sorted(quarantine, key=repr)


@pytest.mark.parametrize("fmt", sorted(ENCODERS))
def test_every_record_is_accounted_for(fmt, replay, tmp_path):
    rng = random.Random(fmt)
    landing = tmp_path / "in"
    landing.mkdir()
    as_of_ms = T0 + rng.randint(5, 12) * 1000 + 500
    expected = {
        f"h{i}": land(ENCODERS[fmt], landing, f"h{i}", random_history(rng), as_of_ms, rng)
        for i in range(HISTORIES_PER_RUN)
    }
    output = tmp_path / "out"
    metrics, tables = replay(fmt, landing, as_of_ms, key=list(ENCODERS[fmt].key), output=output)
    assert_accounted(metrics, tables, output, fmt, expected)

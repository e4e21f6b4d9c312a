"""An Airflow retry runs the same command into the same output: it succeeds with the same result,
for full, kept-state, incremental, history and several-AS-OF runs, and after a run killed halfway
(its staging folder and lock left behind)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from tests.conftest import debezium_specs, rows_of, write_jsonl
from tests.replay.test_semantics import dbz

from airflow_cdc_provider.replay.output_lock import LOCK_MARK, LockHolder
from airflow_cdc_provider.replay.runs.history import run_history
from airflow_cdc_provider.replay.runs.many_as_ofs import run_snapshots
from airflow_cdc_provider.replay.runs.snapshot import run_snapshot
from airflow_cdc_provider.replay.spec import SnapshotSpec
from reference.histories import T0

_DAY = 86_400_000


@pytest.fixture(scope="module")
def landing(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("retries")
    write_jsonl(
        root / "landing" / "dt=2024-09-02" / "a.json",
        [dbz("c", 1, T0, name="a"), dbz("c", 2, T0 + 1000, name="b"), dbz("u", 1, T0 + 2000, name="a2")],
    )
    write_jsonl(
        root / "landing" / "dt=2024-09-03" / "a.json",
        [dbz("u", 2, T0 + _DAY, name="b2"), dbz("d", 1, T0 + _DAY + 1000), dbz("c", 3, T0 + _DAY + 2000)],
    )
    return root


def _specs(landing: Path, output: str, as_of: list[int], **options) -> list[SnapshotSpec]:
    return debezium_specs(landing / "landing", output, as_of, **options)


def _result(spark, metrics: dict) -> tuple[dict, dict]:
    """What a reader sees: the metrics less when they were written, and every table's rows."""
    content = {k: v for k, v in metrics.items() if k != "written_at"}
    return content, {t: rows_of(spark, info["path"]) for t, info in metrics["tables"].items()}


def _full(spark, landing, out):
    return [run_snapshot(spark, _specs(landing, out, [T0 + 3000])[0])]


def _kept(spark, landing, out):
    return [run_snapshot(spark, _specs(landing, out, [T0 + 3000], keep_state=True)[0])]


def _incremental(spark, landing, out):
    base = str(landing / "base")
    if not (landing / "base").exists():
        run_snapshot(spark, _specs(landing, base, [T0 + 3000], keep_state=True)[0])
    return [run_snapshot(spark, _specs(landing, out, [T0 + 2 * _DAY], base_path=base)[0])]


def _history(spark, landing, out):
    return [run_history(spark, _specs(landing, out, [T0 + 2 * _DAY])[0])]


def _several(spark, landing, out):
    return run_snapshots(spark, _specs(landing, out + "/{as_of:%Y%m%d}", [T0 + 3000, T0 + 2 * _DAY]))


RUNS = {
    "full": _full,
    "kept state": _kept,
    "incremental": _incremental,
    "history": _history,
    "several": _several,
}


def _leave_a_killed_run(output: Path) -> None:
    """What ``kill -9`` of a run leaves: its hidden staging folder half written, its lock, a dead pid."""
    staging = output.parent / f".{output.name}.cdc-staging-deadbeef0000"
    (staging / "db.shop").mkdir(parents=True)
    (staging / "db.shop" / "part-00000.parquet").write_bytes(b"half a file")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    holder = LockHolder("deadbeef0000", socket.gethostname(), int(dead.stdout), "2024-09-02T00:00:00+00:00")
    (output.parent / f".{output.name}{LOCK_MARK}").write_text(json.dumps(asdict(holder)))


@pytest.mark.parametrize("kind", sorted(RUNS))
def test_a_retry_into_the_same_output_gives_the_same_result(kind, spark, landing):
    """The retry finds what a killed attempt leaves (a half-written staging folder, its lock) on
    top of the earlier attempt's complete output, as a retry after a kill in the commit does."""
    out = landing / "out" / kind.replace(" ", "-")
    first = [_result(spark, m) for m in RUNS[kind](spark, landing, str(out))]
    for metrics in first:  # every snapshot has rows: the comparison is not of empty outputs
        assert metrics[0]["rows"] > 0
    written = Path(first[0][0]["output"].removeprefix("file:"))
    _leave_a_killed_run(written)
    retried = [_result(spark, m) for m in RUNS[kind](spark, landing, str(out))]
    assert retried == first
    assert not any(p.name.startswith(f".{written.name}.") for p in written.parent.iterdir())

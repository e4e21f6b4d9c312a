"""Atomic output: a killed run leaves the previous snapshot whole; two runs never mix.

The kill test runs the real ``cdc-replay`` command in its own process group, waits until it is
writing tables into its staging folder, and kills it with SIGKILL (Python driver and JVM). The
lock tests take the real lock file through Hadoop's FileSystem, from threads of this process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CDC_REPLAY, rows_of, write_jsonl
from tests.replay.test_semantics import T0, dbz

from airflow_cdc_provider.replay import output_lock
from airflow_cdc_provider.replay.output import OutputLockedError, OutputTarget
from airflow_cdc_provider.replay.output_lock import LockHolder, OutputBusyError

TABLES = [f"t{i:02d}" for i in range(10)]
SECRET = "row-value-7f3a9-never-logged"


def wait_for(condition: Callable[[], object], what: str, timeout: float = 120.0, proc=None) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"cdc-replay exited ({proc.returncode}) before {what}:\n{proc.stdout.read()}")
        time.sleep(0.02)
    pytest.fail(f"timed out waiting for {what}")


def leftovers(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}.cdc-"))


def snapshot_state(spark, output: Path) -> tuple:
    """Everything a reader of OUTPUT sees: its entries, its metrics, and every table's rows."""
    metrics = json.loads((output / "_cdc_metrics.json").read_text())
    return (
        sorted(p.name for p in output.iterdir()),
        metrics,
        {t: rows_of(spark, output / t) for t in metrics["tables"]},
    )


@pytest.mark.slow
def test_second_run_is_refused_and_a_run_killed_while_writing_leaves_the_previous_snapshot(
    spark, replay, tmp_path
):
    landed = tmp_path / "in"
    for n, table in enumerate(TABLES):
        write_jsonl(
            landed / f"{table}.json",
            [
                dbz("c", 1, T0, table=table, name="first"),
                dbz("u", 1, T0 + 1000 + n, table=table, name="second"),
            ],
        )
    write_jsonl(landed / "bad.json", [f"not JSON, holding {SECRET}"])
    output = tmp_path / "snap"
    previous, _ = replay("debezium-json", landed, as_of=T0, key="id", output=output)
    seen_before = snapshot_state(spark, output)

    run = subprocess.Popen(
        [
            str(CDC_REPLAY),
            "snapshot",
            "--format",
            "debezium-json",
            "--input",
            str(landed),
            "--as-of",
            str(T0 + 60_000),
            "--output",
            str(output),
            "--key",
            "id",
            "--master",
            "local[1]",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    try:
        lock = tmp_path / ".snap.cdc-lock"
        wait_for(lock.exists, "the run took the lock", proc=run)
        holder = LockHolder(**json.loads(lock.read_text()))
        assert (holder.host, holder.pid) == (socket.gethostname(), run.pid)

        # A second run to the same output is refused, naming the run that holds it.
        with pytest.raises(OutputLockedError) as refused:
            replay("debezium-json", landed, as_of=T0, key="id", output=output)
        assert str(refused.value) == (
            f"refusing to write file:{output}: output is being written by another cdc-replay run {holder.run_id} "
            f"(host {holder.host}, pid {run.pid}, since {holder.started_at}); wait for it to finish. If no run is "
            f"writing it, delete the lock file file:{lock} (a lock left by a killed run is taken over "
            f"automatically after 120 s without a heartbeat)"
        )

        def writing() -> bool:
            staging = [p for p in tmp_path.glob(".snap.cdc-staging-*")]
            written = sum((s / f"db.{t}" / "_SUCCESS").exists() for s in staging for t in TABLES)
            return bool(staging) and written >= 2

        wait_for(writing, "the run was writing its tables", proc=run)
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        log = run.communicate()[0]
    assert run.returncode == -signal.SIGKILL

    # Killed mid-write: the previous snapshot is untouched, no partial table is visible.
    assert snapshot_state(spark, output) == seen_before
    assert [name.split("-")[0] for name in leftovers(tmp_path, "snap")] == [".snap.cdc", ".snap.cdc"]
    assert SECRET not in log

    # The next run takes over the dead run's lock, removes its staging folder and wins whole.
    metrics, tables = replay("debezium-json", landed, as_of=T0 + 60_000, key="id", output=output)
    assert tables == {f"db.{t}": [{"id": 1, "name": "second"}] for t in TABLES}
    assert metrics["events"]["applied"] == 2 * len(TABLES) and metrics["quarantine"]["reasons"] == {
        "not JSON": 1
    }
    assert leftovers(tmp_path, "snap") == []
    assert previous["tables"].keys() == metrics["tables"].keys()


def fabricate_snapshot(folder: Path, table: str = "db.t") -> None:
    """A folder as a finished run leaves it (contents are not read by the output layer)."""
    (folder / table).mkdir(parents=True)
    (folder / table / "part-00000.parquet").write_bytes(b"PAR1")
    (folder / "_cdc_metrics.json").write_text(json.dumps({"tables": {table: {"rows": 1}}}))


def test_a_run_killed_between_the_two_renames_is_repaired_by_the_next(spark, tmp_path):
    output = tmp_path / "snap"
    fabricate_snapshot(output)
    # Killed after moving the previous snapshot aside and before moving the new one in.
    output.rename(tmp_path / ".snap.cdc-old-0123456789ab")
    (tmp_path / ".snap.cdc-staging-0123456789ab" / "db.t" / "_temporary").mkdir(parents=True)

    target = OutputTarget(spark, str(output))
    with target.exclusive():
        assert sorted(p.name for p in output.iterdir()) == ["_cdc_metrics.json", "db.t"]
        assert leftovers(tmp_path, "snap") == [".snap.cdc-lock"]
        Path(target.staging_uri().removeprefix("file:")).mkdir()
    assert leftovers(tmp_path, "snap") == []

    # A run that fails also removes its own staging folder and releases the lock; OUTPUT stays.
    target = OutputTarget(spark, str(output))
    with pytest.raises(RuntimeError, match="boom"), target.exclusive():
        Path(target.staging_uri("db.t").removeprefix("file:")).mkdir(parents=True)
        raise RuntimeError("boom")
    assert leftovers(tmp_path, "snap") == []
    assert (output / "db.t" / "part-00000.parquet").exists()


def test_the_lock_admits_exactly_one_of_many_concurrent_runs(spark, tmp_path):
    output = str(tmp_path / "snap")
    targets = [OutputTarget(spark, output) for _ in range(8)]
    start = threading.Barrier(len(targets))
    outcome: dict[int, str] = {}

    def take(i: int) -> None:
        start.wait()
        try:
            targets[i].lock.acquire()
            outcome[i] = "won"
        except OutputBusyError:
            outcome[i] = "refused"

    threads = [threading.Thread(target=take, args=(i,)) for i in range(len(targets))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcome.values()) == ["refused"] * 7 + ["won"]
    (winner,) = [i for i, o in outcome.items() if o == "won"]
    assert targets[winner].lock.read().run_id == targets[winner].run_id
    targets[winner].lock.release()
    assert not (tmp_path / ".snap.cdc-lock").exists()


def test_stale_locks_are_taken_over_and_live_ones_are_not(spark, tmp_path):
    output = str(tmp_path / "snap")
    lock = tmp_path / ".snap.cdc-lock"

    def plant(holder: LockHolder, age_seconds: float) -> None:
        lock.write_text(json.dumps(holder.__dict__))
        stamp = time.time() - age_seconds
        os.utime(lock, (stamp, stamp))

    def attempt() -> str:
        target = OutputTarget(spark, output)
        try:
            target.lock.acquire()
        except OutputBusyError:
            return "refused"
        target.lock.release()
        return "taken over"

    here, elsewhere = socket.gethostname(), "another-host.example"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    cases = [
        (
            LockHolder("r1", here, int(dead.stdout), "2026-01-01T00:00:00+00:00"),
            1.0,
            "taken over",
        ),  # holder died
        (LockHolder("r2", here, os.getpid(), "2026-01-01T00:00:00+00:00"), 1.0, "refused"),  # alive here
        (LockHolder("r3", elsewhere, 1, "2026-01-01T00:00:00+00:00"), 5.0, "refused"),  # heartbeat is recent
        (
            LockHolder("r4", elsewhere, 1, "2026-01-01T00:00:00+00:00"),
            output_lock.STALE_AFTER_SECONDS + 60,
            "taken over",
        ),  # no heartbeat for too long
    ]
    for holder, age, result in cases:
        plant(holder, age)
        assert attempt() == result, holder
    lock.write_text("")  # a run creating its lock right now: not yet readable
    assert attempt() == "refused"
    os.utime(lock, (time.time() - output_lock.STALE_AFTER_SECONDS - 60,) * 2)  # killed while creating it
    assert attempt() == "taken over"
    assert leftovers(tmp_path, "snap") == []

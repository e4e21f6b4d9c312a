"""Time ``cdc-replay`` from a cold start: a new process and JVM each run, as an Airflow task pays it.

    python -m benchmarks.cold                    # the bundled sample, median of 3, as a user runs it
    python -m benchmarks.cold --without-archive  # the same, as if no class archive were built
    python -m benchmarks.cold --daily /tmp/bench1d/landed   # a daily run against a full rebuild

The target for the quickstart's 305 events is 10 s of wall clock, session start included.
Each run is a fresh ``cdc-replay snapshot`` process (the console script beside this interpreter);
the sample's row counts are checked against ``sample_data/expected.json``. ``--without-archive``
points ``CDC_REPLAY_CACHE_DIR`` at an empty folder, so the driver's JVM starts without the class
archive of ``contract/jvm.py`` and the figure shows what the archive is worth.

``--daily LANDING`` takes a ``--layout two-days`` landing of ``benchmarks.generate``: it builds
yesterday's snapshot once (as of the landing's cut, with ``--keep-state``, untimed), then times, in
alternating fresh processes, today's full rebuild (c), today's run from yesterday's snapshot (e,
``--base``), both as of the landing's AS OF and checked against ``_expected.json``, and, for a
Debezium landing, the hand-written window job (b) as a plain PySpark process of its own (its
session built with ``SparkSession.builder``, the same master and driver memory): cold c/b; with
``--prototype`` also the prototype rebuild (v) the same way: the design's floor, cold.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from airflow_cdc_provider.contract.jvm import CACHE_DIR_ENV, LOCAL_DRIVER_MEMORY
from airflow_cdc_provider.sample_data import SAMPLE_EXPECTED, replay_arguments
from benchmarks.generate import read_expected

CDC_REPLAY = Path(sys.executable).with_name("cdc-replay")


def timed_process(command: list[str], env: dict[str, str], what: str) -> float:
    """Run ``command`` in a new process; its wall clock in seconds. Fails with its stderr's tail."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds


def cold_run(arguments: list[str], out: Path, env: dict[str, str]) -> tuple[float, dict]:
    """One ``cdc-replay`` run writing ``out`` in its own process; its wall clock in seconds and metrics."""
    seconds = timed_process([str(CDC_REPLAY), *arguments, "--quiet"], env, "cdc-replay")
    return seconds, json.loads((out / "_cdc_metrics.json").read_text())


def check_rows(metrics: dict, want: dict[str, int], what: str) -> None:
    got = {name: table["rows"] for name, table in metrics["tables"].items()}
    if got != want:
        raise RuntimeError(f"{what}: rows {got}, expected {want}")


def sample(work: Path, env: dict[str, str], repeat: int) -> list[float]:
    """Cold runs of the bundled sample."""
    expected = json.loads(SAMPLE_EXPECTED.read_text())
    want = {name: table["rows"] for name, table in expected["tables"].items()}
    runs = []
    for i in range(repeat):
        out = work / f"run-{i}"
        seconds, metrics = cold_run(replay_arguments(str(out)), out, env)
        check_rows(metrics, want, "the sample")
        runs.append(seconds)
    return runs


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def landing_arguments(landing: Path, expected: dict, as_of_ms: int, out: Path) -> list[str]:
    """``cdc-replay snapshot`` of a generated landing as of ``as_of_ms`` into ``out``."""
    return [
        *("snapshot", "--format", expected["workload"]["source_format"], "--input", str(landing)),
        *("--as-of", _iso(as_of_ms), "--key", ",".join(expected["key"]), "--output", str(out)),
    ]


# The generator's Debezium envelope, as a data engineer declares it in a hand-written job.
DEBEZIUM_SCHEMA = (
    "op STRING, ts_ms BIGINT, before STRUCT<id: BIGINT, name: STRING, qty: BIGINT>, "
    "after STRUCT<id: BIGINT, name: STRING, qty: BIGINT>, "
    "source STRUCT<db: STRING, table: STRING, ts_ms: BIGINT, file: STRING, pos: BIGINT, row: BIGINT>"
)


def plain_process(job: str, landing: Path, out: Path) -> None:
    """The child of a cold (b) or (v) run: a plain PySpark session and the hand-written ``job``
    (``window``: ``benchmarks.run.window_job``; ``prototype``: ``benchmarks.prototype.prototype_job``)."""
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from benchmarks.prototype import prototype_job
    from benchmarks.run import Landing, window_job

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", LOCAL_DRIVER_MEMORY)  # as cdc-replay's local driver
        .getOrCreate()
    )
    try:
        opened = Landing.open(landing)
        if job == "window":
            window_job(spark, opened, StructType.fromDDL(DEBEZIUM_SCHEMA), out)
        else:
            (key,) = opened.expected["key"]
            prototype_job(spark, list(opened.files), opened.expected["as_of_ms"], key, out)
    finally:
        spark.stop()


def cold_plain(job: str, landing: Path, out: Path, env: dict[str, str]) -> float:
    """One cold (b) or (v) in its own process; its wall clock in seconds."""
    command = [sys.executable, "-m", "benchmarks.cold", "--plain-job", job, str(landing), str(out)]
    return timed_process(command, env, f"the {job} job")


def daily(
    landing: Path, work: Path, env: dict[str, str], repeat: int, with_prototype: bool = False
) -> tuple[dict[str, list[float]], dict]:
    """The runs of each measurement (``b``, ``v`` with ``with_prototype``, ``c``, ``e``) and the last
    daily run's metrics; (b) and (v) only for a Debezium landing."""
    expected = read_expected(landing)
    if expected is None or "cut_ms" not in expected:
        raise SystemExit(f"{landing} is not a --layout two-days landing of benchmarks.generate")
    want = {name: n for name, n in expected["tables"].items()}
    base = work / "yesterday"
    cold_run([*landing_arguments(landing, expected, expected["cut_ms"], base), "--keep-state"], base, env)
    plain = ["window", *(["prototype"] * with_prototype)]
    if expected["workload"]["source_format"] != "debezium-json":
        plain = []
    runs: dict[str, list[float]] = {name: [] for name in ("b", "v", "c", "e")}
    metrics: dict = {}
    for i in range(repeat):
        for job in plain:
            runs["b" if job == "window" else "v"].append(cold_plain(job, landing, work / f"{job}-{i}", env))
        out = work / f"full-{i}"
        seconds, metrics = cold_run(landing_arguments(landing, expected, expected["as_of_ms"], out), out, env)
        check_rows(metrics, want, "the full rebuild")
        runs["c"].append(seconds)
        out = work / f"daily-{i}"
        arguments = [*landing_arguments(landing, expected, expected["as_of_ms"], out), "--base", str(base)]
        seconds, metrics = cold_run(arguments, out, env)
        check_rows(metrics, want, "the run from yesterday's snapshot")
        if metrics["mode"] != "incremental":
            raise RuntimeError(
                f"the daily run fell back to a full rebuild: {metrics['incremental']['reason']}"
            )
        runs["e"].append(seconds)
    return runs, metrics


def _shown(runs: list[float]) -> str:
    return f"median {statistics.median(runs):.2f} s ({', '.join(f'{s:.2f}' for s in runs)})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cold", description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="cold runs; the median counts (default 3)")
    parser.add_argument(
        "--without-archive", action="store_true", help="start each JVM without the class archive"
    )
    parser.add_argument(
        "--daily",
        type=Path,
        metavar="LANDING",
        help="a two-days landing: time a daily run against a full rebuild",
    )
    parser.add_argument(
        "--prototype",
        action="store_true",
        help="with --daily: also the prototype rebuild (v) in a plain process",
    )
    parser.add_argument("--plain-job", nargs=3, help=argparse.SUPPRESS)  # a cold (b) or (v)'s child
    args = parser.parse_args(argv)
    if args.plain_job:
        plain_process(args.plain_job[0], Path(args.plain_job[1]), Path(args.plain_job[2]))
        return 0
    archive = "without the class archive" if args.without_archive else "with the class archive (if built)"
    with tempfile.TemporaryDirectory(prefix="cdc-cold-") as work:
        env = dict(os.environ)
        if args.without_archive:
            env[CACHE_DIR_ENV] = str(Path(work, "no-archive"))
        if args.daily is None:
            runs = sample(Path(work), env, args.repeat)
            print(f"cold cdc-replay on the bundled sample, {archive}: {_shown(runs)}")
            return 0
        runs, metrics = daily(args.daily, Path(work), env, args.repeat, args.prototype)
    files = metrics["files"]
    median = {name: statistics.median(r) for name, r in runs.items() if r}
    print(f"cold cdc-replay on {args.daily}, {archive}, alternating:")
    if runs["b"]:
        print(f"  (b) window job, plain PySpark:     {_shown(runs['b'])}")
    if runs["v"]:
        print(f"  (v) prototype, plain PySpark:      {_shown(runs['v'])}")
    print(f"  (c) full rebuild:                  {_shown(runs['c'])}")
    print(
        f"  (e) from yesterday's snapshot:     {_shown(runs['e'])}; read {files['read']} file(s), "
        f"skipped {files['skipped']}"
    )
    ratios = [f"e/c cold {median['e'] / median['c']:.2f}"]
    ratios += [f"c/b cold {median['c'] / median['b']:.2f}"] if "b" in median else []
    ratios += (
        [f"v/b cold {median['v'] / median['b']:.2f}", f"c/v cold {median['c'] / median['v']:.2f}"]
        if "v" in median
        else []
    )
    print("  " + "   ".join(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time ``cdc-replay`` on the bundled sample from a cold start: a new process and JVM each run.

    python -m benchmarks.cold                    # median of 3, as a user runs it
    python -m benchmarks.cold --without-archive  # the same, as if no class archive were built

The target for the quickstart's 305 events is 12 s of wall clock, session start included.
Each run is a fresh ``cdc-replay snapshot`` process (the console script beside this interpreter);
its row counts are checked against ``sample_data/expected.json``. ``--without-archive`` points
``CDC_REPLAY_CACHE_DIR`` at an empty folder, so the driver's JVM starts without the class archive
of ``contract/jvm.py`` and the figure shows what the archive is worth.
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
from pathlib import Path

from airflow_cdc_provider.contract.jvm import CACHE_DIR_ENV
from airflow_cdc_provider.sample_data import SAMPLE_EXPECTED, replay_arguments

CDC_REPLAY = Path(sys.executable).with_name("cdc-replay")


def cold_run(out: Path, env: dict[str, str]) -> float:
    """One ``cdc-replay snapshot`` of the sample in its own process; its wall clock in seconds."""
    started = time.perf_counter()
    done = subprocess.run(
        [str(CDC_REPLAY), *replay_arguments(str(out))],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"cdc-replay failed ({done.returncode}): {done.stderr[-2000:]}")
    metrics = json.loads((out / "_cdc_metrics.json").read_text())
    expected = json.loads(SAMPLE_EXPECTED.read_text())
    got = {name: table["rows"] for name, table in metrics["tables"].items()}
    want = {name: table["rows"] for name, table in expected["tables"].items()}
    if got != want:
        raise RuntimeError(f"the sample's rows differ from expected.json: {got} != {want}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cold", description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="cold runs; the median counts (default 3)")
    parser.add_argument(
        "--without-archive", action="store_true", help="start each JVM without the class archive"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cdc-cold-") as work:
        env = dict(os.environ)
        if args.without_archive:
            env[CACHE_DIR_ENV] = str(Path(work, "no-archive"))
        runs = [cold_run(Path(work, f"run-{i}"), env) for i in range(args.repeat)]
    archive = "without the class archive" if args.without_archive else "with the class archive (if built)"
    shown = ", ".join(f"{s:.2f}" for s in runs)
    print(
        f"cold cdc-replay on the bundled sample, {archive}: median {statistics.median(runs):.2f} s ({shown})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a user reads on a plain ``cdc-replay`` run: the job's own lines on stderr (its progress, its
log), the metrics JSON alone on stdout, and none of Spark's start-up noise unless ``--verbose``.
Under spark-submit (Airflow's task log: not a terminal) the progress comes as plain lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CDC_REPLAY

from airflow_cdc_provider.sample_data import replay_arguments

# Lines Spark, the JVM and PySpark print on a plain start that a user of the job can do nothing about.
NOISE = (
    "WARN Utils",  # host name resolves to loopback; the UI's port taken by another Spark
    "NativeCodeLoader",
    "log4j",  # "Using Spark's default log4j profile"
    "Setting default log level",
    "Using incubator modules",
    "pandas",  # PySpark's warning about an untested pandas release
    "Truncated the string representation of a plan",
    "Broadcasting large task binary",
    "py4j",
)
PHASES = ("starting", "listing", "decoding", "fold", "typing", "writing", "done")


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "SPARK_REMOTE"):
        env.pop(name, None)
    return env


def _replay(output: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(CDC_REPLAY), *replay_arguments(str(output)), *options],
        capture_output=True,
        text=True,
        env=_environment(),
        timeout=600,
    )


def _phases(stderr: str) -> list[str]:
    return [
        line.split("] ", 1)[1].split(":")[0]
        for line in stderr.splitlines()
        if line.startswith("cdc-replay [") and ": stage" not in line
    ]


def test_a_plain_run_shows_its_own_lines_and_none_of_sparks_start_up_noise(tmp_path):
    done = _replay(tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"] == 83  # stdout is the metrics document and nothing else
    for noise in NOISE:
        assert noise not in done.stderr, (noise, done.stderr)
    assert _phases(done.stderr) == list(PHASES), done.stderr
    assert "━" not in done.stderr and "\r" not in done.stderr  # not a terminal: no bar


def test_verbose_brings_sparks_own_log_back(tmp_path):
    done = _replay(tmp_path / "out", "--verbose")
    assert done.returncode == 0, done.stderr
    assert "Using Spark's default log4j profile" in done.stderr
    assert _phases(done.stderr) == list(PHASES)
    assert json.loads(done.stdout)["rows"] == 83


@pytest.mark.slow
def test_under_spark_submit_the_task_log_gets_plain_progress_lines(tmp_path):
    """As the hook runs it: spark-submit's output, stdout and stderr together, not a terminal."""
    application = Path(__file__).resolve().parents[2] / "airflow_cdc_provider" / "jobs" / "spark_app.py"
    submit = Path(sys.executable).with_name("spark-submit")
    arguments = replay_arguments(str(tmp_path / "out"))[1:]  # spark_app.py: a snapshot's arguments
    done = subprocess.run(
        [str(submit), "--master", "local[2]", "--conf", "spark.log.level=WARN", str(application), *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # As the hook's submit_env: spark-submit finds SPARK_HOME through this interpreter's python3.
        env={**_environment(), "PATH": os.pathsep.join([str(submit.parent), os.environ.get("PATH", "")])},
        timeout=600,
    )
    assert done.returncode == 0, done.stdout
    assert _phases(done.stdout) == list(PHASES), done.stdout
    assert "━" not in done.stdout and "\r" not in done.stdout

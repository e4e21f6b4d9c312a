"""``cdc-replay --remote``: the stage progress Spark Connect reports with each execution reaches the
job's plain progress lines, on stderr; stdout holds the metrics alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from airflow_cdc_provider.sample_data import replay_arguments

# The command line with its plain lines at most every half second instead of five: the sample's
# executions are short, and a stage line shows only while one runs.
_CLI = textwrap.dedent(
    """
    import sys
    from airflow_cdc_provider.spark import progress
    progress.PLAIN_INTERVAL = 0.5
    from airflow_cdc_provider.jobs.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.slow
def test_a_remote_run_reports_spark_connects_stage_progress(connect_url, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_GATEWAY_PORT", "SPARK_REMOTE")}
    done = subprocess.run(
        [sys.executable, "-c", _CLI, *replay_arguments(str(tmp_path / "out")), "--remote", connect_url],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"] == 83
    lines = [line for line in done.stderr.splitlines() if line.startswith("cdc-replay [")]
    assert any(line.endswith("starting: Spark Connect session") for line in lines), lines
    assert connect_url not in done.stderr
    stage_lines = [line for line in lines if ": stage" in line]
    assert stage_lines, done.stderr
    assert all(" tasks, " in line and " running" in line for line in stage_lines)

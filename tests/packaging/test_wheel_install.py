"""A plain ``pip install`` of the built wheel, in a fresh venv, gives a working product.

No second command: the installed PySpark is consistent (Python package = jars = the JVM's
``spark.version``), ``cdc-replay formats`` runs, and the quickstart's sample rebuilds from the
installed package, not from this source tree (everything runs from a temporary folder). The first
run downloads the dependencies (about 2 minutes); later ones take them from pip's cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_cdc_provider.contract.args import FORMAT_NAMES

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SAMPLE_AS_OF = "2024-09-02T09:00:00+00:00"


def _run(args: list[str], cwd: Path, timeout: int, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
        pytest.fail(f"{' '.join(args[:4])} ... exited {done.returncode}:\n{tail}")
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with only the built wheel installed (and what it depends on); returns its bin/."""
    work = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-w", str(work / "dist")], work, 600)
    (wheel,) = (work / "dist").glob("airflow_cdc_provider-*.whl")
    _run([sys.executable, "-m", "venv", str(work / "venv")], work, 300)
    bin_dir = work / "venv" / "bin"
    _run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--disable-pip-version-check", str(wheel)],
        work,
        1800,
    )
    return bin_dir


def test_one_consistent_pyspark(installed, tmp_path):
    probe = (
        "import glob, json, os, pyspark\n"
        "from pyspark.sql import SparkSession\n"
        "jar = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), 'jars', 'spark-core_*.jar'))[0]\n"
        "spark = (SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false')\n"
        "         .config('spark.driver.host', '127.0.0.1').getOrCreate())\n"
        "print(json.dumps({'python': pyspark.__version__, 'jar': os.path.basename(jar), 'jvm': spark.version}))\n"
        "spark.stop()\n"
    )
    seen = json.loads(_run([str(installed / "python"), "-c", probe], tmp_path, 300).strip().splitlines()[-1])
    pin = next(
        line.split("==")[1].rstrip('",')
        for line in (REPO / "pyproject.toml").read_text().splitlines()
        if line.strip().startswith('"pyspark==')
    )
    assert seen == {"python": pin, "jar": f"spark-core_2.13-{pin}.jar", "jvm": pin}


def test_cdc_replay_formats_from_the_wheel(installed, tmp_path):
    listed = _run([str(installed / "cdc-replay"), "formats"], tmp_path, 120)
    assert tuple(line.split()[0] for line in listed.splitlines()) == FORMAT_NAMES


def test_the_quickstart_sample_rebuilds_from_the_installed_package(installed, tmp_path):
    locate = "import airflow_cdc_provider, os; print(os.path.dirname(airflow_cdc_provider.__file__))"
    package = Path(_run([str(installed / "python"), "-c", locate], tmp_path, 60).strip())
    assert REPO not in package.parents  # the installed copy, not this checkout
    env = {
        **os.environ,
        "PATH": f"{installed}{os.pathsep}{os.environ['PATH']}",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    out = tmp_path / "snapshot"
    _run(
        [
            str(installed / "cdc-replay"),
            "snapshot",
            "--format",
            "debezium-json",
            "--input",
            str(package / "sample_data" / "debezium"),
            "--as-of",
            SAMPLE_AS_OF,
            "--key",
            "id",
            "--output",
            str(out),
            "--master",
            "local[2]",
        ],
        tmp_path,
        600,
        env,
    )
    metrics = json.loads((out / "_cdc_metrics.json").read_text())
    expected = json.loads((package / "sample_data" / "expected.json").read_text())
    assert {t: info["rows"] for t, info in metrics["tables"].items()} == {
        t: info["rows"] for t, info in expected["tables"].items()
    }

"""A real Spark standalone cluster for the tests in this folder: one master, one worker, on loopback.

Both run from the installed PySpark (``SPARK_HOME`` = the ``pyspark`` package folder), started with
``bin/spark-class`` directly: the pip wheel's ``sbin`` scripts are not something to rely on, and
a daemon that ``spark-daemon.sh`` forks would have a process id this fixture does not know.
``spark-class`` ends in ``exec java``, so each Popen's pid *is* the JVM; the finalizer stops both by
those ids. The master listens on ``spark://127.0.0.1:7077``; web UIs use free ports; the worker
gets 1 core and 1 GiB and keeps its work dir in a temporary folder.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

MASTER_HOST = "127.0.0.1"
MASTER_PORT = 7077
MASTER_URL = f"spark://{MASTER_HOST}:{MASTER_PORT}"
WORKER_CORES = 1
WORKER_MEMORY = "1g"
START_TIMEOUT_SECONDS = 120


@dataclass(frozen=True)
class StandaloneCluster:
    master_url: str
    master_ui: str  # http://127.0.0.1:<port>
    master_pid: int
    worker_pid: int
    work_dir: Path

    def state(self) -> dict:
        """The master's JSON status page (workers, active and completed applications)."""
        with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=5) as response:
            return json.load(response)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((MASTER_HOST, 0))
        return sock.getsockname()[1]


def _port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((MASTER_HOST, port)) == 0


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    spark_class = _spark_home() / "bin" / "spark-class"
    with log.open("wb") as out:
        return subprocess.Popen([str(spark_class), *args], stdout=out, stderr=subprocess.STDOUT, env=env)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the JVM's process id; SIGKILL if it is still there after 20 s."""
    if process.poll() is not None:
        return
    os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()


def _wait_for(what: str, condition, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"{what}: the process exited ({process.returncode}):\n{log.read_text()[-3000:]}"
            )
        try:
            if condition():
                return
        except OSError:
            pass  # the web UI is not up yet
        time.sleep(0.5)
    raise RuntimeError(f"{what}: not ready after {START_TIMEOUT_SECONDS} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    if _port_in_use(MASTER_PORT):
        pytest.fail(f"port {MASTER_PORT} on {MASTER_HOST} is already in use; the standalone test needs it")
    work = tmp_path_factory.mktemp("spark-standalone")
    env = {
        **os.environ,
        "SPARK_HOME": str(_spark_home()),
        "SPARK_LOCAL_IP": MASTER_HOST,
        "SPARK_DAEMON_MEMORY": "512m",
        # Executors start Python workers with this interpreter, which has the package.
        "PYSPARK_PYTHON": sys.executable,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    master_ui_port, worker_ui_port = _free_port(), _free_port()
    master_log, worker_log = work / "master.log", work / "worker.log"
    master = _start(
        ["org.apache.spark.deploy.master.Master", "--host", MASTER_HOST, "--port", str(MASTER_PORT),
         "--webui-port", str(master_ui_port)],
        master_log, env,
    )  # fmt: skip
    worker = None
    try:
        cluster_ui = f"http://{MASTER_HOST}:{master_ui_port}"
        _wait_for(
            "Spark master",
            lambda: urllib.request.urlopen(f"{cluster_ui}/json/", timeout=5),
            master,
            master_log,
        )
        worker = _start(
            ["org.apache.spark.deploy.worker.Worker", "--host", MASTER_HOST, "--cores", str(WORKER_CORES),
             "--memory", WORKER_MEMORY, "--work-dir", str(work / "work"), "--webui-port", str(worker_ui_port),
             MASTER_URL],
            worker_log, env,
        )  # fmt: skip
        cluster = StandaloneCluster(MASTER_URL, cluster_ui, master.pid, worker.pid, work / "work")
        _wait_for("Spark worker", lambda: cluster.state()["aliveworkers"] == 1, worker, worker_log)
        yield cluster
    finally:
        if worker is not None:
            _stop(worker)
        _stop(master)

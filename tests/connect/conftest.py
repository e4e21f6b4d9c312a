"""A real Spark Connect server for the tests in this folder, on loopback and a free port.

The installed PySpark carries the server (``spark-connect_2.13-*.jar``): it is started with
``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer`` in ``local[2]``,
its Python workers running this interpreter (which has the package and fastavro). The job runs
in child processes: a process that opens a Connect session switches PySpark's functions to their
Connect forms, which the classic session of the other tests in a worker cannot take.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HOST = "127.0.0.1"
START_TIMEOUT_SECONDS = 120


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((HOST, port)) == 0


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def start_connect_server(log: Path, python: str = sys.executable) -> tuple[subprocess.Popen, str]:
    """Start a server whose workers run ``python``; its process and ``sc://`` URL once it listens."""
    port = _free_port()
    home = _spark_home()
    env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": python, "SPARK_LOCAL_IP": HOST}
    env.pop("SPARK_REMOTE", None)
    command = [
        str(home / "bin" / "spark-submit"),
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master", "local[2]",
        "--name", "cdc-replay-tests-connect",
        "--conf", f"spark.connect.grpc.binding.address={HOST}",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", f"spark.driver.host={HOST}",
        "--conf", f"spark.driver.bindAddress={HOST}",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.driver.memory=1g",
        "spark-internal",
    ]  # fmt: skip
    with log.open("wb") as out:
        server = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not _listening(port):
        if server.poll() is not None or time.monotonic() > deadline:
            stop_connect_server(server)
            raise RuntimeError(
                f"the Spark Connect server did not start; its log: {log}\n{log.read_text()[-3000:]}"
            )
        time.sleep(0.3)
    return server, f"sc://{HOST}:{port}"


def stop_connect_server(server: subprocess.Popen) -> None:
    """Stop the server and its process group (spark-submit's JVM and its Python workers)."""
    try:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="session")
def connect_url(tmp_path_factory) -> Iterator[str]:
    """``sc://127.0.0.1:PORT`` of a Spark Connect server kept for the whole test run."""
    server, url = start_connect_server(tmp_path_factory.mktemp("connect") / "server.log")
    try:
        yield url
    finally:
        stop_connect_server(server)

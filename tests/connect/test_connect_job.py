"""The job over Spark Connect: the same rows, metrics, quarantine, atomic output and lock as classic mode.

Every Connect run is a child process (``connect_runner``) in which any route to a driver JVM
raises, so these runs also prove that no classic-only call is left on the job's path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.bare_python import python_without_the_package
from tests.conftest import REPO, rows_of, write_jsonl
from tests.connect.conftest import start_connect_server, stop_connect_server
from tests.connect.connect_runner import CLASSIC_ONLY

from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.jobs.run import run_request
from airflow_cdc_provider.sample_data import replay_arguments

# Fields of the metrics that differ between any two runs, whatever the mode.
_PER_RUN = {"written_at", "duration_seconds", "seconds"}


def run_over_connect(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "tests.connect.connect_runner", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check:
        assert result.returncode == 0, result.stderr[-4000:]
    return result


def cli_over_connect(url: str, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return run_over_connect("--cli", *argv, "--remote", url, "--quiet", **kwargs)


def comparable(metrics, root: str):
    """Metrics with the per-run fields removed and the output root replaced by ``OUT``."""
    if isinstance(metrics, dict):
        return {k: comparable(v, root) for k, v in metrics.items() if k not in _PER_RUN}
    if isinstance(metrics, list):
        return [comparable(v, root) for v in metrics]
    if isinstance(metrics, str):
        return metrics.replace(root, "OUT")
    return metrics


def assert_same_snapshot(spark, connect: dict, classic: dict, connect_root: str, classic_root: str) -> None:
    assert comparable(connect, connect_root) == comparable(classic, classic_root)
    for table, info in classic["tables"].items():
        key = lambda r: json.dumps(r, sort_keys=True, default=str)  # noqa: E731
        assert sorted(rows_of(spark, connect["tables"][table]["path"]), key=key) == sorted(
            rows_of(spark, info["path"]), key=key
        )
        # Same columns in the same order, with the same types.
        assert (
            spark.read.parquet(connect["tables"][table]["path"]).schema
            == spark.read.parquet(info["path"]).schema
        )


def classic_run(spark, argv: list[str]) -> list[dict]:
    return run_request(spark, SnapshotArgs.from_argv(argv))


def both_modes(spark, url: str, fmt: str, landing, tmp_path) -> tuple[dict, dict]:
    """The same ``--key id`` snapshot of ``landing`` over Connect and in classic mode; both metrics,
    after checking that they and the rows they describe are the same."""
    argv = ["--format", fmt, "--input", str(landing), "--as-of", "2100-01-01T00:00:00Z", "--key", "id"]
    connect_out, classic_out = tmp_path / "connect", tmp_path / "classic"
    connect = json.loads(cli_over_connect(url, ["snapshot", *argv, "--output", str(connect_out)]).stdout)
    [classic] = classic_run(spark, [*argv, "--output", str(classic_out)])
    assert_same_snapshot(spark, connect, classic, f"file:{connect_out}", f"file:{classic_out}")
    return connect, classic


def test_the_sample_over_connect_equals_classic_mode(spark, connect_url, tmp_path):
    connect_out, classic_out = tmp_path / "connect", tmp_path / "classic"
    result = cli_over_connect(connect_url, replay_arguments(str(connect_out)))
    connect = json.loads(result.stdout)
    [classic] = classic_run(spark, replay_arguments(str(classic_out))[1:])
    assert connect["rows"] == 83 and connect["events"]["read"] == 305
    assert_same_snapshot(spark, connect, classic, f"file:{connect_out}", f"file:{classic_out}")
    # The atomic swap left nothing beside the output: no staging folder, no lock.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["classic", "connect"]


def test_spark_remote_in_the_environment_runs_over_connect(spark, connect_url, tmp_path):
    out = tmp_path / "out"
    result = run_over_connect(
        "--cli", *replay_arguments(str(out)), "--quiet", env={"SPARK_REMOTE": connect_url}
    )
    assert json.loads(result.stdout)["rows"] == 83
    assert (out / "_cdc_metrics.json").is_file()


def test_quarantine_and_a_damaged_gzip_over_connect_equal_classic_mode(spark, connect_url, tmp_path):
    import gzip

    landing = tmp_path / "landing"
    records = [
        {"op": "c", "ts_ms": 1000 + i, "after": {"id": i, "v": f"v{i}"}, "source": {"db": "d", "table": "t"}}
        for i in range(3000)
    ]
    write_jsonl(landing / "a.json", records[:10])
    (landing / "b.json").write_text('{"op": "c", "after": \nnot json\n', encoding="utf-8")
    whole = gzip.compress("".join(json.dumps(r) + "\n" for r in records[10:]).encode())
    (landing / "c.json.gz").write_bytes(whole[: len(whole) // 2])  # cut short mid-stream
    _, classic = both_modes(spark, connect_url, "debezium-json", landing, tmp_path)
    assert classic["events"]["quarantined"] >= 3  # the two bad lines and the lost rest of the gzip
    connect_out, classic_out = tmp_path / "connect", tmp_path / "classic"
    quarantined = lambda out: sorted(  # noqa: E731
        (r["file"].rsplit("/", 1)[-1], r["line"], r["reason"])
        for r in spark.read.json(str(out / "_quarantine")).collect()
    )
    assert quarantined(connect_out) == quarantined(classic_out)


def test_an_output_locked_by_a_live_run_is_refused_over_connect(connect_url, tmp_path):
    from airflow_cdc_provider.replay.output_lock import LockHolder

    out = tmp_path / "out"
    lock = tmp_path / ".out.cdc-lock"
    holder = LockHolder.this_process("otherrun1234")  # this test's process: alive, on this host
    lock.write_text(json.dumps(holder.__dict__), encoding="utf-8")
    result = cli_over_connect(connect_url, replay_arguments(str(out)), check=False)
    assert result.returncode == 1
    assert (
        f"cdc-replay: error: refusing to write file:{out}: output is being written by another cdc-replay "
        f"run otherrun1234 (host {holder.host}, pid {holder.pid}, since {holder.started_at})"
    ) in result.stderr
    assert not out.exists() and lock.is_file()


def test_a_classic_only_call_fails_the_connect_run(connect_url, tmp_path):
    """The guard itself: a run that reached for the JVM would fail with the guard's text."""
    probe = (
        "from tests.connect.connect_runner import close_the_jvm\n"
        "close_the_jvm()\n"
        "from airflow_cdc_provider.spark.session import build_session\n"
        "build_session(master='local[1]')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 1
    assert CLASSIC_ONLY in result.stderr


def test_only_the_classic_backends_reach_the_driver_jvm():
    """py4j, ``sparkContext`` and ``_jvm`` appear only where classic mode is chosen explicitly."""
    package = REPO / "airflow_cdc_provider"
    allowed = {
        "spark/hadoop_files.py",  # the classic file-system backend
        "spark/settings.py",  # classic branch of the session's settings
        "spark/session.py",  # the classic session's set-up
        "spark/progress.py",  # classic stage progress from the status tracker
        "spark/reader.py",  # the Java cause chain of a classic error (py4j types only)
        "formats/common/tabular.py",  # catches Py4JJavaError beside PySparkException
        "jobs/class_archive.py",  # builds the JVM class archive in its own classic process
    }
    found = {
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if any(word in path.read_text(encoding="utf-8") for word in ("sparkContext", "._jvm", "_jsc", "py4j"))
    }
    assert found <= allowed, sorted(found - allowed)


@pytest.fixture(scope="module")
def bare_connect_url(tmp_path_factory) -> Iterator[str]:
    """A Connect server whose Python workers lack the package (they have fastavro and pyarrow)."""
    folder = tmp_path_factory.mktemp("bare-connect")
    server, url = start_connect_server(
        folder / "server.log", python=str(python_without_the_package(folder / "venv"))
    )
    try:
        yield url
    finally:
        stop_connect_server(server)


@pytest.mark.slow
def test_avro_decoding_runs_on_a_server_whose_python_lacks_the_package(spark, bare_connect_url, tmp_path):
    """debezium-avro decodes in Python workers: the job ships the package as a session artifact."""
    from tests.formats.test_debezium_avro import product

    from reference.records.debezium_avro import container, envelope

    records = [envelope("c", None, product(i), i) for i in range(1, 6)]
    records += [envelope("u", product(2), product(2, name="bike"), 6), envelope("d", product(3), None, 7)]
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "part-0.avro").write_bytes(container(records))
    _, classic = both_modes(spark, bare_connect_url, "debezium-avro", landing, tmp_path)
    assert classic["rows"] == 4


_INTERRUPTED_RUN = """
import json, sys, threading, time
from tests.connect.connect_runner import close_the_jvm
close_the_jvm()
from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.jobs.connect_run import ConnectRun

url, argv = sys.argv[1], json.loads(sys.argv[2])
run = ConnectRun(url, quiet=True)
outcome = {}
def job():
    try:
        run.run(SnapshotArgs.from_argv(argv))
        outcome["finished"] = True
    except Exception as exc:
        outcome["error"] = type(exc).__name__
thread = threading.Thread(target=job)
thread.start()
interrupted = 0
deadline = time.monotonic() + 120
while not interrupted and thread.is_alive() and time.monotonic() < deadline:
    time.sleep(0.5)
    interrupted = run.interrupt()
thread.join(300)
print(json.dumps({**outcome, "interrupted": interrupted, "alive": thread.is_alive()}))
"""


def test_interrupting_a_connect_run_stops_it_and_releases_the_lock(connect_url, tmp_path):
    """What ``on_kill`` does: the tagged operations stop, the run fails, nothing is left behind."""
    landing = tmp_path / "landing"
    records = [
        {"op": "c", "ts_ms": i, "after": {"id": i % 5000, "v": "x" * 50}, "source": {"db": "d", "table": "t"}}
        for i in range(200_000)
    ]
    for part in range(4):
        write_jsonl(landing / f"part-{part}.json", records[part::4])
    out = tmp_path / "out"
    argv = ["--format", "debezium-json", "--input", str(landing), "--as-of", "2100-01-01T00:00:00Z"]
    argv += ["--key", "id", "--output", str(out)]
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_RUN, connect_url, json.dumps(argv)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["interrupted"] >= 1 and not outcome["alive"]
    assert "finished" not in outcome and outcome["error"]
    # No snapshot, no staging folder, no lock: the run's cleanup ran.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["landing"]

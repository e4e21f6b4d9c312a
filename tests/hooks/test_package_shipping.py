"""Shipping the installed package to a cluster: the zip (``contract/package_zip.py``) and the hook's
``--py-files``.

The zip tests build from small stand-in package folders. The hook tests submit through a stand-in
``spark3-submit`` that records its argument vector. The slow test submits a ``debezium-avro`` job
(decoded by Python on the executors) to a real standalone master and worker whose executors run a
Python that does not have ``airflow_cdc_provider``: only the shipped zip lets them import it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import airflow_env  # noqa: F401 - sets Airflow's home before anything imports airflow
from tests.bare_python import python_without_the_package as bare_python
from tests.cluster.conftest import (
    MASTER_HOST,
    StandaloneCluster,
    _free_port,
    _spark_home,
    _start,
    _stop,
    _wait_for,
)
from tests.submit_recorder import install_recorder

from airflow_cdc_provider.contract import package_zip as pz
from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.hooks.cdc_replay import CdcReplayHook, SparkTarget
from reference.records.debezium_avro import T0, container, envelope, envelope_schema

# ------------------------------------------------------------------------------------------------
# The zip
# ------------------------------------------------------------------------------------------------


def make_package(root: Path, files: dict[str, str | bytes]) -> Path:
    """A stand-in package folder ``root/pkg`` holding ``files`` (relative path -> content)."""
    package = root / "pkg"
    for relative, content in files.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return package


PACKAGE_FILES = {
    "__init__.py": "VALUE = 1\n",
    "sub/__init__.py": "",
    "sub/mod.py": "def f():\n    return 'from the zip'\n",
    "data/sample.json": '{"a": 1}\n',
    "__pycache__/__init__.cpython-311.pyc": b"\x00stale",
    "sub/__pycache__/mod.cpython-311.pyc": b"\x00stale",
    "sub/mod.pyc": b"\x00stale",
    ".hidden.swp": "editor",
}


def test_zip_holds_the_package_without_byte_code_and_imports(tmp_path):
    package = make_package(tmp_path / "src", PACKAGE_FILES)
    zipped = pz.package_zip(root=package, cache=tmp_path / "cache", version="1.2.3")
    assert zipped.parent == tmp_path / "cache"
    assert zipped.name.startswith("airflow_cdc_provider-1.2.3-") and zipped.suffix == ".zip"
    with zipfile.ZipFile(zipped) as archive:
        names = archive.namelist()
        assert names == ["pkg/__init__.py", "pkg/data/sample.json", "pkg/sub/__init__.py", "pkg/sub/mod.py"]
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    probe = f"import sys; sys.path.insert(0, {str(zipped)!r}); import pkg.sub.mod as m; print(m.f())"
    result = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "from the zip"
    assert oct(zipped.stat().st_mode & 0o777) == "0o644"


def test_zip_is_deterministic_and_cached(tmp_path):
    package = make_package(tmp_path / "src", PACKAGE_FILES)
    first = pz.package_zip(root=package, cache=tmp_path / "a", version="1.0")
    # Same content elsewhere, files touched later: the same name and the same bytes.
    os.utime(package / "sub" / "mod.py", (2_000_000_000, 2_000_000_000))
    again = pz.package_zip(root=package, cache=tmp_path / "b", version="1.0")
    assert again.name == first.name and again.read_bytes() == first.read_bytes()
    # A second call with the cache in place reuses the file: it is not written again.
    before = first.stat().st_mtime_ns, first.stat().st_ino
    assert pz.package_zip(root=package, cache=tmp_path / "a", version="1.0") == first
    assert (first.stat().st_mtime_ns, first.stat().st_ino) == before
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [first.name]  # no temporary left behind


def test_a_changed_source_or_version_gets_a_new_zip(tmp_path):
    package = make_package(tmp_path / "src", PACKAGE_FILES)
    cache = tmp_path / "cache"
    first = pz.package_zip(root=package, cache=cache, version="1.0")
    (package / "sub" / "mod.py").write_text("def f():\n    return 'edited'\n")
    edited = pz.package_zip(root=package, cache=cache, version="1.0")
    assert edited != first and first.is_file()  # the old one stays: a running job may still use it
    with zipfile.ZipFile(edited) as archive:
        assert archive.read("pkg/sub/mod.py") == b"def f():\n    return 'edited'\n"
    assert pz.package_zip(root=package, cache=cache, version="1.1") not in (first, edited)


def test_package_data_goes_in_only_while_small(tmp_path, monkeypatch):
    package = make_package(tmp_path / "src", {"__init__.py": "", "data/big.bin": b"x" * 100})
    assert [n for n, _ in pz.package_files(package)] == ["pkg/__init__.py", "pkg/data/big.bin"]
    monkeypatch.setattr(pz, "MAX_DATA_BYTES", 99)
    assert [n for n, _ in pz.package_files(package)] == ["pkg/__init__.py"]


def test_the_installed_package_zips_with_every_module(tmp_path):
    zipped = pz.package_zip(cache=tmp_path)
    assert zipped.name.startswith(f"airflow_cdc_provider-{pz.installed_version()}-")
    with zipfile.ZipFile(zipped) as archive:
        names = set(archive.namelist())
    root = pz.package_dir()
    sources = {f"airflow_cdc_provider/{p.relative_to(root).as_posix()}" for p in root.rglob("*.py")}
    assert sources <= names and not any("__pycache__" in n for n in names)
    assert "airflow_cdc_provider/jobs/spark_app.py" in names


def test_a_failed_write_leaves_neither_the_zip_nor_a_temporary(tmp_path, monkeypatch):
    def fail(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(pz.os, "replace", fail)
    target = tmp_path / "cache" / "x.zip"
    with pytest.raises(OSError, match="disk full"):
        pz.write_zip([("pkg/__init__.py", b"")], target)
    assert list((tmp_path / "cache").iterdir()) == []


def test_builders_racing_each_other_all_get_a_whole_zip(tmp_path):
    """Many threads write the same zip at once: each rename is atomic, so any reader sees a whole file."""
    entries = [(f"pkg/m{i}.py", os.urandom(2000)) for i in range(50)]
    target = tmp_path / "cache" / "same.zip"
    errors: list[BaseException] = []

    def build() -> None:
        try:
            pz.write_zip(entries, target)
            with zipfile.ZipFile(target) as archive:
                assert archive.testzip() is None and len(archive.namelist()) == 50
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert [p.name for p in target.parent.iterdir()] == ["same.zip"]


def test_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(pz.CACHE_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert pz.cache_dir() == tmp_path / "xdg" / "airflow-cdc-provider"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert pz.cache_dir() == Path.home() / ".cache" / "airflow-cdc-provider"
    monkeypatch.setenv(
        pz.CACHE_DIR_ENV, str(tmp_path / "mine")
    )  # CDC_REPLAY_CACHE_DIR, as for the JVM archives
    assert pz.cache_dir() == tmp_path / "mine" / "airflow-cdc-provider"


# ------------------------------------------------------------------------------------------------
# The hook: --py-files for a cluster, not for local mode, not over the user's own, not when off
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def recorded_submit(tmp_path, monkeypatch):
    """Submit through a stand-in ``spark3-submit``; returns ``submit(master, extra, **hook) -> argv``."""
    argv_file = install_recorder(tmp_path, monkeypatch)
    monkeypatch.setenv(pz.CACHE_DIR_ENV, str(tmp_path / "cache"))

    def submit(master: str, extra: dict | None = None, **hook_args) -> list[str]:
        connection = {
            "conn_type": "spark",
            "host": master,
            "extra": {"spark-binary": "spark3-submit", **(extra or {})},
        }
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_RECORDER", json.dumps(connection))
        request = SnapshotArgs.build(
            source_format="debezium-json", input_paths="/lake/in", output_path=str(tmp_path / "out"), as_of=1
        )
        assert CdcReplayHook(conn_id="spark_recorder", **hook_args).run_snapshot(request) == [{"rows": 0}]
        return json.loads(argv_file.read_text())

    return submit


def py_files(argv: list[str]) -> str | None:
    return argv[argv.index("--py-files") + 1] if "--py-files" in argv else None


def test_a_cluster_master_gets_the_package_zip_and_a_local_one_does_not(recorded_submit, tmp_path):
    # (Not k8s://: the Spark provider needs the Kubernetes client installed to build that command.)
    for master in ("spark://spark-master.internal:7077", "spark://127.0.0.1:7077", "yarn"):
        shipped = Path(py_files(recorded_submit(master)) or "")
        # Compared by name, not bytes: other work on an editable install may change the sources.
        assert shipped.parent == tmp_path / "cache" / "airflow-cdc-provider" and shipped.is_file(), master
        assert shipped.name.startswith(f"airflow_cdc_provider-{pz.installed_version()}-"), master
        with zipfile.ZipFile(shipped) as archive:
            assert "airflow_cdc_provider/jobs/spark_app.py" in archive.namelist()
    for master in ("local", "local[2]", "local[*]"):
        assert py_files(recorded_submit(master)) is None, master


def test_the_users_own_py_files_are_kept(recorded_submit, caplog, capsys):
    caplog.set_level("INFO")
    argv = recorded_submit(
        "spark://spark-master.internal:7077", spark_conf={"spark.submit.pyFiles": "hdfs:///libs/mine.zip"}
    )
    assert py_files(argv) is None
    assert "spark.submit.pyFiles=hdfs:///libs/mine.zip" in argv
    logged = caplog.text + capsys.readouterr().out  # Airflow's structlog writes to stdout
    assert "spark_conf sets spark.submit.pyFiles=hdfs:///libs/mine.zip: keeping it" in logged


@pytest.mark.parametrize(
    ("extra", "hook_args", "shipped"),
    [
        ({"ship-package": False}, {}, False),
        ({"ship-package": "false"}, {}, False),
        ({}, {"ship_package": False}, False),
        ({"ship-package": False}, {"ship_package": True}, True),  # the hook's argument wins
        ({"ship-package": True}, {}, True),
    ],
)
def test_shipping_can_be_turned_off(recorded_submit, extra, hook_args, shipped):
    argv = recorded_submit("spark://spark-master.internal:7077", extra, **hook_args)
    assert (py_files(argv) is not None) == shipped


def test_a_ship_package_extra_that_is_not_a_boolean_is_refused():
    from airflow.models import Connection

    from airflow_cdc_provider.hooks.cdc_replay import CdcJobArgumentError, spark_target_from_connection

    conn = Connection(conn_id="c", conn_type="spark", host="yarn", extra={"ship-package": "maybe"})
    with pytest.raises(CdcJobArgumentError, match="'ship-package' extra must be true or false, got 'maybe'"):
        spark_target_from_connection(conn)
    assert CdcReplayHook().package_py_files(SparkTarget("local[4]")) is None


# ------------------------------------------------------------------------------------------------
# A real standalone cluster whose executors' Python lacks the package
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def python_without_the_package(tmp_path_factory) -> Path:
    return bare_python(tmp_path_factory.mktemp("bare-venv"))


@pytest.fixture(scope="module")
def bare_cluster(tmp_path_factory, python_without_the_package) -> Iterator[StandaloneCluster]:
    """A standalone master and one worker on loopback (free ports: tests/cluster holds 7077)."""
    work = tmp_path_factory.mktemp("spark-shipping")
    # Executors add the worker's PYTHONPATH to their Python workers' path: it could hold this repository.
    env = {
        **{name: value for name, value in os.environ.items() if name != "PYTHONPATH"},
        "SPARK_HOME": str(_spark_home()),
        "SPARK_LOCAL_IP": MASTER_HOST,
        "SPARK_DAEMON_MEMORY": "512m",
        "PYSPARK_PYTHON": str(python_without_the_package),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    port, master_ui, worker_ui = _free_port(), _free_port(), _free_port()
    url = f"spark://{MASTER_HOST}:{port}"
    master = _start(
        ["org.apache.spark.deploy.master.Master", "--host", MASTER_HOST, "--port", str(port),
         "--webui-port", str(master_ui)],
        work / "master.log",
        env,
    )  # fmt: skip
    worker = None
    try:
        ui = f"http://{MASTER_HOST}:{master_ui}"
        _wait_for(
            "Spark master",
            lambda: urllib.request.urlopen(f"{ui}/json/", timeout=5),
            master,
            work / "master.log",
        )
        worker = _start(
            ["org.apache.spark.deploy.worker.Worker", "--host", MASTER_HOST, "--cores", "1", "--memory", "1g",
             "--work-dir", str(work / "work"), "--webui-port", str(worker_ui), url],
            work / "worker.log",
            env,
        )  # fmt: skip
        cluster = StandaloneCluster(url, ui, master.pid, worker.pid, work / "work")
        _wait_for("Spark worker", lambda: cluster.state()["aliveworkers"] == 1, worker, work / "worker.log")
        yield cluster
    finally:
        if worker is not None:
            _stop(worker)
        _stop(master)


COLUMNS = [{"name": "id", "type": "int"}, {"name": "name", "type": ["null", "string"], "default": None}]


@pytest.mark.slow
def test_executors_without_the_package_run_the_job_from_the_shipped_zip(
    bare_cluster, python_without_the_package, tmp_path, monkeypatch
):
    landing = tmp_path / "landing"
    landing.mkdir()
    records = [
        envelope("c", None, {"id": 1, "name": "a"}, 1),
        envelope("c", None, {"id": 2, "name": "b"}, 2),
        envelope("u", {"id": 1, "name": "a"}, {"id": 1, "name": "a2"}, 3),
    ]
    (landing / "products+0+0000000000.avro").write_bytes(container(records, envelope_schema(columns=COLUMNS)))
    host, port = bare_cluster.master_url.rsplit(":", 1)
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_BARE", json.dumps({"conn_type": "spark", "host": host, "port": int(port)})
    )
    monkeypatch.setenv(pz.CACHE_DIR_ENV, str(tmp_path / "cache"))
    request = SnapshotArgs.build(
        source_format="debezium-avro",
        input_paths=str(landing),
        output_path=str(tmp_path / "out"),
        as_of=T0 + 60_000,
        key_columns=["id"],
        on_error="fail",
    )
    hook = CdcReplayHook(
        conn_id="spark_bare",
        spark_conf={
            # The driver (client mode: spark-submit's child here) is this interpreter, which has the
            # package; the executors' Python workers are the one without it.
            "spark.pyspark.driver.python": sys.executable,
            "spark.pyspark.python": str(python_without_the_package),
            "spark.executor.memory": "768m",
        },
    )
    [metrics] = hook.run_snapshot(request)

    assert metrics["events"]["read"] == 3 and metrics["events"]["applied"] == 3
    assert metrics["tables"]["inventory.products"]["rows"] == 2
    state = bare_cluster.state()
    assert [app["state"] for app in state["completedapps"]] == ["FINISHED"]
    # The executor fetched the zip into its work folder, and its Python workers imported from it.
    app_dir = bare_cluster.work_dir / state["completedapps"][0]["id"]
    assert [p.name for p in app_dir.rglob("airflow_cdc_provider-*.zip")], f"no zip in {app_dir}"

"""A local driver's JVM options: the class archive and quick compilation for small inputs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from airflow_cdc_provider.contract import jvm
from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.jobs.class_archive import build_class_archive, remove_outlived_archives
from airflow_cdc_provider.spark.session import session_conf

ARCHIVE = "-XX:SharedArchiveFile="
QUICK = "-XX:TieredStopAtLevel=1"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(jvm.CACHE_DIR_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_local_input_bytes_adds_up_files_and_stops_counting_past_the_limit(tmp_path):
    (tmp_path / "in" / "dt=1").mkdir(parents=True)
    (tmp_path / "in" / "dt=1" / "a.json").write_bytes(b"x" * 300)
    (tmp_path / "in" / "b.json").write_bytes(b"y" * 200)
    (tmp_path / "one.json").write_bytes(b"z" * 50)
    paths = [str(tmp_path / "in"), f"file://{tmp_path / 'one.json'}"]
    assert jvm.local_input_bytes(paths, limit=10_000) == 550
    assert 100 < jvm.local_input_bytes(paths, limit=100) <= 550
    assert jvm.local_input_bytes([str(tmp_path / "missing")], limit=100) == 0
    assert jvm.local_input_bytes([str(tmp_path / "in"), "s3a://lake/cdc"], limit=10_000) is None


def test_small_local_inputs_get_quick_compilation_and_large_or_remote_ones_do_not(
    tmp_path, cache_dir, monkeypatch
):
    def request(*inputs: str, base: str | None = None) -> SnapshotArgs:
        return SnapshotArgs.build(
            source_format="debezium-json",
            input_paths=list(inputs),
            output_path=str(tmp_path / "out"),
            as_of="2024-01-01T00:00:00Z",
            base_path=base,
        )

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_bytes(b"x" * 1000)
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "part.parquet").write_bytes(b"y" * 500)
    assert jvm.java_options_for(request(str(tmp_path / "in"))) == [QUICK]
    monkeypatch.setattr(jvm, "QUICK_START_MAX_BYTES", 999)
    assert jvm.java_options_for(request(str(tmp_path / "in"))) == []
    assert jvm.java_options_for(request("hdfs://nn/landing")) == []
    monkeypatch.setattr(jvm, "QUICK_START_MAX_BYTES", 1200)
    assert jvm.java_options_for(request(str(tmp_path / "in"))) == [QUICK]
    assert jvm.java_options_for(request(str(tmp_path / "in"), base=str(tmp_path / "base"))) == []


def test_a_run_from_a_base_counts_only_the_files_the_base_did_not_read(tmp_path, cache_dir, monkeypatch):
    """A daily run lists the whole landing; the days its base read are not read again."""
    day1, day2 = tmp_path / "in" / "dt=1", tmp_path / "in" / "dt=2"
    day1.mkdir(parents=True)
    day2.mkdir()
    (day1 / "a.json").write_bytes(b"x" * 5000)
    (day1 / "b.json").write_bytes(b"x" * 3000)
    (day2 / "c.json").write_bytes(b"y" * 400)
    state = tmp_path / "base" / "_cdc_state"
    state.mkdir(parents=True)
    read = {f"file:{day1 / 'a.json'}": [5000, 1], f"file:{day1 / 'b.json'}": [2999, 1]}  # b grew since
    (state / "state.json").write_text(json.dumps({"version": 1, "files": read}))
    base_bytes = (state / "state.json").stat().st_size
    assert jvm.files_read_by_base(str(tmp_path / "base")) == {
        str(day1 / "a.json"): 5000,
        str(day1 / "b.json"): 2999,
    }
    assert jvm.files_read_by_base(str(tmp_path / "nothing")) == {}
    assert jvm.files_read_by_base("s3a://lake/snapshots/day1") == {}
    covered = jvm.files_read_by_base(str(tmp_path / "base"))
    assert jvm.local_input_bytes([str(tmp_path / "in")], 10**6, covered) == 3400

    request = SnapshotArgs.build(
        source_format="debezium-json",
        input_paths=[str(tmp_path / "in")],
        output_path=str(tmp_path / "out"),
        as_of="2024-01-01T00:00:00Z",
        base_path=str(tmp_path / "base"),
    )
    monkeypatch.setattr(jvm, "QUICK_START_MAX_BYTES", 3400 + base_bytes)
    assert jvm.java_options_for(request) == [QUICK]
    monkeypatch.setattr(jvm, "QUICK_START_MAX_BYTES", 3399 + base_bytes)
    assert jvm.java_options_for(request) == []


def test_the_class_archive_is_used_once_built_and_named_for_this_jdk_and_pyspark(cache_dir):
    import pyspark

    archive = jvm.class_archive_path()
    assert archive.parent == cache_dir / "airflow-cdc-provider"
    assert archive.name.startswith(f"spark-{pyspark.__version__}-") and archive.suffix == ".jsa"
    assert jvm.java_options(small_input=False) == []
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"not an archive: a JVM ignores it and starts without")
    assert jvm.java_options(small_input=True) == [f"{ARCHIVE}{archive}", QUICK]


def test_another_pyspark_installation_gets_its_own_archive(cache_dir, tmp_path, monkeypatch):
    """A JVM rejects an archive dumped from jars elsewhere (a second virtual environment, or CI's
    checkout beside a developer's), so each installation is named apart."""
    here = jvm.class_archive_path()
    installed = jvm.distribution("pyspark")

    class Elsewhere:
        version = installed.version

        @staticmethod
        def locate_file(path):
            return tmp_path / "other-venv" / path

    (tmp_path / "other-venv" / "pyspark" / "jars").mkdir(parents=True)
    monkeypatch.setattr(jvm, "distribution", lambda name: Elsewhere)
    elsewhere = jvm.class_archive_path()
    assert (elsewhere.parent, elsewhere.name.split("-")[:2]) == (here.parent, here.name.split("-")[:2])
    assert elsewhere != here


def test_archives_of_a_removed_or_reinstalled_pyspark_are_removed_and_others_kept(cache_dir, tmp_path):
    """Each installation's archive is about 170 MiB: the builder removes those no JVM can map again."""
    current = jvm.class_archive_path()
    current.parent.mkdir(parents=True)
    current.write_bytes(b"archive")
    jvm.write_archive_source(current)
    recorded = json.loads(jvm.archive_source(current).read_text())
    version = recorded["pyspark"]

    def archive(name: str, jars: Path | None, size: int = 0, mtime_ns: int = 0):
        path = current.parent / f"spark-{version}-{name}.jsa"
        path.write_bytes(b"archive")
        if jars is not None:
            moved = {"path": str(jars), "size": size, "mtime_ns": mtime_ns}
            jvm.archive_source(path).write_text(json.dumps({**recorded, "jars": moved}))
        return path

    other_venv = tmp_path / "venv" / "jars"
    other_venv.mkdir(parents=True)
    stat = os.stat(other_venv)
    kept = archive("other-venv", other_venv, stat.st_size, stat.st_mtime_ns)
    removed_venv = archive("removed-venv", tmp_path / "gone" / "jars")
    reinstalled = archive("reinstalled", other_venv, stat.st_size, stat.st_mtime_ns - 1)
    unrecorded = archive("unrecorded", None)
    assert [jvm.archive_outlived(p) for p in (current, kept, removed_venv, reinstalled, unrecorded)] == [
        False,
        False,
        True,
        True,
        False,
    ]
    assert remove_outlived_archives(current.parent) == [reinstalled, removed_venv]
    assert sorted(p.name for p in current.parent.iterdir()) == sorted(
        [
            current.name,
            jvm.archive_source(current).name,
            kept.name,
            jvm.archive_source(kept).name,
            unrecorded.name,
        ]
    )


def test_an_embedded_driver_gets_the_options_before_the_callers_and_a_cluster_driver_none(cache_dir):
    given = {"spark.driver.extraJavaOptions": "-Dcaller=1", "spark.executor.memory": "1g"}
    local = session_conf("local[2]", given, [QUICK])
    assert local["spark.driver.extraJavaOptions"] == f"{QUICK} -Dcaller=1"
    assert (local["spark.executor.memory"], local["spark.driver.host"]) == ("1g", "127.0.0.1")
    assert "spark.driver.extraJavaOptions" not in session_conf("local[2]", {}, [])
    remote = session_conf("spark://127.0.0.1:7077", given, [QUICK])
    assert remote["spark.driver.extraJavaOptions"] == "-Dcaller=1"
    assert "spark.driver.host" not in remote


def test_the_built_archive_maps_into_a_jvm_with_the_sessions_class_path(spark, tmp_path, monkeypatch):
    """The archive ``scripts/install.sh`` builds (or one built here) is one the driver's JVM can use.

    ``-Xshare:on`` makes a JVM refuse to start when the archive does not match its class path and
    JDK, where the drivers (``-Xshare:auto``) would quietly start without it.
    """
    archive = jvm.class_archive_path()
    if not archive.is_file():
        monkeypatch.setenv(jvm.CACHE_DIR_ENV, str(tmp_path))
        archive = build_class_archive()
        assert archive.parent == tmp_path / "airflow-cdc-provider"
    assert [p.name for p in archive.parent.iterdir() if p.name.endswith(".partial")] == []
    class_path = spark._jvm.System.getProperty("java.class.path")
    java = str(jvm.java_binary())
    started = subprocess.run(
        [java, "-Xshare:on", f"{ARCHIVE}{archive}", "-cp", class_path, "-version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (started.returncode, "sharing" in started.stderr) == (0, True), started.stderr

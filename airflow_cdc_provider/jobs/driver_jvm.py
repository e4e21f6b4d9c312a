"""Java options that make an embedded driver's JVM start and plan faster.

A run over a few files spends most of its wall clock warming up the JVM, not reading data: a cold
``cdc-replay`` on the bundled 305-event sample took about 21 s, of which loading Spark's classes and
compiling Catalyst's code paths are the bulk. Two standard HotSpot features cut that:

- **A class data archive** (AppCDS, ``-XX:SharedArchiveFile``): the classes a replay loads, parsed
  and verified once and memory-mapped by later JVMs. ``python -m airflow_cdc_provider.jobs.driver_jvm``
  builds it by replaying the bundled sample (``scripts/install.sh`` does); without it nothing changes.
  A JVM that finds the archive stale (another JDK build or Spark release) ignores it silently.
- **Quick compilation for small inputs** (``-XX:TieredStopAtLevel=1``): the client compiler only.
  It wins while warm-up dominates (a cold run over 30 MB: 21 s against 26 s) and loses once the data
  does (245 MB: 44 s against 38 s), so it is used only when every input is local and their total
  size is at most ``QUICK_START_MAX_BYTES``.

Only the embedded local master gets these options: under spark-submit the driver JVM is already
running, and on a cluster the executors' JVMs are the submitter's to tune.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

QUICK_START_MAX_BYTES = 64 * 1024 * 1024
# Where archives live unless CDC_REPLAY_CACHE_DIR says otherwise.
CACHE_DIR_ENV = "CDC_REPLAY_CACHE_DIR"
_MODULE = "airflow_cdc_provider.jobs.driver_jvm"


def java_binary() -> Path | None:
    """The ``java`` spark-submit's launcher runs: ``$JAVA_HOME/bin/java``, else the one on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home, "bin", "java") if home else None
    if candidate is None or not candidate.exists():
        found = shutil.which("java")
        candidate = Path(found) if found else None
    return candidate.resolve() if candidate else None


def class_archive_path() -> Path | None:
    """The archive for this JDK and this PySpark, or None without a ``java``.

    The name changes with the JDK binary (path, size, modification time) and PySpark's version, so
    an upgrade of either builds a new archive instead of handing the JVM one it would reject.
    """
    import pyspark

    java = java_binary()
    if java is None:
        return None
    stat = java.stat()
    identity = f"{java}|{stat.st_size}|{stat.st_mtime_ns}|{pyspark.__version__}"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    cache = Path(
        os.environ.get(CACHE_DIR_ENV) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    )
    return cache / "airflow-cdc-provider" / f"spark-{pyspark.__version__}-{digest}.jsa"


def local_input_bytes(paths: Iterable[str], limit: int) -> int | None:
    """Total size of the files under ``paths``, counted up to just past ``limit``.

    None when a path is not on the local file system (a URI with a scheme other than ``file``),
    since its size is unknown without a file system client.
    """
    total = 0
    for raw in paths:
        if "://" in raw and not raw.startswith("file://"):
            return None
        path = Path(raw.removeprefix("file://"))
        if path.is_file():
            total += path.stat().st_size
            continue
        for root, _dirs, files in os.walk(path):
            for name in files:
                try:
                    total += os.stat(os.path.join(root, name)).st_size
                except OSError:  # removed while walking: not part of the input any more
                    continue
                if total > limit:
                    return total
    return total


def java_options_for(paths: Iterable[str]) -> list[str]:
    """``java_options`` for a run that reads ``paths``: small when they are local and add up to little."""
    size = local_input_bytes(paths, QUICK_START_MAX_BYTES)
    return java_options(small_input=size is not None and size <= QUICK_START_MAX_BYTES)


def java_options(*, small_input: bool) -> list[str]:
    """Options for an embedded driver: the class archive when one is built, quick compilation when small."""
    options = []
    archive = class_archive_path()
    if archive is not None and archive.is_file():
        options.append(f"-XX:SharedArchiveFile={archive}")
    if small_input:
        options.append("-XX:TieredStopAtLevel=1")
    return options


def build_class_archive() -> Path:
    """Replay the bundled sample in a child process whose JVM writes its loaded classes on exit.

    The archive is written beside its final name and renamed into place, so a JVM starting
    meanwhile sees either no archive or a whole one.
    """
    archive = class_archive_path()
    if archive is None:
        raise RuntimeError("no java found (JAVA_HOME or PATH): cannot build the class archive")
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f".{archive.name}.{os.getpid()}.partial")
    try:
        with tempfile.TemporaryDirectory(prefix="cdc-class-archive-") as work:
            subprocess.run(
                [sys.executable, "-m", _MODULE, "--replay-sample", str(partial), work],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        if not partial.is_file():
            raise RuntimeError(f"the JVM wrote no class archive at {partial}")
        os.replace(partial, archive)
    finally:
        partial.unlink(missing_ok=True)
    return archive


def _replay_sample(partial: str, work: str) -> None:
    """The child of ``build_class_archive``: one sample rebuild, then wait for the JVM's exit."""
    from importlib.resources import files

    from airflow_cdc_provider.contract.args import SnapshotArgs
    from airflow_cdc_provider.jobs.session import build_session
    from airflow_cdc_provider.replay.engine import SnapshotSpec, run_snapshots

    sample = files("airflow_cdc_provider") / "sample_data" / "debezium"
    spark = build_session(java_options=[f"-XX:ArchiveClassesAtExit={partial}"])
    args = SnapshotArgs.build(
        source_format="debezium-json",
        input_paths=[str(sample)],
        output_path=os.path.join(work, "snapshot"),
        as_of="2024-09-02T09:00:00+00:00",
        key_columns="id",
    )
    run_snapshots(spark, SnapshotSpec.each_from_job_args(args))
    gateway = spark.sparkContext._gateway
    spark.stop()
    # The JVM dumps the archive as it exits, which it does once its stdin closes.
    gateway.shutdown()
    gateway.proc.stdin.close()
    gateway.proc.wait()


def main(argv: list[str]) -> int:
    """``python -m airflow_cdc_provider.jobs.driver_jvm [--rebuild]``: build the archive unless it exists."""
    if argv[:1] == ["--replay-sample"]:
        _replay_sample(argv[1], argv[2])
        return 0
    archive = class_archive_path()
    if archive is None or not archive.is_file() or "--rebuild" in argv:
        archive = build_class_archive()
    print(f"class archive for cdc-replay's JVM: {archive} ({archive.stat().st_size // 2**20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

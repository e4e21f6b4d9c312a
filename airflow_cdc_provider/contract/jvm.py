"""Java options that make a local driver's JVM start and plan faster (Spark-free: the hook uses them too).

A run over a few files spends most of its wall clock warming up the JVM, not reading data: a cold
``cdc-replay`` on the bundled 305-event sample took about 21 s, of which loading Spark's classes and
compiling Catalyst's code paths are the bulk. Two standard HotSpot features cut that:

- **A class data archive** (AppCDS, ``-XX:SharedArchiveFile``): the classes a replay loads, parsed
  and verified once and memory-mapped by later JVMs. ``python -m airflow_cdc_provider.jobs.class_archive``
  builds it by replaying the bundled sample (``scripts/install.sh`` does); without it nothing changes.
  A JVM that finds the archive stale (another JDK build, Spark release or install location)
  ignores it silently.
- **Quick compilation for small inputs** (``-XX:TieredStopAtLevel=1``): the client compiler only.
  It wins while warm-up dominates (a cold run over 30 MB: 21 s against 26 s) and loses once the data
  does (245 MB: 44 s against 38 s), so it is used only when every input is local and their total
  size is at most ``QUICK_START_MAX_BYTES``. A run from a ``--base`` leaves out the landed files the
  base read: a daily run over a 4 MiB day of a 245 MiB landing took 29 s cold against 36 to 38 s.

Only a driver in local mode gets these options: the embedded one (``spark/session.py``) and one that
spark-submit starts for the hook. Under spark-submit the job's own session finds its JVM running,
and on a cluster the executors' JVMs are the submitter's to tune.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from importlib.metadata import distribution
from pathlib import Path

from airflow_cdc_provider.contract.args import SnapshotArgs
from airflow_cdc_provider.contract.metrics import STATE_DIR, STATE_FILE
from airflow_cdc_provider.contract.paths import is_local_path, local_path

QUICK_START_MAX_BYTES = 64 * 1024 * 1024
# A local-mode driver's heap (it runs the executors too): the embedded session's and the hook's.
LOCAL_DRIVER_MEMORY = "2g"
# Where archives live unless CDC_REPLAY_CACHE_DIR says otherwise.
CACHE_DIR_ENV = "CDC_REPLAY_CACHE_DIR"
JAVA_OPTIONS_CONF = "spark.driver.extraJavaOptions"
# A driver's log4j2 profile: Spark's default one at WARN, without its start-up warnings.
QUIET_LOG4J2 = Path(__file__).resolve().parents[1] / "spark" / "log4j2.properties"


def java_binary() -> Path | None:
    """The ``java`` spark-submit's launcher runs: ``$JAVA_HOME/bin/java``, else the one on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home, "bin", "java") if home else None
    if candidate is None or not candidate.exists():
        found = shutil.which("java")
        candidate = Path(found) if found else None
    return candidate.resolve() if candidate else None


def _file_identity(path: Path) -> dict:
    """Where a file is and which build of it: a reinstall changes the modification time."""
    stat = path.stat()
    return {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _installation() -> dict | None:
    """What an archive is valid for: the JDK binary and PySpark's version and jar directory; None
    without a ``java``."""
    java = java_binary()
    if java is None:
        return None
    pyspark = distribution("pyspark")
    jars = Path(pyspark.locate_file("pyspark/jars")).resolve()
    return {"java": _file_identity(java), "pyspark": pyspark.version, "jars": _file_identity(jars)}


def class_archive_path() -> Path | None:
    """The archive for this JDK and this PySpark installation, or None without a ``java``.

    A JVM maps an archive only when its class path starts with the jars the archive was dumped
    from, at the same place and unchanged. So the name changes with everything ``_installation``
    lists: a second virtual environment, or a reinstall, builds its own archive instead of handing
    the JVM one it would reject.
    """
    installation = _installation()
    if installation is None:
        return None
    digest = hashlib.sha256(json.dumps(installation, sort_keys=True).encode()).hexdigest()[:16]
    cache = Path(
        os.environ.get(CACHE_DIR_ENV) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    )
    return cache / "airflow-cdc-provider" / f"spark-{installation['pyspark']}-{digest}.jsa"


def archive_source(archive: Path) -> Path:
    """The file beside ``archive`` that records the installation it was built for."""
    return archive.with_name(archive.name + ".source.json")


def write_archive_source(archive: Path) -> None:
    archive_source(archive).write_text(json.dumps(_installation()))


def archive_outlived(archive: Path) -> bool:
    """True when the JDK or the PySpark jars ``archive`` was built for are gone or changed, so no
    JVM will map it again; False when they are still there, or when it records nothing."""
    try:
        recorded = json.loads(archive_source(archive).read_text())
        files = [recorded["java"], recorded["jars"]]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    try:
        return any(_file_identity(Path(f["path"])) != f for f in files)
    except OSError:
        return True


def local_input_bytes(
    paths: Iterable[str], limit: int, covered: Mapping[str, int] | None = None
) -> int | None:
    """Total size of the files under ``paths``, counted up to just past ``limit``, leaving out the
    files ``covered`` names (local path -> size) at that size.

    None when a path is not on the local file system, since its size is unknown without a file
    system client.
    """
    covered = covered or {}
    total = 0
    for location in paths:
        if not is_local_path(location):
            return None
        path = Path(local_path(location))
        if path.is_file():
            total += path.stat().st_size
            continue
        for root, _dirs, files in os.walk(path):
            for name in files:
                file = os.path.join(root, name)
                try:
                    size = os.stat(file).st_size
                except OSError:  # removed while walking: not part of the input any more
                    continue
                total += 0 if covered.get(file) == size else size
                if total > limit:
                    return total
    return total


def files_read_by_base(base: str) -> dict[str, int]:
    """The landed files a local ``--base`` read (local path -> size), from its ``state.json``; empty
    when it has none. An estimate for choosing JVM options: the job decides what it re-reads."""
    if not is_local_path(base):
        return {}
    try:
        files = json.loads(Path(local_path(base), STATE_DIR, STATE_FILE).read_text())["files"]
        return {local_path(uri): int(seen[0]) for uri, seen in files.items() if is_local_path(uri)}
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return {}


def java_options_for(request: SnapshotArgs) -> list[str]:
    """``java_options`` for a run of ``request``: small when what it reads is local and adds up to
    little: its inputs, less the files a ``--base`` already read, and the base itself."""
    paths = [*request.input_paths, *([request.base_path] if request.base_path else [])]
    covered = files_read_by_base(request.base_path) if request.base_path else {}
    size = local_input_bytes(paths, QUICK_START_MAX_BYTES, covered)
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


def log4j_java_option() -> str:
    """The JVM option that gives a driver the package's log4j2 profile (``QUIET_LOG4J2``)."""
    return f"-Dlog4j2.configurationFile={QUIET_LOG4J2.as_uri()}"


def merged_java_options(options: Iterable[str], given: str | None) -> str:
    """``options`` ahead of a caller's own ``spark.driver.extraJavaOptions`` (the later of two equal
    options wins, so the caller's stay in force)."""
    return " ".join([*options, given or ""]).strip()

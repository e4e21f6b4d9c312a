"""A zip of the installed ``airflow_cdc_provider`` package, for spark-submit's ``--py-files``.

On a cluster the job's executors (and, in cluster deploy mode, its driver) run a Python that need
not have this package: the hook ships it with the submission instead. The zip holds the importable
package folder as installed (an editable install's sources included), is named after the installed
version and a hash of its content, and is built once into a cache folder: every later submission
of the same content reuses the same file, and a changed source tree gets a new name, so a running
job never sees its zip replaced. The package's dependencies (pyarrow, pandas, fastavro, ...) are
not in it: the cluster's Python must have them.

Only the standard library (and the contract's cache setting) is used here: the hook imports this
module where neither PySpark nor the job's layers need to load.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from airflow_cdc_provider.contract.jvm import CACHE_DIR_ENV

PACKAGE = "airflow_cdc_provider"
DISTRIBUTION = "airflow-cdc-provider"
# Zips go to <cache>/airflow-cdc-provider, beside the JVM class archives: <cache> is $CDC_REPLAY_CACHE_DIR
# (CACHE_DIR_ENV), else $XDG_CACHE_HOME, else ~/.cache.
CACHE_SUBDIR = "airflow-cdc-provider"
# Package data (anything but .py) goes in only while all of it together stays this small: the job
# reads none of it on the cluster (today it is the bundled sample), but importlib.resources users
# of a zipped package would expect it.
MAX_DATA_BYTES = 1024 * 1024
# Zip entries get this fixed time (the earliest a zip can hold), so the same files give the same bytes.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
# Part of the content hash: a change to how the zip is laid out gives new names, not stale zips.
_LAYOUT_VERSION = b"cdc-package-zip-1"
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._+-]")


def package_dir() -> Path:
    """The folder ``import airflow_cdc_provider`` loads (the source tree for an editable install)."""
    return Path(__file__).resolve().parents[1]


def installed_version() -> str:
    """The installed distribution's version; ``0+unknown`` when the package runs uninstalled."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"


def cache_dir() -> Path:
    """Where built zips are kept: the folder the local JVM class archives use (``contract.jvm``)."""
    configured = os.environ.get(CACHE_DIR_ENV) or os.environ.get("XDG_CACHE_HOME")
    base = Path(configured).expanduser() if configured else Path.home() / ".cache"
    return base / CACHE_SUBDIR


def _walk(root: Path) -> Iterator[Path]:
    """Every file under ``root`` except byte code and hidden files (editor and OS leftovers)."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
        for name in files:
            if not name.startswith(".") and not name.endswith((".pyc", ".pyo")):
                yield Path(folder) / name


def package_files(root: Path | None = None) -> list[tuple[str, Path]]:
    """``(name in the zip, path)`` of what the zip holds, sorted by name.

    Names start with the package folder's name, so the zip's root goes on ``sys.path``. Python
    sources always go in; the other files only while they add up to at most ``MAX_DATA_BYTES``.
    """
    root = (root or package_dir()).resolve()
    found = sorted((f"{root.name}/{path.relative_to(root).as_posix()}", path) for path in _walk(root))
    sources = [(name, path) for name, path in found if name.endswith(".py")]
    data = [(name, path) for name, path in found if not name.endswith(".py")]
    if sum(path.stat().st_size for _, path in data) <= MAX_DATA_BYTES:
        return found
    return sources


def content_hash(files: list[tuple[str, bytes]]) -> str:
    """A short hash of the entries' names and bytes (and of the zip layout)."""
    digest = hashlib.sha256(_LAYOUT_VERSION)
    for name, data in files:
        encoded = name.encode("utf-8")
        digest.update(len(encoded).to_bytes(4, "big") + encoded)
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()[:16]


def zip_name(version: str, digest: str) -> str:
    """``airflow_cdc_provider-<version>-<hash>.zip``; Spark's ``addPyFile`` needs the ``.zip``."""
    return f"{PACKAGE}-{_UNSAFE_NAME.sub('_', version)}-{digest}.zip"


def write_zip(entries: list[tuple[str, bytes]], target: Path) -> None:
    """Write a deterministic zip of ``entries`` to ``target``, atomically.

    The zip is written to a temporary file in the same folder and renamed over ``target``
    (``os.replace``), so two tasks building the same zip at once each see either no file or a
    whole one, never half of it. Entries keep the given order, with a fixed time and mode.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
                for name, data in entries:
                    info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
                    info.compress_type = zipfile.ZIP_DEFLATED
                    info.external_attr = 0o644 << 16
                    archive.writestr(info, data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide it from a Spark running as another user
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def package_zip(root: Path | None = None, cache: Path | None = None, version: str | None = None) -> Path:
    """The zip of the installed package, built into the cache the first time this content is seen.

    The content hash is computed on every call (the package is about a megabyte): it is what makes
    an edited editable install get a new zip while an unchanged one reuses its file.
    """
    entries = [(name, path.read_bytes()) for name, path in package_files(root)]
    target = (cache or cache_dir()) / zip_name(version or installed_version(), content_hash(entries))
    if not target.is_file():
        write_zip(entries, target)
    return target

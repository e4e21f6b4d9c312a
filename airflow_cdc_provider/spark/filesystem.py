"""The job's one file-system seam: listing, small reads, and the output's atomic swap and lock.

Everything the job does to files outside Spark's own reads and writes goes through a
``JobFileSystem``, chosen by the session:

- a classic session (local or spark-submit) uses Hadoop's FileSystem in the driver's JVM, so
  ``hdfs://``, ``s3a://``, ``abfss://`` and any other scheme keep working with the cluster's own
  connectors and credentials;
- a Spark Connect session has no JVM in this process: the files are reached from here through
  fsspec (``file:`` always; ``s3a://`` and others through the fsspec package for that store,
  installed beside this one, with this process's credentials).

URIs are strings in Hadoop's form (``file:/tmp/x``, ``s3a://bucket/key``, nothing
percent-encoded): the form ``reader.landed_file_column`` gives the rows Spark reads, so listed
files and read rows name files alike.
"""

from __future__ import annotations

import abc
import os
import posixpath
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_URI = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):(?://(?P<authority>[^/]*))?(?P<path>.*)$")


@dataclass(frozen=True)
class FileStatus:
    uri: str  # qualified, in Hadoop's form
    is_dir: bool
    size: int
    modified_ms: int

    @property
    def name(self) -> str:
        return name_of(self.uri)


def split_uri(uri: str) -> tuple[str, str, str]:
    """``(scheme, authority, path)`` of a URI; a bare path has neither scheme nor authority."""
    match = _URI.match(uri)
    if match is None or len(match.group("scheme")) == 1:  # "C:..." is a Windows drive, not a scheme
        return "", "", uri
    return match.group("scheme"), match.group("authority") or "", match.group("path") or "/"


def _clean_path(path: str) -> str:
    cleaned = posixpath.normpath(path) if path else "/"
    return "/" + cleaned.lstrip("/") if cleaned.startswith("/") else cleaned


def join_uri(scheme: str, authority: str, path: str) -> str:
    """A URI in Hadoop's form: ``scheme:/path`` without an authority, ``scheme://host/path`` with one."""
    if not scheme:
        return path
    return f"{scheme}://{authority}{path}" if authority else f"{scheme}:{path}"


def normalise(uri: str) -> str:
    """One spelling per file: ``.``/``..``/``//`` and a trailing ``/`` gone, ``scheme:///`` as ``scheme:/``."""
    scheme, authority, path = split_uri(uri)
    return join_uri(scheme, authority, _clean_path(path))


def from_spark_uri(uri: str) -> str:
    """A file as Spark names it in errors and ``_metadata.file_path`` (``file:///tmp/a%20b``), in the
    listing's form (``file:/tmp/a b``): its percent escapes decoded once, a ``+`` kept."""
    return normalise(unquote(uri))


def child(uri: str, *names: str) -> str:
    return "/".join([uri.rstrip("/"), *names])


def parent_of(uri: str) -> str | None:
    """The folder holding ``uri``; None for a file system root."""
    scheme, authority, path = split_uri(uri)
    path = _clean_path(path)
    if path in ("/", ""):
        return None
    return join_uri(scheme, authority, posixpath.dirname(path) or "/")


def name_of(uri: str) -> str:
    return posixpath.basename(split_uri(uri)[2].rstrip("/"))


def glob_regex(glob: str) -> re.Pattern[str]:
    """A Hadoop glob of one path component (``*``, ``?``, ``[...]``, ``{a,b}``, ``\\`` escapes) as a regex."""
    out, i, depth = [], 0, 0
    while i < len(glob):
        ch = glob[i]
        if ch == "\\" and i + 1 < len(glob):
            out.append(re.escape(glob[i + 1]))
            i += 1
        elif ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = glob.find("]", i + 1)
            if end < 0:
                out.append(re.escape(ch))
            else:
                body = glob[i + 1 : end].replace("\\", "\\\\")
                out.append("[" + ("^" + body[1:] if body.startswith("^") else body) + "]")
                i = end
        elif ch == "{":
            depth += 1
            out.append("(?:")
        elif ch == "}" and depth:
            depth -= 1
            out.append(")")
        elif ch == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out) + "\\Z")


def has_glob(text: str) -> bool:
    return any(ch in text for ch in "*?[{\\")


class JobFileSystem(abc.ABC):
    """What the job does to files on the driver; every URI in and out is in Hadoop's form."""

    @abc.abstractmethod
    def qualify(self, path: str) -> str:
        """``path`` made absolute with its scheme (a bare path is the default file system's)."""

    @abc.abstractmethod
    def glob(self, pattern: str) -> list[FileStatus]:
        """What ``pattern`` names: the path itself when it exists, the matches of a glob; [] for none."""

    @abc.abstractmethod
    def list_dir(self, uri: str) -> list[FileStatus]:
        """The entries of a folder (not recursive)."""

    @abc.abstractmethod
    def status(self, uri: str) -> FileStatus | None:
        """The file or folder at ``uri``; None when nothing is there."""

    def exists(self, uri: str) -> bool:
        return self.status(uri) is not None

    @abc.abstractmethod
    def read_bytes(self, uri: str, start: int = 0, length: int | None = None) -> bytes:
        """``length`` bytes from ``start`` (the rest of the file when None)."""

    def read_text(self, uri: str) -> str:
        return self.read_bytes(uri).decode("utf-8")

    @abc.abstractmethod
    def write_bytes(self, uri: str, data: bytes) -> None:
        """Create or replace a small file."""

    @abc.abstractmethod
    def create_new(self, uri: str, data: bytes) -> bool:
        """Create a file holding ``data`` only if nothing is there; False when something is."""

    @abc.abstractmethod
    def mkdirs(self, uri: str) -> None: ...

    @abc.abstractmethod
    def rename(self, source: str, target: str) -> bool:
        """Move ``source`` to ``target`` (which must not exist); False when it could not."""

    @abc.abstractmethod
    def delete(self, uri: str, recursive: bool = True) -> bool: ...

    @abc.abstractmethod
    def touch(self, uri: str) -> int:
        """Set the file's modification time to now, where the store allows; the time it now has (ms)."""

    @abc.abstractmethod
    def stream_breaks(self, uri: str) -> bool:
        """True when the file's compressed stream breaks off before its end (False: intact or unknown)."""

    @abc.abstractmethod
    def parquet_metadata(self, uri: str) -> dict[str, str] | None:
        """A Parquet file's key-value metadata (only its footer is read); None when it does not read."""


def create_local_file(path: str, data: bytes) -> bool:
    """``create_new`` on a local disk: ``O_CREAT | O_EXCL``, exclusive between processes (Hadoop's
    local create(overwrite=false) checks first, then creates)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return True


def job_filesystem(spark: SparkSession) -> JobFileSystem:
    """The seam for ``spark``: Hadoop's FileSystem in a classic session, fsspec over Spark Connect."""
    from airflow_cdc_provider.spark.session import is_connect

    if is_connect(spark):
        from airflow_cdc_provider.spark.fsspec_files import FsspecFileSystem

        return FsspecFileSystem()
    from airflow_cdc_provider.spark.hadoop_files import HadoopFileSystem

    return HadoopFileSystem(spark)


def matches_component(glob: str, name: str) -> bool:
    """Whether one path component ``name`` matches the Hadoop glob ``glob``."""
    return glob == name or (has_glob(glob) and glob_regex(glob).match(name) is not None)


def status_from(uri: str, is_dir: bool, size: Any, modified_ms: Any) -> FileStatus:
    return FileStatus(uri, bool(is_dir), int(size or 0), int(modified_ms or 0))

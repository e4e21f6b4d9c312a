"""Look at a landing without Spark: its folders, its data files, and the last lines of a file.

``CdcLandedFilesSensor`` and its trigger run in Airflow's worker and triggerer, where a JVM per poke
is out of the question, so they cannot use the replay job's Hadoop listing (``spark/reader.py``). This
module gives them the same view through fsspec: a local path uses the local file system, and a URI
goes through Airflow's ``ObjectStoragePath``, so every scheme Airflow's object storage serves
(``s3://``, ``s3a://``, ``gs://``, ``abfs://``, ``hdfs://``, ``memory://``, ...) works, with an
optional Airflow connection for credentials. Every call here is blocking I/O: the trigger runs it
in a thread.
"""

from __future__ import annotations

import collections
import os
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from airflow_cdc_provider.contract.paths import (
    COMPRESSED_SUFFIXES,
    is_hidden,
    is_local_path,
    local_path,
    unreadable_compression,
)

# Compressed files cannot be read from the end; larger ones than this are not decompressed by a poke.
MAX_COMPRESSED_TAIL_BYTES = 16 * 1024 * 1024


class LandingProbeError(ValueError):
    """The landing location cannot be opened (unknown scheme, missing filesystem package...)."""


@dataclass(frozen=True)
class ProbedFile:
    """A data file of the landing: its path relative to the landing root, size and modification time."""

    relative: str
    size: int
    modified_ms: int | None


def _modified_ms(info: dict[str, Any]) -> int | None:
    """Modification time from an fsspec ``info`` entry; each filesystem names it differently."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, datetime):
            return int(value.timestamp() * 1000)
        if isinstance(value, (int, float)):
            return int(value * 1000)
        if isinstance(value, str):
            try:
                return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
            except ValueError:
                continue
    return None


def _filesystem(location: str, conn_id: str | None) -> tuple[Any, str]:
    """(fsspec filesystem, root path in that filesystem's terms) for a local path or a URI."""
    if is_local_path(location):
        from fsspec.implementations.local import LocalFileSystem

        return LocalFileSystem(), os.path.abspath(local_path(location)).rstrip("/") or "/"
    try:
        if conn_id:
            # Airflow's object storage: the filesystem its provider registers, with the connection.
            from airflow.sdk import ObjectStoragePath

            path = ObjectStoragePath(location, conn_id=conn_id)
            return path.fs, path.path.rstrip("/")
        # Without a connection ObjectStoragePath uses fsspec's own filesystem for the scheme; so do we.
        from fsspec.core import url_to_fs

        fs, root = url_to_fs(location)
        return fs, root.rstrip("/")
    except (ValueError, ImportError) as exc:
        raise LandingProbeError(
            f"cannot open {location!r}: {exc}. Install the Airflow provider (or fsspec package) that "
            f"serves {urlsplit(location).scheme}:// to Airflow's object storage."
        ) from exc


class LandingProbe:
    """Read-only, metadata-first access to one landing root.

    :param location: the landing root: a local path or a URI.
    :param conn_id: Airflow connection for the object store (``None``: the filesystem's defaults).
    """

    def __init__(self, location: str, conn_id: str | None = None) -> None:
        self.location = location.rstrip("/") or location
        self.fs, self.root = _filesystem(location, conn_id)

    def _abs(self, relative: str) -> str:
        return f"{self.root}/{relative}" if relative else self.root

    def display(self, relative: str) -> str:
        """A relative path as the user wrote the location (for messages and XCom)."""
        return f"{self.location}/{relative}" if relative else self.location

    def exists(self, relative: str) -> bool:
        return bool(self.fs.exists(self._abs(relative)))

    def glob_dirs(self, pattern: str) -> list[str]:
        """Relative paths of the directories matching a glob pattern under the root."""
        found = self.fs.glob(self._abs(pattern), detail=True)
        return sorted(self._relative(path) for path, info in found.items() if info.get("type") == "directory")

    def child_dirs(self, relative: str = "") -> list[str]:
        """Names of the directories directly under ``relative`` (none when it does not exist)."""
        try:
            entries = self.fs.ls(self._abs(relative), detail=True)
        except FileNotFoundError:
            return []
        return sorted(
            entry["name"].rstrip("/").rsplit("/", 1)[-1]
            for entry in entries
            if entry.get("type") == "directory"
        )

    def files(self, relative: str = "") -> list[ProbedFile]:
        """Data files under ``relative``, recursively, skipping hidden names at any depth."""
        try:
            found = self.fs.find(self._abs(relative), detail=True)
        except FileNotFoundError:
            return []
        out = []
        for path, info in found.items():
            rel = self._relative(path)
            if info.get("type", "file") != "file" or any(is_hidden(part) for part in rel.split("/")):
                continue
            out.append(ProbedFile(rel, int(info.get("size") or 0), _modified_ms(info)))
        return sorted(out, key=lambda f: f.relative)

    def tail_lines(self, file: ProbedFile, max_bytes: int, max_lines: int) -> list[str]:
        """The last complete lines of a file, reading at most ``max_bytes`` from its end.

        A compressed file has no readable end: it is decompressed as a stream (when it is small
        enough) and only its last lines are kept.
        """
        path = self._abs(file.relative)
        if (why := unreadable_compression(self.display(file.relative))) is not None:
            raise LandingProbeError(why)
        if file.relative.lower().endswith(COMPRESSED_SUFFIXES):
            if file.size > MAX_COMPRESSED_TAIL_BYTES:
                return []
            last: collections.deque[bytes] = collections.deque(maxlen=max_lines)
            with self.fs.open(path, "rb", compression="infer") as handle:
                for raw in handle:
                    if raw.strip():
                        last.append(raw)
            return [raw.decode("utf-8", errors="replace").strip() for raw in last]
        start = max(file.size - max_bytes, 0)
        with self.fs.open(path, "rb") as handle:
            handle.seek(start)
            data = handle.read()
        lines = data.split(b"\n")
        if start > 0:
            lines = lines[1:]  # the first line was cut by the seek
        if lines and not data.endswith(b"\n"):
            lines = lines[:-1]  # a line still being written
        text = [raw.decode("utf-8", errors="replace").strip() for raw in lines if raw.strip()]
        return text[-max_lines:]

    def _relative(self, path: str) -> str:
        path = path.rstrip("/")
        root = self.root.rstrip("/")
        if path == root:
            return ""
        if path.startswith(root + "/"):
            return path[len(root) + 1 :]
        # Some filesystems report paths without the leading "/" the root carries (memory://).
        stripped = root.lstrip("/")
        return path.lstrip("/")[len(stripped) + 1 :] if path.lstrip("/").startswith(stripped + "/") else path

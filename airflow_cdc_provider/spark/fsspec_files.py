"""``JobFileSystem`` through fsspec in this process, for Spark Connect sessions (no JVM here).

The landing and the output must be reachable from this process as the Spark Connect server
reaches them: the same local paths when both run on one machine, the same object store
otherwise (``s3a://`` is read as ``s3://`` through s3fs, ``abfss://`` through adlfs, ``gs://``
through gcsfs; each is installed by the user beside this package, with this process's credentials).
"""

from __future__ import annotations

import bz2
import os
import zlib
from collections.abc import Callable
from datetime import datetime
from typing import Any

import fsspec

from airflow_cdc_provider.spark.filesystem import (
    FileStatus,
    JobFileSystem,
    create_local_file,
    glob_regex,
    has_glob,
    join_uri,
    normalise,
    split_uri,
    status_from,
)

# Hadoop scheme -> fsspec protocol, where they differ.
_PROTOCOLS = {"s3a": "s3", "s3n": "s3", "wasbs": "abfs", "abfss": "abfs", "gcs": "gs"}
# Python codecs for the suffixes Hadoop decompresses; .lz4 and .snappy use Hadoop's own framing.
_READ_CHUNK = 4 * 1024 * 1024


def _python_decompressor(name: str) -> Callable[[], Any] | None:
    """A factory of streaming decompressors for the file's suffix (None: no Python codec here)."""
    lower = name.lower()
    if lower.endswith(".gz"):
        return lambda: zlib.decompressobj(16 + zlib.MAX_WBITS)
    if lower.endswith(".bz2"):
        return bz2.BZ2Decompressor
    if lower.endswith(".deflate"):
        return zlib.decompressobj
    if lower.endswith(".zst"):
        try:
            import zstandard
        except ImportError:
            return None
        return lambda: zstandard.ZstdDecompressor().decompressobj()
    return None


def _stream_ends_whole(chunks: Any, make: Callable[[], Any]) -> bool:
    """Whether the compressed ``chunks`` decode to their end; concatenated streams (as gzip and bzip2
    writers append them) are read one after another, as Hadoop's codecs read them."""
    decompressor = make()
    for chunk in chunks:
        while chunk:
            decompressor.decompress(chunk)
            chunk = getattr(decompressor, "unused_data", b"") if getattr(decompressor, "eof", False) else b""
            if chunk:
                decompressor = make()
    return getattr(decompressor, "eof", True)


def _modified_ms(info: dict[str, Any]) -> int:
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified"):
        value = info.get(key)
        if isinstance(value, (int, float)):
            return int(value * 1000) if value < 1e11 else int(value)
        if isinstance(value, datetime):
            return int(value.timestamp() * 1000)
        if isinstance(value, str) and value:
            try:
                return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
            except ValueError:
                continue
    return 0


class FsspecFileSystem(JobFileSystem):
    def _fs(self, uri: str) -> tuple[Any, str, str, str]:
        """The fsspec file system for ``uri``, its path there, and the URI's scheme and authority."""
        scheme, authority, path = split_uri(self.qualify(uri))
        if scheme == "file":
            return fsspec.filesystem("file"), path, scheme, authority
        protocol = _PROTOCOLS.get(scheme, scheme)
        return fsspec.filesystem(protocol), f"{authority}{path}", scheme, authority

    def _status(self, info: dict[str, Any], scheme: str, authority: str) -> FileStatus:
        name = info["name"]
        path = name if scheme == "file" else name[len(authority) :] if name.startswith(authority) else name
        uri = join_uri(scheme, authority, "/" + path.lstrip("/"))
        return status_from(uri, info.get("type") == "directory", info.get("size"), _modified_ms(info))

    def qualify(self, path: str) -> str:
        scheme, authority, rest = split_uri(path)
        if not scheme:
            return normalise(join_uri("file", "", os.path.abspath(path)))
        return normalise(join_uri(scheme, authority, rest))

    def glob(self, pattern: str) -> list[FileStatus]:
        fs, path, scheme, authority = self._fs(pattern)
        if not has_glob(path):
            found = self.status(pattern)
            return [found] if found is not None else []
        # Walk component by component: fsspec's own glob has no {a,b} and no escapes.
        parts = [p for p in path.split("/") if p]
        frontier = ["/" if path.startswith("/") else ""]
        for part in parts:
            following = []
            for folder in frontier:
                if not has_glob(part):
                    following.append(f"{folder.rstrip('/')}/{part}" if folder else part)
                    continue
                regex = glob_regex(part)
                for info in self._listing(fs, folder or "/"):
                    name = info["name"].rstrip("/").rsplit("/", 1)[-1]
                    if regex.match(name):
                        following.append(info["name"].rstrip("/"))
            frontier = following
        matched = [self._info(fs, p) for p in frontier]
        return sorted(
            (self._status(i, scheme, authority) for i in matched if i is not None), key=lambda s: s.uri
        )

    @staticmethod
    def _listing(fs: Any, folder: str) -> list[dict[str, Any]]:
        try:
            return fs.ls(folder, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []

    @staticmethod
    def _info(fs: Any, path: str) -> dict[str, Any] | None:
        try:
            return fs.info(path)
        except FileNotFoundError:
            return None

    def list_dir(self, uri: str) -> list[FileStatus]:
        fs, path, scheme, authority = self._fs(uri)
        return [self._status(i, scheme, authority) for i in self._listing(fs, path)]

    def status(self, uri: str) -> FileStatus | None:
        fs, path, scheme, authority = self._fs(uri)
        info = self._info(fs, path)
        return None if info is None else self._status(info, scheme, authority)

    def read_bytes(self, uri: str, start: int = 0, length: int | None = None) -> bytes:
        fs, path, _, _ = self._fs(uri)
        with fs.open(path, "rb") as stream:
            stream.seek(start)
            return stream.read() if length is None else stream.read(length)

    def write_bytes(self, uri: str, data: bytes) -> None:
        fs, path, _, _ = self._fs(uri)
        with fs.open(path, "wb") as out:
            out.write(data)

    def create_new(self, uri: str, data: bytes) -> bool:
        fs, path, scheme, _ = self._fs(uri)
        if scheme == "file":
            return create_local_file(path, data)
        try:
            with fs.open(path, "xb") as out:  # a conditional put where the store has one (s3fs)
                out.write(data)
        except FileExistsError:
            return False
        return True

    def mkdirs(self, uri: str) -> None:
        fs, path, _, _ = self._fs(uri)
        fs.makedirs(path, exist_ok=True)

    def rename(self, source: str, target: str) -> bool:
        fs, path, scheme, _ = self._fs(source)
        _, into, _, _ = self._fs(target)
        if self._info(fs, path) is None or self._info(fs, into) is not None:
            return False
        if scheme == "file":
            os.rename(path, into)
        else:
            fs.mv(path, into, recursive=True)
        return True

    def delete(self, uri: str, recursive: bool = True) -> bool:
        fs, path, _, _ = self._fs(uri)
        try:
            fs.rm(path, recursive=recursive)
        except FileNotFoundError:
            return False
        return True

    def touch(self, uri: str) -> int:
        fs, path, scheme, _ = self._fs(uri)
        if scheme == "file":
            os.utime(path, None)
            return int(os.stat(path).st_mtime * 1000)
        return _modified_ms(fs.info(path))  # object stores keep the time of the last write

    def stream_breaks(self, uri: str) -> bool:
        """Decompressed here with Python's codec for the suffix; False where there is none (.lz4, .snappy)."""
        make = _python_decompressor(uri)
        if make is None:
            return False
        fs, path, _, _ = self._fs(uri)
        try:
            with fs.open(path, "rb") as stream:
                return not _stream_ends_whole(iter(lambda: stream.read(_READ_CHUNK), b""), make)
        except (OSError, EOFError, ValueError, zlib.error):
            return True

    def parquet_metadata(self, uri: str) -> dict[str, str] | None:
        import pyarrow.parquet as pq

        fs, path, _, _ = self._fs(uri)
        try:
            with fs.open(path, "rb") as stream:
                metadata = pq.ParquetFile(stream).metadata.metadata or {}
        except (OSError, ValueError):
            return None
        return {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in metadata.items()}

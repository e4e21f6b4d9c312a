"""``JobFileSystem`` through Hadoop's FileSystem in a classic session's JVM (py4j).

Any scheme the cluster's Hadoop reads works here with the cluster's own settings and credentials.
This module and ``session`` are the only places the job reaches the driver's JVM.
"""

from __future__ import annotations

import time
from typing import Any

from py4j.protocol import Py4JError
from pyspark.sql import SparkSession

from airflow_cdc_provider.spark.filesystem import (
    FileStatus,
    JobFileSystem,
    create_local_file,
    split_uri,
    status_from,
)


class HadoopFileSystem(JobFileSystem):
    def __init__(self, spark: SparkSession) -> None:
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()
        self._Path = self._jvm.org.apache.hadoop.fs.Path

    def _fs_path(self, uri: str) -> tuple[Any, Any]:
        path = self._Path(uri)
        return path.getFileSystem(self._conf), path

    @staticmethod
    def _status(status: Any) -> FileStatus:
        return status_from(
            status.getPath().toString(), status.isDirectory(), status.getLen(), status.getModificationTime()
        )

    def qualify(self, path: str) -> str:
        fs, hadoop_path = self._fs_path(path)
        return fs.makeQualified(hadoop_path).toString()

    def glob(self, pattern: str) -> list[FileStatus]:
        fs, path = self._fs_path(pattern)
        return [self._status(s) for s in fs.globStatus(path) or []]

    def list_dir(self, uri: str) -> list[FileStatus]:
        fs, path = self._fs_path(uri)
        return [self._status(s) for s in fs.listStatus(path)]

    def status(self, uri: str) -> FileStatus | None:
        fs, path = self._fs_path(uri)
        try:
            return self._status(fs.getFileStatus(path))
        except Py4JError:  # FileNotFoundException
            return None

    def read_bytes(self, uri: str, start: int = 0, length: int | None = None) -> bytes:
        fs, path = self._fs_path(uri)
        stream = fs.open(path)
        try:
            if start:
                stream.seek(start)
            return bytes(stream.readAllBytes() if length is None else stream.readNBytes(length))
        finally:
            stream.close()

    def write_bytes(self, uri: str, data: bytes) -> None:
        fs, path = self._fs_path(uri)
        out = fs.create(path, True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()

    def create_new(self, uri: str, data: bytes) -> bool:
        scheme, _, local = split_uri(uri)
        if scheme == "file":
            return create_local_file(local, data)
        fs, path = self._fs_path(uri)
        try:
            out = fs.create(path, False)
        except Py4JError:  # FileAlreadyExistsException
            return False
        try:
            out.write(bytearray(data))
        finally:
            out.close()
        return True

    def mkdirs(self, uri: str) -> None:
        fs, path = self._fs_path(uri)
        fs.mkdirs(path)

    def rename(self, source: str, target: str) -> bool:
        fs, path = self._fs_path(source)
        try:
            return bool(fs.rename(path, self._Path(target)))
        except Py4JError:  # the local file system throws FileNotFoundException for a missing source
            if self.status(source) is None:
                return False
            raise

    def delete(self, uri: str, recursive: bool = True) -> bool:
        fs, path = self._fs_path(uri)
        return bool(fs.delete(path, recursive))

    def touch(self, uri: str) -> int:
        fs, path = self._fs_path(uri)
        fs.setTimes(path, int(time.time() * 1000), -1)
        return int(fs.getFileStatus(path).getModificationTime())

    def stream_breaks(self, uri: str) -> bool:
        """Decompressed in the JVM through Hadoop's codec for the suffix, into a null sink."""
        fs, path = self._fs_path(uri)
        codec = self._jvm.org.apache.hadoop.io.compress.CompressionCodecFactory(self._conf).getCodec(path)
        if codec is None:
            return False
        raw = fs.open(path)
        try:
            codec.createInputStream(raw).transferTo(self._jvm.java.io.OutputStream.nullOutputStream())
        except Py4JError:
            return True
        finally:
            raw.close()
        return False

    def parquet_metadata(self, uri: str) -> dict[str, str] | None:
        parquet = self._jvm.org.apache.parquet.hadoop
        try:
            source = parquet.util.HadoopInputFile.fromPath(self._Path(uri), self._conf)
            reader = parquet.ParquetFileReader.open(source)
        except Py4JError:
            return None
        try:
            metadata = reader.getFooter().getFileMetaData().getKeyValueMetaData()
            return {str(k): str(metadata.get(k)) for k in metadata.keySet()}
        finally:
            reader.close()

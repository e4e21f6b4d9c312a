"""Atomic output: readers see the previous snapshot or the new one, never a mix.

A run writes everything (tables, quarantine, metrics last) into a hidden staging folder beside
OUTPUT, then swaps folders with two renames on the output's own file system. An existing OUTPUT is
replaced only when it holds a ``_cdc_metrics.json`` (it was written by this job): nothing else is
ever deleted. Leftovers of a killed run (staging or old folders) are cleaned up by the next run.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from pyspark.sql import SparkSession

METRICS_FILE = "_cdc_metrics.json"
QUARANTINE_DIR = "_quarantine"
_STAGING_MARK = ".cdc-staging-"
_OLD_MARK = ".cdc-old-"


class OutputError(ValueError):
    """The output location is unsafe to write to."""


@dataclass
class OutputTarget:
    spark: SparkSession
    output: str

    def __post_init__(self) -> None:
        jvm = self.spark.sparkContext._jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self.path = self._Path(self.output)
        self.fs = self.path.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration())
        self.path = self.fs.makeQualified(self.path)
        self.parent = self.path.getParent()
        self.name = self.path.getName()
        self.run_id = uuid.uuid4().hex[:12]
        self.staging = self._Path(self.parent, f".{self.name}{_STAGING_MARK}{self.run_id}")
        self.old = self._Path(self.parent, f".{self.name}{_OLD_MARK}{self.run_id}")

    @property
    def uri(self) -> str:
        return self.path.toString()

    def staging_uri(self, *parts: str) -> str:
        return "/".join([self.staging.toString(), *parts])

    def final_uri(self, *parts: str) -> str:
        return "/".join([self.uri, *parts])

    def check_replaceable(self) -> None:
        if self.fs.exists(self.path):
            if not self.fs.getFileStatus(self.path).isDirectory():
                raise OutputError(f"output {self.uri} exists and is a file; choose a folder")
            empty = len(self.fs.listStatus(self.path)) == 0
            if not empty and not self.fs.exists(self._Path(self.path, METRICS_FILE)):
                raise OutputError(
                    f"output {self.uri} exists and was not written by cdc-replay (no {METRICS_FILE}); "
                    f"refusing to replace it. Choose an empty or new folder."
                )

    def clean_leftovers(self) -> None:
        """Remove staging/old folders of earlier runs that were killed before they finished."""
        if not self.fs.exists(self.parent):
            return
        prefix_staging = f".{self.name}{_STAGING_MARK}"
        prefix_old = f".{self.name}{_OLD_MARK}"
        for status in self.fs.listStatus(self.parent):
            name = status.getPath().getName()
            if name.startswith(prefix_old) and not self.fs.exists(self.path):
                # Killed between the two renames: the old snapshot is the last complete one.
                self.fs.rename(status.getPath(), self.path)
            elif name.startswith((prefix_staging, prefix_old)):
                self.fs.delete(status.getPath(), True)

    def write_metrics(self, metrics: dict) -> None:
        out = self.fs.create(self._Path(self.staging, METRICS_FILE), True)
        try:
            out.write(bytearray(json.dumps(metrics, indent=2, sort_keys=False).encode("utf-8")))
        finally:
            out.close()

    def commit(self) -> None:
        """Swap the staging folder in: two renames, then drop the previous snapshot."""
        if self.fs.exists(self.path):
            if not self.fs.rename(self.path, self.old):
                raise OutputError(f"could not move the previous snapshot {self.uri} aside")
        if not self.fs.rename(self.staging, self.path):
            if self.fs.exists(self.old):
                self.fs.rename(self.old, self.path)
            raise OutputError(f"could not move the new snapshot into {self.uri}")
        if self.fs.exists(self.old):
            self.fs.delete(self.old, True)

    def abort(self) -> None:
        if self.fs.exists(self.staging):
            self.fs.delete(self.staging, True)

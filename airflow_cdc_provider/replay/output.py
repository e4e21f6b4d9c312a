"""Atomic output: readers see the previous snapshot or the new one, never a mix.

A run writes everything (tables, quarantine, metrics last) into a hidden staging folder beside
OUTPUT, then swaps folders with two renames on the output's own file system. Killed at any moment
before the swap, it leaves OUTPUT untouched; killed between the two renames (a window of one file
system call), it leaves the previous snapshot under a hidden ``.NAME.cdc-old-*`` name, which the
next run puts back before anything else. Leftover staging folders are deleted by the next run.
A run that its own checks reject (``--max-quarantined``) is not swapped in either; its quarantine
is kept beside OUTPUT in ``.NAME.cdc-rejected/`` until the next run of OUTPUT commits or is rejected.

Nothing the job did not write is ever deleted: an existing OUTPUT is replaced only when it holds a
``_cdc_metrics.json`` and nothing but what that earlier run wrote (its tables, quarantine and
metrics). The output may not be, contain or lie inside an input path, globs included. One run at a
time per output: see ``output_lock``.
"""

from __future__ import annotations

import json
import os
import posixpath
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from airflow_cdc_provider.contract.metrics import METRICS_FILE, QUARANTINE_DIR, STATE_DIR, STATE_FILE
from airflow_cdc_provider.contract.tables import table_folder
from airflow_cdc_provider.replay.output_lock import (
    LOCK_MARK,
    OutputBusyError,
    OutputLock,
)

_STAGING_MARK = ".cdc-staging-"
_OLD_MARK = ".cdc-old-"
_REJECTED_MARK = ".cdc-rejected"


class OutputError(ValueError):
    """The output location is unsafe to write to."""


class OutputLockedError(OutputError):
    """Another run is writing the same output; the message names it and the lock file."""


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
        self.rejected = self._Path(self.parent, f".{self.name}{_REJECTED_MARK}")
        self.lock = OutputLock(self.fs, self._Path(self.parent, f".{self.name}{LOCK_MARK}"), self.run_id)

    @property
    def uri(self) -> str:
        return self.path.toString()

    def staging_uri(self, *parts: str) -> str:
        return "/".join([self.staging.toString(), *_checked(parts)])

    def final_uri(self, *parts: str) -> str:
        return "/".join([self.uri, *_checked(parts)])

    def table_uri(self, table: str, staging: bool = False) -> str:
        """Where ``table``'s snapshot is written (``staging``) and where readers find it."""
        folder = table_folder(table)
        return self.staging_uri(folder) if staging else self.final_uri(folder)

    @contextmanager
    def exclusive(self) -> Iterator[OutputTarget]:
        """Hold the output's lock for a whole run: check, clean leftovers, write, commit or abort."""
        if self.parent is None:
            raise OutputError(f"output {self.uri} is a file system root; choose a folder inside it")
        self.fs.mkdirs(self.parent)
        try:
            self.lock.acquire()
        except OutputBusyError as busy:
            raise OutputLockedError(f"refusing to write {self.uri}: {busy}") from None
        try:
            self.check_replaceable()
            self.clean_leftovers()
            yield self
        finally:
            try:
                self.abort()  # a committed run has no staging folder left; any other run removes its own
            finally:
                self.lock.release()

    def refuse_overlap(self, inputs: Iterable[str]) -> None:
        """Refuse an output that is, contains or lies inside an input path (globs match per component).

        Writing inside an input would feed the snapshot back in as landed records on the next run;
        replacing an output that contains an input would delete landed files.
        """
        out = self._location(self.path)
        conf = self.spark.sparkContext._jsc.hadoopConfiguration()
        for raw in inputs:
            path = self._Path(raw)
            inp = self._location(path.getFileSystem(conf).makeQualified(path))
            if out[0] != inp[0]:
                continue
            shared = min(len(out[1]), len(inp[1]))
            if all(self._component_matches(g, o) for g, o in zip(inp[1][:shared], out[1][:shared])):
                raise OutputError(
                    f"output {self.uri} and input {raw} overlap (the output is, contains or lies inside "
                    f"the input); write the snapshot outside the landed files"
                )

    def _location(self, qualified: Any) -> tuple[tuple[str, str], list[str]]:
        """(scheme, authority) and the normalised path components of a qualified Hadoop path."""
        uri = qualified.toUri()
        scheme, path = uri.getScheme() or "", uri.getPath() or "/"
        if scheme == "file":
            path = os.path.realpath(path)  # a symlinked folder is the folder it points to
        parts = [p for p in posixpath.normpath(path).split("/") if p]
        return (scheme, uri.getAuthority() or ""), parts

    def _component_matches(self, glob: str, name: str) -> bool:
        if glob == name:
            return True
        if not any(ch in glob for ch in "*?[{\\"):
            return False
        pattern = self.spark.sparkContext._jvm.org.apache.hadoop.fs.GlobPattern(glob)
        return bool(pattern.matches(name))

    def check_replaceable(self) -> None:
        """Refuse to replace anything but a folder this job wrote, holding only what it wrote."""
        if not self.fs.exists(self.path):
            return
        if not self.fs.getFileStatus(self.path).isDirectory():
            raise OutputError(f"output {self.uri} exists and is a file; choose a folder")
        names = {status.getPath().getName() for status in self.fs.listStatus(self.path)}
        if not names:
            return
        if METRICS_FILE not in names:
            raise OutputError(
                f"output {self.uri} exists and was not written by cdc-replay (no {METRICS_FILE}); "
                f"refusing to replace it. Choose an empty or new folder."
            )
        foreign = sorted(names - self._written_by_previous_run())
        if foreign:
            raise OutputError(
                f"output {self.uri} holds {', '.join(foreign)}, which the earlier cdc-replay run did not write; "
                f"refusing to replace it (that would delete them). Move them away or choose another folder."
            )

    def _written_by_previous_run(self) -> set[str]:
        """Top-level names the run that wrote the existing ``_cdc_metrics.json`` put there."""
        stream = self.fs.open(self._Path(self.path, METRICS_FILE))
        try:
            previous = json.loads(bytes(stream.readAllBytes()).decode("utf-8"))
        except ValueError:
            raise OutputError(
                f"output {self.uri} holds a {METRICS_FILE} that is not valid JSON; refusing to replace it"
            ) from None
        finally:
            stream.close()
        tables = previous.get("tables") if isinstance(previous, dict) else None
        # Hadoop's local file system writes a hidden .NAME.crc checksum beside each file it creates.
        written = {METRICS_FILE, f".{METRICS_FILE}.crc", QUARANTINE_DIR, *map(table_folder, tables or {})}
        if self._holds_state():
            written.add(STATE_DIR)
        return written

    def _holds_state(self) -> bool:
        """Whether the output holds the ``_cdc_state/`` a ``--keep-state`` run writes (and nothing
        else under that name: a folder with its ``state.json``)."""
        state = self._Path(self.path, STATE_DIR)
        return self.fs.exists(self._Path(state, STATE_FILE)) and self.fs.getFileStatus(state).isDirectory()

    def clean_leftovers(self) -> None:
        """Remove staging/old folders of earlier runs that were killed before they finished (this
        run's own scratch folder, written before the lock was taken, stays)."""
        if not self.fs.exists(self.parent):
            return
        prefix_staging = f".{self.name}{_STAGING_MARK}"
        prefix_old = f".{self.name}{_OLD_MARK}"
        for status in self.fs.listStatus(self.parent):
            name = status.getPath().getName()
            if name.startswith(prefix_old) and not self.fs.exists(self.path):
                # Killed between the two renames: the old snapshot is the last complete one.
                self.fs.rename(status.getPath(), self.path)
            elif name.startswith((prefix_staging, prefix_old)) and self.run_id not in name:
                self.fs.delete(status.getPath(), True)

    def write_metrics(self, metrics: dict) -> None:
        self.write_text(METRICS_FILE, json.dumps(metrics, indent=2, sort_keys=False))

    def write_text(self, relative: str, text: str) -> None:
        """A small file inside the staging folder (committed with everything else)."""
        out = self.fs.create(self._Path(self.staging_uri(*relative.split("/"))), True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()

    def adopt(self, relative: str, written: str) -> bool:
        """Move a folder written elsewhere on this file system into the staging folder as ``relative``.

        False (nothing moved) when ``written`` does not exist, e.g. a partition no row went to.
        """
        source = self._Path(written)
        if not self.fs.exists(source):
            return False
        self.fs.mkdirs(self.staging)
        into = self.staging_uri(*relative.split("/"))
        if not self.fs.rename(source, self._Path(into)):
            raise OutputError(f"could not move {written} into {into}")
        return True

    def scratch_uri(self) -> str:
        """A hidden folder beside the output for files this run moves in later (``adopt``); a
        killed run's is removed with its staging folder by the next run."""
        return self._Path(self.parent, f".{self.name}{_STAGING_MARK}{self.run_id}-shared").toString()

    def remove_scratch(self) -> None:
        scratch = self._Path(self.scratch_uri())
        if self.fs.exists(scratch):
            self.fs.delete(scratch, True)

    def commit(self) -> None:
        """Swap the staging folder in: two renames, then drop the previous snapshot."""
        if not self.lock.still_held():
            raise OutputError(
                f"lost the lock {self.lock.uri} while writing {self.uri} (taken over as stale); "
                f"the previous snapshot is left in place"
            )
        if self.fs.exists(self.path):
            if not self.fs.rename(self.path, self.old):
                raise OutputError(f"could not move the previous snapshot {self.uri} aside")
        if not self.fs.rename(self.staging, self.path):
            if self.fs.exists(self.old):
                self.fs.rename(self.old, self.path)
            raise OutputError(f"could not move the new snapshot into {self.uri}")
        if self.fs.exists(self.old):
            self.fs.delete(self.old, True)
        self._drop_rejected()

    def keep_rejected(self, relative: str) -> str:
        """Move ``relative`` from the staging folder to the rejected folder beside the output; its URI.

        A run its own checks reject leaves the output as it was, and ``abort`` deletes its staging
        folder; what the user needs to see why (its quarantine) is kept here instead, replacing what
        an earlier rejected run kept. Hidden, like the staging folder, so that readers of the
        output's parent (a partitioned table of snapshots) never take it for data.
        """
        self._drop_rejected()
        self.fs.mkdirs(self.rejected)
        kept = self._Path(self.rejected, relative)
        if not self.fs.rename(self._Path(self.staging_uri(relative)), kept):
            raise OutputError(f"could not move {self.staging_uri(relative)} to {kept.toString()}")
        return kept.toString()

    def _drop_rejected(self) -> None:
        """Delete what an earlier rejected run kept: a committed or rejected run supersedes it."""
        if self.fs.exists(self.rejected):
            self.fs.delete(self.rejected, True)

    def abort(self) -> None:
        if self.fs.exists(self.staging):
            self.fs.delete(self.staging, True)


def _checked(parts: tuple[str, ...]) -> tuple[str, ...]:
    """Path components below the output: each one a single name that stays inside its folder."""
    for part in parts:
        if part in ("", ".", "..") or "/" in part or "\\" in part:
            raise OutputError(
                f"refusing to write {part!r}: not a single folder or file name inside the output"
            )
    return parts

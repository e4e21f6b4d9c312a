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

from pyspark.sql import SparkSession

from airflow_cdc_provider.contract.metrics import METRICS_FILE, QUARANTINE_DIR, STATE_DIR, STATE_FILE
from airflow_cdc_provider.contract.tables import table_folder
from airflow_cdc_provider.replay.output_lock import (
    LOCK_MARK,
    OutputBusyError,
    OutputLock,
)
from airflow_cdc_provider.spark.filesystem import (
    child,
    job_filesystem,
    matches_component,
    name_of,
    parent_of,
    split_uri,
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
        self.fs = job_filesystem(self.spark)
        self.uri = self.fs.qualify(self.output)
        self.parent = parent_of(self.uri)
        self.name = name_of(self.uri)
        self.run_id = uuid.uuid4().hex[:12]
        beside = self.parent or self.uri
        self.staging = child(beside, f".{self.name}{_STAGING_MARK}{self.run_id}")
        self.old = child(beside, f".{self.name}{_OLD_MARK}{self.run_id}")
        self.rejected = child(beside, f".{self.name}{_REJECTED_MARK}")
        self.lock = OutputLock(self.fs, child(beside, f".{self.name}{LOCK_MARK}"), self.run_id)

    @property
    def filesystem_id(self) -> tuple[str, str]:
        """(scheme, authority): outputs with the same id can take each other's folders by rename."""
        scheme, authority, _ = split_uri(self.uri)
        return scheme, authority

    def staging_uri(self, *parts: str) -> str:
        return child(self.staging, *_checked(parts))

    def final_uri(self, *parts: str) -> str:
        return child(self.uri, *_checked(parts))

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
        out = _location(self.uri)
        for raw in inputs:
            inp = _location(self.fs.qualify(raw))
            if out[0] != inp[0]:
                continue
            shared = min(len(out[1]), len(inp[1]))
            if all(matches_component(g, o) for g, o in zip(inp[1][:shared], out[1][:shared])):
                raise OutputError(
                    f"output {self.uri} and input {raw} overlap (the output is, contains or lies inside "
                    f"the input); write the snapshot outside the landed files"
                )

    def check_replaceable(self) -> None:
        """Refuse to replace anything but a folder this job wrote, holding only what it wrote."""
        status = self.fs.status(self.uri)
        if status is None:
            return
        if not status.is_dir:
            raise OutputError(f"output {self.uri} exists and is a file; choose a folder")
        names = {entry.name for entry in self.fs.list_dir(self.uri)}
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
        try:
            previous = json.loads(self.fs.read_text(child(self.uri, METRICS_FILE)))
        except ValueError:
            raise OutputError(
                f"output {self.uri} holds a {METRICS_FILE} that is not valid JSON; refusing to replace it"
            ) from None
        tables = previous.get("tables") if isinstance(previous, dict) else None
        # Hadoop's local file system writes a hidden .NAME.crc checksum beside each file it creates.
        written = {METRICS_FILE, f".{METRICS_FILE}.crc", QUARANTINE_DIR, *map(table_folder, tables or {})}
        if self._holds_state():
            written.add(STATE_DIR)
        return written

    def _holds_state(self) -> bool:
        """Whether the output holds the ``_cdc_state/`` a ``--keep-state`` run writes (and nothing
        else under that name: a folder with its ``state.json``)."""
        state = self.fs.status(child(self.uri, STATE_DIR))
        return state is not None and state.is_dir and self.fs.exists(child(self.uri, STATE_DIR, STATE_FILE))

    def clean_leftovers(self) -> None:
        """Remove staging/old folders of earlier runs that were killed before they finished (this
        run's own scratch folder, written before the lock was taken, stays)."""
        if self.parent is None or not self.fs.exists(self.parent):
            return
        prefix_staging = f".{self.name}{_STAGING_MARK}"
        prefix_old = f".{self.name}{_OLD_MARK}"
        for status in self.fs.list_dir(self.parent):
            name = status.name
            if name.startswith(prefix_old) and not self.fs.exists(self.uri):
                # Killed between the two renames: the old snapshot is the last complete one.
                self.fs.rename(status.uri, self.uri)
            elif name.startswith((prefix_staging, prefix_old)) and self.run_id not in name:
                self.fs.delete(status.uri, True)

    def write_metrics(self, metrics: dict) -> None:
        self.write_text(METRICS_FILE, json.dumps(metrics, indent=2, sort_keys=False))

    def write_text(self, relative: str, text: str) -> None:
        """A small file inside the staging folder (committed with everything else)."""
        self.fs.write_bytes(self.staging_uri(*relative.split("/")), text.encode("utf-8"))

    def adopt(self, relative: str, written: str) -> bool:
        """Move a folder written elsewhere on this file system into the staging folder as ``relative``.

        False (nothing moved) when ``written`` does not exist, e.g. a partition no row went to.
        """
        if not self.fs.exists(written):
            return False
        self.fs.mkdirs(self.staging)
        into = self.staging_uri(*relative.split("/"))
        if not self.fs.rename(written, into):
            raise OutputError(f"could not move {written} into {into}")
        return True

    def scratch_uri(self) -> str:
        """A hidden folder beside the output for files this run moves in later (``adopt``); a
        killed run's is removed with its staging folder by the next run."""
        return child(self.parent or self.uri, f".{self.name}{_STAGING_MARK}{self.run_id}-shared")

    def remove_scratch(self) -> None:
        if self.fs.exists(self.scratch_uri()):
            self.fs.delete(self.scratch_uri(), True)

    def commit(self) -> None:
        """Swap the staging folder in: two renames, then drop the previous snapshot."""
        if not self.lock.still_held():
            raise OutputError(
                f"lost the lock {self.lock.uri} while writing {self.uri} (taken over as stale); "
                f"the previous snapshot is left in place"
            )
        if self.fs.exists(self.uri):
            if not self.fs.rename(self.uri, self.old):
                raise OutputError(f"could not move the previous snapshot {self.uri} aside")
        if not self.fs.rename(self.staging, self.uri):
            if self.fs.exists(self.old):
                self.fs.rename(self.old, self.uri)
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
        kept = child(self.rejected, relative)
        if not self.fs.rename(self.staging_uri(relative), kept):
            raise OutputError(f"could not move {self.staging_uri(relative)} to {kept}")
        return kept

    def _drop_rejected(self) -> None:
        """Delete what an earlier rejected run kept: a committed or rejected run supersedes it."""
        if self.fs.exists(self.rejected):
            self.fs.delete(self.rejected, True)

    def abort(self) -> None:
        if self.fs.exists(self.staging):
            self.fs.delete(self.staging, True)


def _location(uri: str) -> tuple[tuple[str, str], list[str]]:
    """(scheme, authority) and the normalised path components of a qualified URI."""
    scheme, authority, path = split_uri(uri)
    if scheme == "file":
        path = os.path.realpath(path)  # a symlinked folder is the folder it points to
    parts = [p for p in posixpath.normpath(path or "/").split("/") if p]
    return (scheme, authority), parts


def _checked(parts: tuple[str, ...]) -> tuple[str, ...]:
    """Path components below the output: each one a single name that stays inside its folder."""
    for part in parts:
        if part in ("", ".", "..") or "/" in part or "\\" in part:
            raise OutputError(
                f"refusing to write {part!r}: not a single folder or file name inside the output"
            )
    return parts

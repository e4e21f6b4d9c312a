"""One run per output at a time: a lock file beside OUTPUT, taken by an exclusive create.

Two runs writing one OUTPUT would delete each other's staging folder (each run cleans the
leftovers of killed runs) and swap in whichever finished last. So before it touches anything, a
run creates ``PARENT/.NAME.cdc-lock`` and fails if the file exists; the file holds the run's id,
host, process id and start time, so the refusal can say who holds it.

Exclusive create works on any Hadoop file system: HDFS refuses ``create(overwrite=false)`` of an
existing file atomically in its NameNode; on the local file system Hadoop only checks first, so
there the file is created with ``O_CREAT | O_EXCL`` instead. On object stores without conditional
writes (S3A before conditional create) the check is best effort.

Stale locks: a run killed with ``kill -9`` (or whose machine died) leaves its lock behind. The
holder touches the lock every ``HEARTBEAT_SECONDS``; a lock is stale when its holder ran on this
host and that process is gone, or when it has not been touched for ``STALE_AFTER_SECONDS``. A
stale lock is moved aside under a unique name (a rename, so of two runs breaking it at once only
one succeeds) and deleted; then the lock is created again. To release a lock by hand, delete the
file after making sure no run is writing that output.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

from airflow_cdc_provider.spark.filesystem import JobFileSystem

HEARTBEAT_SECONDS = 20.0
STALE_AFTER_SECONDS = 120.0
LOCK_MARK = ".cdc-lock"


class OutputBusyError(RuntimeError):
    """Another run is writing the same output."""


@dataclass(frozen=True)
class LockHolder:
    run_id: str
    host: str
    pid: int
    started_at: str

    @classmethod
    def this_process(cls, run_id: str) -> LockHolder:
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        return cls(run_id=run_id, host=socket.gethostname(), pid=os.getpid(), started_at=started)

    def describe(self) -> str:
        return f"run {self.run_id} (host {self.host}, pid {self.pid}, since {self.started_at})"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class OutputLock:
    """The lock file of one output; ``acquire`` before checking or cleaning, ``release`` at the end.

    ``fs`` is the job's file-system seam and ``uri`` the lock file's.
    """

    def __init__(self, fs: JobFileSystem, uri: str, run_id: str) -> None:
        self.fs = fs
        self.uri = uri
        self.holder = LockHolder.this_process(run_id)
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def acquire(self) -> None:
        """Take the lock, breaking a stale one; raise ``OutputBusyError`` if a live run holds it."""
        for _ in range(3):
            if self._create():
                self._start_heartbeat()
                return
            held = self.read()
            if held is None:
                # Gone meanwhile (try again), or unreadable: a holder still writing it, or killed doing so.
                age = self._age_seconds()
                if age is None:
                    continue
                if age <= STALE_AFTER_SECONDS:
                    raise OutputBusyError(self._busy_message(None))
            elif not self._stale(held):
                raise OutputBusyError(self._busy_message(held))
            self._break(held)
        raise OutputBusyError(f"could not take the lock {self.uri}: other runs keep taking it; try again")

    def still_held(self) -> bool:
        """True when the lock file still names this run (it was not broken as stale meanwhile)."""
        held = self.read()
        for _ in range(3):
            if held is not None:
                break
            # Unreadable for a moment: a heartbeat on a store without setTimes is rewriting it.
            time.sleep(0.2)
            held = self.read()
        return held is not None and held.run_id == self.holder.run_id

    def release(self) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=HEARTBEAT_SECONDS)
        if self.still_held():
            self.fs.delete(self.uri, False)

    def read(self, uri: str | None = None) -> LockHolder | None:
        """The holder named in the lock file (or ``uri``); None when it is gone or unreadable."""
        try:
            data = json.loads(self.fs.read_bytes(uri or self.uri).decode("utf-8"))
            return LockHolder(**data)
        except (ValueError, TypeError):
            return None
        except Exception:  # noqa: BLE001 - gone: FileNotFoundError here, FileNotFoundException in the JVM
            return None

    # ------------------------------------------------------------------ internals

    def _content(self) -> bytes:
        return json.dumps(asdict(self.holder)).encode("utf-8")

    def _create(self) -> bool:
        return self.fs.create_new(self.uri, self._content())

    def _age_seconds(self) -> float | None:
        status = self.fs.status(self.uri)
        return None if status is None else time.time() - status.modified_ms / 1000.0

    def _stale(self, held: LockHolder) -> bool:
        if held.host == self.holder.host and not _process_alive(held.pid):
            return True
        age = self._age_seconds()
        return age is None or age > STALE_AFTER_SECONDS

    def _break(self, judged: LockHolder | None) -> None:
        """Move a stale lock aside and delete it; put it back if it changed hands meanwhile."""
        aside = f"{self.uri}.stale-{self.holder.run_id}"
        if not self.fs.rename(self.uri, aside):
            return  # someone else broke or released it first: try to create again
        moved = self.read(aside)
        if judged is not None and (moved is None or moved.run_id != judged.run_id):
            self.fs.rename(aside, self.uri)
            raise OutputBusyError(self._busy_message(moved or judged))
        self.fs.delete(aside, False)

    def _busy_message(self, held: LockHolder | None) -> str:
        who = held.describe() if held is not None else "run (its lock file is not readable yet)"
        return (
            f"output is being written by another cdc-replay {who}; wait for it to finish. "
            f"If no run is writing it, delete the lock file {self.uri} (a lock left by a killed run is "
            f"taken over automatically after {int(STALE_AFTER_SECONDS)} s without a heartbeat)"
        )

    def _start_heartbeat(self) -> None:
        self._heartbeat = threading.Thread(target=self._beat, name="cdc-replay-lock-heartbeat", daemon=True)
        self._heartbeat.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                now_ms = int(time.time() * 1000)
                renewed = self.fs.touch(self.uri)
                # Only a store that ignores a new modification time (S3A, object stores) needs the
                # file rewritten; file systems that keep whole seconds land within a few seconds of now.
                if abs(renewed - now_ms) > 5000 and self.still_held():
                    self.fs.write_bytes(self.uri, self._content())
            except Exception:  # noqa: BLE001 - a missed beat is retried; the run itself decides
                continue

"""Where a long run is, on stderr: its phases with their files and bytes, and Spark's stages and tasks.

The replay marks its phases with one-line calls (``phase``, ``step``); they do nothing unless a
``Reporter`` is active, which ``cdc-replay`` starts around a run unless ``--quiet``. Spark's own
progress comes from the session (``Reporter.watch``): in classic mode, embedded or under
spark-submit, a daemon thread polls ``SparkContext.statusTracker()``; over Spark Connect, the
progress the server reports with each execution arrives through ``registerProgressHandler``. Neither
starts a Spark job: the markers report what the run already holds (the listing's files and sizes,
counts it collected).

Two renderers. On a terminal, ``RichRenderer``: the phase lines scroll above a ``rich`` progress bar
of the running stages' tasks. Elsewhere (Airflow's task log, spark-submit's output),
``PlainRenderer``: one line per phase as it starts, and a line of Spark's progress while a stage runs,
at most one every ``PLAIN_INTERVAL`` seconds after the last line of any kind; no bar characters.

Nothing here shows a value of a row: a marker takes a phase name, files (their sizes are read),
counts and an AS OF, and Spark's progress is stage ids and task counts.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from airflow_cdc_provider.contract.as_of import format_as_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Plain lines: Spark's progress at most this often (seconds since the last line of any kind).
PLAIN_INTERVAL = 5.0
# How often the classic poller asks Spark's status tracker: a few py4j calls each time.
POLL_SECONDS = {"plain": 1.0, "terminal": 0.25}
# The phases of a run, in the order a rebuild goes through them (docs/contract.md, "Progress").
PHASES = ("starting", "listing", "decoding", "fold", "versions", "typing", "writing", "done")
# Stages named in one line at most; more are counted.
_SHOWN_STAGES = 3

_current: Reporter | None = None
_current_lock = threading.Lock()


def phase(
    name: str,
    *,
    files: Sequence[Any] | None = None,
    unread: Sequence[Any] | None = None,
    events: int | None = None,
    tables: int | None = None,
    as_of_ms: int | None = None,
) -> None:
    """Mark the start of phase ``name`` of the run (one of ``PHASES``), with what it works on:
    ``files`` (objects with a ``size``: the landing's files), ``unread`` (files listed but not
    read), counts of ``events`` and ``tables``, the AS OF. Nothing without an active reporter."""
    reporter = _current
    if reporter is not None:
        reporter.phase(name, describe(name, files, unread, events, tables, as_of_ms))


def step(done: int, total: int, unit: str) -> None:
    """Within the current phase, ``done`` of ``total`` ``unit`` (e.g. tables written) are done."""
    reporter = _current
    if reporter is not None:
        reporter.step(done, total, unit)


def describe(
    name: str,
    files: Sequence[Any] | None = None,
    unread: Sequence[Any] | None = None,
    events: int | None = None,
    tables: int | None = None,
    as_of_ms: int | None = None,
) -> str:
    """A phase's line: ``listing: 9 files, 61.4 KiB; 2 after AS OF + lateness, not read``."""
    details = []
    if as_of_ms is not None:
        details.append(f"as of {format_as_of(as_of_ms)}")
    if files is not None:
        details.append(f"{_count(len(files), 'file')}, {human_bytes(sum(f.size for f in files))}")
    if events is not None:
        details.append(_count(events, "event"))
    if tables is not None:
        details.append(_count(tables, "table"))
    text = f"{name}: {', '.join(details)}" if details else name
    if unread:
        text += f"; {len(unread)} after AS OF + lateness, not read"
    return text


def human_bytes(size: int) -> str:
    """``size`` in binary units, one decimal: ``512 B``, ``61.4 KiB``, ``3.2 GiB``."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    power = 0
    while power < len(units) - 1 and size >= 1024 ** (power + 1):
        power += 1
    return f"{size} B" if power == 0 else f"{size / 1024**power:.1f} {units[power]}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


@dataclass(frozen=True, order=True)
class StageProgress:
    """One running stage: its id and its tasks."""

    stage_id: int
    tasks: int
    completed: int
    running: int = 0


@dataclass(frozen=True)
class SparkProgress:
    """Spark's progress at one moment: the running stages, the tasks running, and (over Spark
    Connect, which reports it) the input read so far by the current execution."""

    stages: tuple[StageProgress, ...] = ()
    running: int = 0
    bytes_read: int | None = None

    @property
    def tasks(self) -> int:
        return sum(s.tasks for s in self.stages)

    @property
    def completed(self) -> int:
        return sum(s.completed for s in self.stages)

    def text(self) -> str:
        """``stage 12: 3/4 tasks, 1 running`` (``stages 12, 13: ...`` for several)."""
        ids = [str(s.stage_id) for s in self.stages[:_SHOWN_STAGES]]
        if len(self.stages) > _SHOWN_STAGES:
            ids.append(f"+{len(self.stages) - _SHOWN_STAGES} more")
        label = "stage" if len(self.stages) == 1 else "stages"
        text = f"{label} {', '.join(ids)}: {self.completed}/{self.tasks} tasks, {self.running} running"
        if self.bytes_read:
            text += f", {human_bytes(self.bytes_read)} read"
        return text


class Renderer(Protocol):
    """Shows a reporter's phases and Spark's progress; ``elapsed``: seconds since the run began."""

    poll_seconds: float

    def phase(self, elapsed: float, name: str, text: str) -> None: ...

    def spark(self, elapsed: float, label: str, progress: SparkProgress) -> None: ...

    def close(self) -> None: ...


class PlainRenderer:
    """Lines for a log, to ``stream`` (default: ``sys.stderr`` as it is at each line)."""

    poll_seconds = POLL_SECONDS["plain"]

    def __init__(self, stream: TextIO | None = None, interval: float | None = None) -> None:
        self._stream = stream
        self._interval = PLAIN_INTERVAL if interval is None else interval
        self.poll_seconds = min(POLL_SECONDS["plain"], self._interval / 2)
        self._last = float("-inf")

    def _write(self, elapsed: float, text: str) -> None:
        stream = self._stream or sys.stderr
        stream.write(f"cdc-replay [{elapsed:6.1f}s] {text}\n")
        stream.flush()
        self._last = elapsed

    def phase(self, elapsed: float, name: str, text: str) -> None:
        self._write(elapsed, text)

    def spark(self, elapsed: float, label: str, progress: SparkProgress) -> None:
        if progress.stages and elapsed - self._last >= self._interval:
            self._write(elapsed, f"{label}: {progress.text()}")

    def close(self) -> None:
        pass


class RichRenderer:
    """A ``rich`` progress bar on ``console`` (default: stderr), the phase lines printed above it.

    Only stderr is taken over while the bar shows: what else writes to it (the job's log, the
    JVM's lines) prints above the bar; stdout, which carries the metrics, is left alone.
    """

    poll_seconds = POLL_SECONDS["terminal"]

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[stages]}"),
            TimeElapsedColumn(),
            console=console if console is not None else Console(stderr=True),
            transient=True,
            redirect_stdout=False,
            refresh_per_second=4,
        )
        self._task = self._progress.add_task("starting", total=None, stages="")
        self._progress.start()

    def phase(self, elapsed: float, name: str, text: str) -> None:
        self._progress.console.print(f"[{elapsed:6.1f}s] {text}", markup=False, highlight=False)
        self._progress.update(self._task, description=name, total=None, completed=0, stages="")

    def spark(self, elapsed: float, label: str, progress: SparkProgress) -> None:
        if progress.stages:
            self._progress.update(
                self._task,
                description=label,
                total=max(progress.tasks, 1),
                completed=progress.completed,
                stages=progress.text(),
            )
        else:
            self._progress.update(self._task, description=label, total=None, completed=0, stages="")

    def close(self) -> None:
        self._progress.stop()


class Reporter:
    """The progress of one run: ``with reporter:`` makes it the one ``phase`` and ``step`` report
    to; ``watch`` follows a session's stages; leaving the block stops both and the renderer.
    Without a renderer (``--quiet``) it does nothing."""

    def __init__(self, renderer: Renderer | None) -> None:
        self.renderer = renderer
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._phase = "starting"
        self._step = ""
        self._watcher: _StatusPoller | _ConnectProgress | None = None

    def __enter__(self) -> Reporter:
        global _current
        with _current_lock:
            if _current is not None:
                raise RuntimeError("a progress reporter is already active")
            _current = self if self.renderer is not None else None
        self._started = time.monotonic()
        return self

    def __exit__(self, *exc_info: object) -> None:
        global _current
        with _current_lock:
            if _current is self:
                _current = None
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        with self._lock:
            self._show("close")

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def phase(self, name: str, text: str | None = None) -> None:
        with self._lock:
            self._phase, self._step = name, ""
            self._show("phase", self.elapsed(), name, text or name)

    def step(self, done: int, total: int, unit: str) -> None:
        with self._lock:
            self._step = f" {done}/{total} {unit}"

    def spark(self, progress: SparkProgress) -> None:
        """Spark's progress, from the poller or the Connect handler."""
        with self._lock:
            self._show("spark", self.elapsed(), self._phase + self._step, progress)

    def _show(self, method: str, *args: Any) -> None:
        """``self.renderer.method(*args)``; a stderr that went away ends the progress, not the run."""
        if self.renderer is None:
            return
        try:
            getattr(self.renderer, method)(*args)
        except (OSError, ValueError):
            logging.getLogger(__name__).debug("progress display stopped", exc_info=True)
            self.renderer = None

    def watch(self, spark: SparkSession) -> None:
        """Follow ``spark``'s stages until the block ends."""
        if self.renderer is None or self._watcher is not None:
            return
        from airflow_cdc_provider.spark.session import is_connect

        if is_connect(spark):
            self._watcher = _ConnectProgress(spark, self.spark)
        else:
            self._watcher = _StatusPoller(spark, self.spark, self.renderer.poll_seconds)

    def done(self, metrics: Iterable[dict]) -> None:
        """The closing line of each snapshot written: its rows, tables and events read."""
        for one in metrics:
            tables = one.get("tables") or {}
            read = (one.get("events") or {}).get("read")
            text = f"done: as of {one.get('as_of')}: {_count(int(one.get('rows') or 0), 'row')} in "
            text += _count(len(tables), "table")
            if read is not None:
                text += f", {_count(int(read), 'event')} read"
            self.phase("done", text)


class _StatusPoller:
    """Classic mode: a daemon thread that reads the running stages from Spark's status tracker."""

    def __init__(self, spark: SparkSession, report: Any, every: float) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._report = report
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cdc-replay-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                progress = self.poll()
            except Exception:  # noqa: BLE001 - the context stopped or py4j is closing: progress ends
                logging.getLogger(__name__).debug("stage progress stopped", exc_info=True)
                return
            self._report(progress)

    def poll(self) -> SparkProgress:
        stages = []
        for stage_id in self._tracker.getActiveStageIds():
            info = self._tracker.getStageInfo(stage_id)
            if info is not None:
                stages.append(
                    StageProgress(info.stageId, info.numTasks, info.numCompletedTasks, info.numActiveTasks)
                )
        return SparkProgress(tuple(sorted(stages)), sum(s.running for s in stages))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class _ConnectProgress:
    """Spark Connect: the progress the server reports with each execution (PySpark's
    ``ProgressHandler`` interface), turned into ``SparkProgress``."""

    def __init__(self, spark: SparkSession, report: Any) -> None:
        self._spark = spark
        self._report = report
        spark.registerProgressHandler(self)

    def __call__(
        self,
        stages: Iterable[Any] | None = None,
        inflight_tasks: int = 0,
        operation_id: str | None = None,
        done: bool = False,
    ) -> None:
        seen = list(stages or ())
        running = (
            ()
            if done
            else tuple(
                sorted(
                    StageProgress(s.stage_id, s.num_tasks, s.num_completed_tasks) for s in seen if not s.done
                )
            )
        )
        self._report(
            SparkProgress(running, 0 if done else inflight_tasks, sum(s.num_bytes_read for s in seen))
        )

    def stop(self) -> None:
        try:
            self._spark.removeProgressHandler(self)
        except ValueError:  # already removed
            pass


def reporter_for(quiet: bool, stream: TextIO | None = None) -> Reporter:
    """The reporter ``cdc-replay`` runs with: none with ``quiet``; a progress bar when ``stream``
    (default stderr) is a terminal; plain lines otherwise."""
    if quiet:
        return Reporter(None)
    if not (stream or sys.stderr).isatty():
        return Reporter(PlainRenderer(stream))
    from rich.console import Console

    return Reporter(RichRenderer(Console(stderr=True) if stream is None else Console(file=stream)))


class StderrHandler(logging.StreamHandler):
    """A logging handler that writes to ``sys.stderr`` as it is at each record, so that the job's
    log lines print above a progress bar that redirected it."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)

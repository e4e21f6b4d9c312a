"""Whether the landed files cover AS OF: the three strategies of ``CdcLandedFilesSensor``.

A snapshot as of T is only right once every change up to T has landed. A sink signals that in one
of three ways, and the user picks the one their sink gives:

- ``marker``: the sink writes a done-marker (``_SUCCESS`` or a named file) into a partition once
  it is complete. Covered when the partition that covers AS OF holds the marker.
- ``partition``: the sink partitions by time and only starts a partition once it has moved past
  the previous one. Covered when a partition later than the one covering AS OF exists.
- ``event_time``: no markers, no time partitions (or not trusted). Covered when the newest landed
  event time, read from the last records of the newest few files, is later than AS OF plus an
  allowed lateness.

"The partition that covers AS OF" is the one holding the last millisecond before AS OF, so a daily
run whose AS OF is midnight waits for the day that ends at that midnight, not for the next one.
Everything here is plain Python over a :class:`LandingProbe`: no Airflow, no Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_cdc_provider.contract.as_of import format_as_of
from airflow_cdc_provider.contract.partitions import PartitionLayout
from airflow_cdc_provider.landing.event_time import extractor_for, newest_event_ms
from airflow_cdc_provider.landing.layout import detect_hive_layout, existing_partitions
from airflow_cdc_provider.landing.probe import LandingProbe, ProbedFile

STRATEGIES = ("marker", "partition", "event_time")
DEFAULT_MARKER = "_SUCCESS"
# How much of each newest file the event_time strategy reads, from its end.
TAIL_BYTES = 64 * 1024
TAIL_LINES = 50


class CoverageSpecError(ValueError):
    """A sensor argument that makes no sense for the chosen strategy."""


@dataclass(frozen=True)
class Coverage:
    """The answer of one check: covered or not, what it waits for, and what it saw."""

    covered: bool
    waiting_for: str
    seen: str


@dataclass(frozen=True)
class CoverageSpec:
    """One coverage question, in primitives only (the trigger serialises exactly these fields).

    :param path: the landing root, a local path or a URI.
    :param as_of_ms: AS OF in epoch milliseconds.
    :param strategy: ``marker``, ``partition`` or ``event_time``.
    :param marker: done-marker file name (``marker``).
    :param partition_pattern: strftime pattern of the partition folders; None: hive-style
        ``dt=``/``date=``/``ds=`` (and ``hour=``/``hr=``) folders, detected.
    :param partition_timezone: the time zone partition folder names are written in.
    :param source_format: the ``--format`` of the records (``event_time``).
    :param allowed_lateness_ms: how much later than AS OF the newest event must be (``event_time``).
    :param newest_files: how many of the newest files to read (``event_time``).
    :param conn_id: Airflow connection for the object store of a URI ``path``.
    """

    path: str
    as_of_ms: int
    strategy: str = "marker"
    marker: str = DEFAULT_MARKER
    partition_pattern: str | None = None
    partition_timezone: str = "UTC"
    source_format: str | None = None
    allowed_lateness_ms: int = 0
    newest_files: int = 3
    conn_id: str | None = None

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise CoverageSpecError(f"strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")
        if not self.path or not self.path.strip():
            raise CoverageSpecError("path must name the landing folder")
        if not self.marker or "/" in self.marker or self.marker in (".", ".."):
            raise CoverageSpecError(f"marker must be a file name (no '/'), got {self.marker!r}")
        if self.partition_pattern is not None:
            PartitionLayout(self.partition_pattern, self.partition_timezone)  # validates both
        if self.strategy == "event_time":
            if not self.source_format:
                raise CoverageSpecError(
                    "strategy 'event_time' needs source_format (the --format of the landed records)"
                )
            extractor_for(self.source_format)  # fails clearly for formats it cannot read
        if self.allowed_lateness_ms < 0:
            raise CoverageSpecError(
                f"allowed_lateness must not be negative, got {self.allowed_lateness_ms} ms"
            )
        if self.newest_files < 1:
            raise CoverageSpecError(f"newest_files must be at least 1, got {self.newest_files}")

    @property
    def as_of(self) -> str:
        return format_as_of(self.as_of_ms)

    def layout(self, probe: LandingProbe) -> PartitionLayout | None:
        """The partition layout: the given pattern, or the hive layout found in the landing."""
        if self.partition_pattern is not None:
            return PartitionLayout(self.partition_pattern, self.partition_timezone)
        return detect_hive_layout(probe, self.partition_timezone)

    def summary(self, coverage: Coverage) -> dict[str, Any]:
        """What the sensor returns (XCom) once covered."""
        return {"path": self.path, "strategy": self.strategy, "as_of": self.as_of, "seen": coverage.seen}


def _instant(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _covering_start(layout: PartitionLayout, as_of_ms: int) -> datetime:
    """Start of the partition holding the last millisecond before AS OF."""
    start = layout.start_of(layout.holding(_instant(as_of_ms - 1)))
    if start is None:
        raise CoverageSpecError(
            f"partition_pattern {layout.pattern!r} cannot read back the folders it writes"
        )
    return start


def _newest(partitions: list[tuple[datetime, str]], layout: PartitionLayout) -> str:
    if not partitions:
        return f"no partition folders matching {layout.pattern}"
    return f"newest partition is {partitions[-1][1]}"


def check_marker(spec: CoverageSpec, probe: LandingProbe) -> Coverage:
    layout = spec.layout(probe)
    if layout is None:
        waiting = (
            f"{probe.display(spec.marker)} (no dt=/date=/ds= partition folders, so a marker at the root)"
        )
        if probe.exists(spec.marker):
            return Coverage(True, waiting, f"{probe.display(spec.marker)} exists")
        return Coverage(False, waiting, f"{probe.display(spec.marker)} does not exist")
    start = _covering_start(layout, spec.as_of_ms)
    relative = layout.holding(start)
    waiting = f"{probe.display(f'{relative}/{spec.marker}')}, the done-marker of partition {relative}, which covers AS OF {spec.as_of}"
    if probe.exists(f"{relative}/{spec.marker}"):
        return Coverage(True, waiting, f"{probe.display(f'{relative}/{spec.marker}')} exists")
    # The sink may spell the same partition differently (hour=5 for hour=05): look it up by start.
    partitions = existing_partitions(layout, probe)
    for other_start, other in partitions:
        if other_start == start and other != relative and probe.exists(f"{other}/{spec.marker}"):
            return Coverage(True, waiting, f"{probe.display(f'{other}/{spec.marker}')} exists")
    return Coverage(False, waiting, f"no {spec.marker} in {relative}; {_newest(partitions, layout)}")


def check_partition(spec: CoverageSpec, probe: LandingProbe) -> Coverage:
    layout = spec.layout(probe)
    if layout is None:
        return Coverage(
            False,
            f"a partition later than the one covering AS OF {spec.as_of} under {probe.location}",
            f"no dt=/date=/ds= partition folders under {probe.location} (set partition_pattern for other layouts)",
        )
    start = _covering_start(layout, spec.as_of_ms)
    waiting = f"a partition later than {layout.holding(start)} (which covers AS OF {spec.as_of}) under {probe.location}"
    partitions = existing_partitions(layout, probe)
    later = [relative for partition_start, relative in partitions if partition_start > start]
    if later:
        return Coverage(True, waiting, f"partition {later[0]} exists")
    return Coverage(False, waiting, _newest(partitions, layout))


def _newest_files(spec: CoverageSpec, probe: LandingProbe) -> list[ProbedFile]:
    """The files most likely to hold the newest records: newest partitions first, then newest files.

    With time partitions only the newest partitions are listed (a poke must not list a whole
    landing); without, every file is listed (metadata only) and the most recently modified win.
    """

    def newest_first(files: list[ProbedFile]) -> list[ProbedFile]:
        return sorted(files, key=lambda f: (f.modified_ms or 0, f.relative), reverse=True)

    layout = spec.layout(probe)
    if layout is None:
        return newest_first(probe.files())[: spec.newest_files]
    chosen: list[ProbedFile] = []
    for _start, relative in reversed(existing_partitions(layout, probe)):
        chosen += newest_first(probe.files(relative))
        if len(chosen) >= spec.newest_files:
            break
    return chosen[: spec.newest_files]


def check_event_time(spec: CoverageSpec, probe: LandingProbe) -> Coverage:
    assert spec.source_format is not None  # checked by CoverageSpec
    threshold_ms = spec.as_of_ms + spec.allowed_lateness_ms
    lateness = timedelta(milliseconds=spec.allowed_lateness_ms)
    waiting = (
        f"a landed {spec.source_format} event later than {format_as_of(threshold_ms)} "
        f"(AS OF {spec.as_of} + allowed lateness {lateness}) under {probe.location}"
    )
    files = _newest_files(spec, probe)
    if not files:
        return Coverage(False, waiting, f"no data files under {probe.location}")
    newest: tuple[int, str] | None = None
    for file in files:
        ms = newest_event_ms(spec.source_format, probe.tail_lines(file, TAIL_BYTES, TAIL_LINES))
        if ms is not None and (newest is None or ms > newest[0]):
            newest = (ms, file.relative)
    if newest is None:
        names = ", ".join(f.relative for f in files)
        return Coverage(False, waiting, f"no {spec.source_format} event time in the last records of {names}")
    seen = f"newest event time {format_as_of(newest[0])} in {probe.display(newest[1])}"
    return Coverage(newest[0] > threshold_ms, waiting, seen)


_CHECKS = {"marker": check_marker, "partition": check_partition, "event_time": check_event_time}


def check_coverage(spec: CoverageSpec, probe: LandingProbe | None = None) -> Coverage:
    """Run the spec's strategy once (blocking I/O: call it from a thread in async code)."""
    return _CHECKS[spec.strategy](spec, probe or LandingProbe(spec.path, spec.conn_id))

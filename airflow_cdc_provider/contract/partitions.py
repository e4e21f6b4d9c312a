"""Time partitions of a landing: which folder holds which instant, and which ones a run can skip.

A sink that partitions by time writes ``dt=2024-09-02/hour=05/`` (hive style) or
``2024/09/02/05/`` (a strftime pattern). Both are one ``strftime`` pattern relative to the landing
root; a partition's *start* is what ``strptime`` reads from its path, and the partition that holds
an instant is that instant formatted with the pattern.

An event lands either in the partition of its own time or, when it lands late, in a later one. So
a partition that starts after ``AS OF + lateness`` holds nothing a snapshot as of AS OF applies,
and the job does not read it. The sensor (which waits for partitions) and the job (which skips
them) read folder names with the one pattern set below.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

PARTITIONS_AUTO = "auto"  # hive-style day (and hour) folders, wherever they appear in a path
PARTITIONS_NONE = "none"
DEFAULT_PARTITIONS = PARTITIONS_AUTO
DEFAULT_PARTITION_TIMEZONE = "UTC"
DEFAULT_LATENESS = "1h"

# Hive-style names a sink writes for day and hour partitions (the one set: sensor and job alike).
HIVE_DAY = re.compile(r"^(?P<name>dt|date|ds)=(?P<day>\d{4}-\d{2}-\d{2}|\d{8})$")
HIVE_HOUR = re.compile(r"^(?P<name>hour|hr)=(?P<hour>\d{1,2})$")
# strftime form of a hive day value, by its length.
HIVE_DAY_FORMATS = {10: "%Y-%m-%d", 8: "%Y%m%d"}

_DIRECTIVES = re.compile(r"(%[A-Za-z])+")
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)?\s*$")
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, None: 1000}
# Finest strftime directive of a pattern -> how long one partition lasts.
_STEP_OF_DIRECTIVE = (
    ("%S", "second"),
    ("%M", "minute"),
    ("%H", "hour"),
    ("%d", "day"),
    ("%j", "day"),
    ("%m", "month"),
    ("%Y", "year"),
)


class LandedPath(Protocol):
    """What pruning needs of a landed file: its full path and its path below the input folder."""

    path: str
    relative: str


class PartitionLayoutError(ValueError):
    """A partition pattern or time zone that cannot be used."""


@dataclass(frozen=True)
class PartitionLayout:
    """A strftime ``pattern`` of partition folders under the landing root, read in ``timezone``."""

    pattern: str
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        parts = self.pattern.split("/")
        if (
            "%Y" not in self.pattern
            or self.pattern.startswith("/")
            or any(p in ("", ".", "..") for p in parts)
        ):
            raise PartitionLayoutError(
                f"partition_pattern must be a relative strftime pattern containing %Y, e.g. "
                f"'dt=%Y-%m-%d/hour=%H' or '%Y/%m/%d', got {self.pattern!r}"
            )
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise PartitionLayoutError(f"unknown partition_timezone {self.timezone!r}") from None

    @property
    def glob(self) -> str:
        """The glob that lists every partition folder (each run of directives becomes one ``*``)."""
        return _DIRECTIVES.sub("*", self.pattern)

    def start_of(self, relative: str) -> datetime | None:
        """When the partition at ``relative`` starts (None when the path does not fit the pattern)."""
        try:
            naive = datetime.strptime(relative, self.pattern)
        except ValueError:
            return None
        return naive.replace(tzinfo=ZoneInfo(self.timezone)).astimezone(timezone.utc)

    def holding(self, instant: datetime) -> str:
        """The partition folder that holds ``instant`` (relative to the landing root)."""
        return instant.astimezone(ZoneInfo(self.timezone)).strftime(self.pattern)


class PartitionPruningError(ValueError):
    """A partition layout or lateness the job cannot use."""


def parse_duration_ms(text: str) -> int:
    """``90s``, ``15m``, ``1h``, ``2d``, ``500ms`` or plain seconds, as milliseconds."""
    match = _DURATION.match(str(text))
    if not match:
        raise PartitionPruningError(f"--lateness must be a duration such as 30m, 1h or 2d, not {text!r}")
    return int(match[1]) * _DURATION_MS[match[2]]


def _step(start: datetime, unit: str) -> datetime:
    """The start of the next partition (wall-clock arithmetic in the layout's time zone)."""
    if unit == "year":
        return start.replace(year=start.year + 1)
    if unit == "month":
        return start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
    return (
        start
        + {
            "second": timedelta(seconds=1),
            "minute": timedelta(minutes=1),
            "hour": timedelta(hours=1),
            "day": timedelta(days=1),
        }[unit]
    )


def _ms(moment: datetime) -> int:
    return int(moment.astimezone(timezone.utc).timestamp() * 1000)


@dataclass(frozen=True)
class PartitionPruning:
    """Which partitions a run reads: ``layout`` is ``auto``, ``none`` or a strftime folder pattern.

    A strftime pattern is matched against the leading folders of each file's path relative to the
    input it was found under; ``auto`` recognises hive-style ``dt=``/``date=``/``ds=`` day folders
    (``YYYY-MM-DD`` or ``YYYYMMDD``) with an optional ``hour=``/``hr=`` folder below, anywhere in
    the path. Files outside any recognised partition are always read.
    """

    layout: str = PARTITIONS_AUTO
    timezone: str = "UTC"
    lateness_ms: int = 3_600_000

    def __post_init__(self) -> None:
        if self.lateness_ms < 0:
            raise PartitionPruningError("--lateness cannot be negative")
        if self.layout not in (PARTITIONS_AUTO, PARTITIONS_NONE):
            PartitionLayout(self.layout, self.timezone)  # validates pattern and zone
        else:
            PartitionLayout("%Y", self.timezone)  # validates the zone

    @property
    def enabled(self) -> bool:
        return self.layout != PARTITIONS_NONE

    def window(self, landed: LandedPath) -> tuple[int, int] | None:
        """``(start_ms, end_ms)`` of the partition holding ``landed``, or None when it has none."""
        if self.layout == PARTITIONS_NONE:
            return None
        if self.layout == PARTITIONS_AUTO:
            return self._hive_window(landed.path)
        depth = self.layout.count("/") + 1
        folders = landed.relative.split("/")[:-1]
        if len(folders) < depth:
            return None
        start = PartitionLayout(self.layout, self.timezone).start_of("/".join(folders[:depth]))
        if start is None:
            return None
        unit = next(u for d, u in _STEP_OF_DIRECTIVE if d in self.layout)
        local = start.astimezone(ZoneInfo(self.timezone))
        return _ms(local), _ms(_step(local, unit))

    def _hive_window(self, path: str) -> tuple[int, int] | None:
        folders = path.split("/")[:-1]
        for i, folder in enumerate(folders):
            day = HIVE_DAY.match(folder)
            if not day:
                continue
            digits = day["day"].replace("-", "")
            try:
                start = datetime(
                    int(digits[:4]), int(digits[4:6]), int(digits[6:]), tzinfo=ZoneInfo(self.timezone)
                )
                hour = HIVE_HOUR.match(folders[i + 1]) if i + 1 < len(folders) else None
                if hour:
                    start = start.replace(hour=int(hour["hour"]))
            except ValueError:  # dt=2024-13-45: not a date, so not a time partition
                return None
            return _ms(start), _ms(_step(start, "hour" if hour else "day"))
        return None

    def split(self, files: list[LandedPath], as_of_ms: int) -> tuple[list[LandedPath], list[LandedPath]]:
        """``(read, skipped)``: a file is skipped when its partition starts after AS OF + lateness."""
        read, skipped = [], []
        for landed in files:
            window = self.window(landed)
            (skipped if window is not None and window[0] > as_of_ms + self.lateness_ms else read).append(
                landed
            )
        return read, skipped

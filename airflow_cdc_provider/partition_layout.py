"""Time-partitioned landing layouts: which folder holds which instant.

A sink that partitions by time writes ``dt=2024-09-02/hour=05/`` (hive style) or
``2024/09/02/05/`` (a strftime pattern). Both are one ``strftime`` pattern relative to the landing
root; a partition's *start* is what ``strptime`` reads from its path, and the partition that holds
an instant is that instant formatted with the pattern. The sensor's ``marker`` and ``partition``
strategies need nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

if TYPE_CHECKING:
    from airflow_cdc_provider.landing_probe import LandingProbe

_DIRECTIVES = re.compile(r"(%[A-Za-z])+")
# Hive-style names a sink writes for day and hour partitions, with the strftime form of each value.
_HIVE_DAY = re.compile(r"^(dt|date|ds)=(\d{4}-\d{2}-\d{2}|\d{8})$")
_HIVE_HOUR = re.compile(r"^(hour|hr)=\d{1,2}$")
_HIVE_DAY_FORMATS = {10: "%Y-%m-%d", 8: "%Y%m%d"}


class PartitionLayoutError(ValueError):
    """A partition pattern or time zone the sensor cannot use."""


@dataclass(frozen=True)
class PartitionLayout:
    """A strftime ``pattern`` of partition folders under the landing root, read in ``timezone``."""

    pattern: str
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        parts = self.pattern.split("/")
        if "%Y" not in self.pattern or self.pattern.startswith("/") or any(p in ("", ".", "..") for p in parts):
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

    def partitions(self, probe: LandingProbe) -> list[tuple[datetime, str]]:
        """Existing partition folders as (start, relative path), oldest first."""
        found = []
        for relative in probe.glob_dirs(self.glob):
            start = self.start_of(relative)
            if start is not None:
                found.append((start, relative))
        return sorted(found)


def detect_hive_layout(probe: LandingProbe, tz: str = "UTC") -> PartitionLayout | None:
    """The hive-style day (and hour) layout of a landing, or None when it has no such partitions.

    Looks at two directory levels only: ``dt=``/``date=``/``ds=`` folders (``YYYY-MM-DD`` or
    ``YYYYMMDD``) under the root, then ``hour=``/``hr=`` folders inside the newest of them.
    """
    days = [m for m in map(_HIVE_DAY.match, probe.child_dirs()) if m]
    if not days:
        return None
    newest = max(days, key=lambda m: m.group(2).replace("-", ""))
    day_pattern = f"{newest.group(1)}={_HIVE_DAY_FORMATS[len(newest.group(2))]}"
    hours = [name for name in probe.child_dirs(newest.group(0)) if _HIVE_HOUR.match(name)]
    if hours:
        return PartitionLayout(f"{day_pattern}/{hours[0].split('=')[0]}=%H", tz)
    return PartitionLayout(day_pattern, tz)

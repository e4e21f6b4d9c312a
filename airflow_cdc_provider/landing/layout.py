"""Partition folders as the sensor sees them: the existing ones, and the hive layout of a landing."""

from __future__ import annotations

from datetime import datetime

from airflow_cdc_provider.contract.partitions import (
    HIVE_DAY,
    HIVE_DAY_FORMATS,
    HIVE_HOUR,
    PartitionLayout,
)
from airflow_cdc_provider.landing.probe import LandingProbe


def existing_partitions(layout: PartitionLayout, probe: LandingProbe) -> list[tuple[datetime, str]]:
    """Existing partition folders as (start, relative path), oldest first."""
    found = []
    for relative in probe.glob_dirs(layout.glob):
        start = layout.start_of(relative)
        if start is not None:
            found.append((start, relative))
    return sorted(found)


def detect_hive_layout(probe: LandingProbe, tz: str = "UTC") -> PartitionLayout | None:
    """The hive-style day (and hour) layout of a landing, or None when it has no such partitions.

    Looks at two directory levels only: ``dt=``/``date=``/``ds=`` folders (``YYYY-MM-DD`` or
    ``YYYYMMDD``) under the root, then ``hour=``/``hr=`` folders inside the newest of them.
    """
    days = [m for m in map(HIVE_DAY.match, probe.child_dirs()) if m]
    if not days:
        return None
    newest = max(days, key=lambda m: m["day"].replace("-", ""))
    day_pattern = f"{newest['name']}={HIVE_DAY_FORMATS[len(newest['day'])]}"
    hours = [name for name in probe.child_dirs(newest.group(0)) if HIVE_HOUR.match(name)]
    if hours:
        return PartitionLayout(f"{day_pattern}/{HIVE_HOUR.match(hours[0])['name']}=%H", tz)
    return PartitionLayout(day_pattern, tz)

"""Reading less: time-partitioned landings are read only up to AS OF + lateness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import assert_events_add_up, rows_of

from airflow_cdc_provider.contract.partitions import (
    PartitionPruning,
    PartitionPruningError,
    parse_duration_ms,
)
from airflow_cdc_provider.replay.runs.snapshot import run_snapshot
from airflow_cdc_provider.replay.spec import spec_from_keywords
from airflow_cdc_provider.spark.reader import LandedFile

HOUR = 3_600_000
DAY = 24 * HOUR
SEP_2 = 1_725_235_200_000  # 2024-09-02T00:00:00Z


def window(path: str, layout: str = "auto", tz: str = "UTC", relative: str = "") -> tuple[int, int] | None:
    return PartitionPruning(layout, tz).window(LandedFile(path, 1, 0, relative=relative))


def test_partition_windows_of_hive_and_strftime_layouts():
    assert window("s3a://lake/cdc/dt=2024-09-02/part-0.json") == (SEP_2, SEP_2 + DAY)
    assert window("file:/l/ds=20240902/hr=05/p.json.gz") == (SEP_2 + 5 * HOUR, SEP_2 + 6 * HOUR)
    assert window("file:/l/date=2024-09-02/hour=23/x/p.json") == (SEP_2 + 23 * HOUR, SEP_2 + DAY)
    assert window("file:/l/dt=2024-09-02/part-0.json", tz="Asia/Shanghai") == (
        SEP_2 - 8 * HOUR,
        SEP_2 + 16 * HOUR,
    )
    assert window("file:/l/dt=2024-13-45/p.json") is None  # not a date: read, never skipped
    assert window("file:/l/topic/p.json") is None
    assert window("file:/l/dt=2024-09-02/p.json", layout="none") is None
    assert window("file:/l/2024/09/02/05/p.json", "%Y/%m/%d/%H", relative="2024/09/02/05/p.json") == (
        SEP_2 + 5 * HOUR,
        SEP_2 + 6 * HOUR,
    )
    assert window("file:/l/2024/12/p.json", "%Y/%m", relative="2024/12/p.json") == (
        1_733_011_200_000,
        1_735_689_600_000,
    )
    assert window("file:/l/other/p.json", "%Y/%m/%d", relative="other/p.json") is None


def test_bad_layouts_and_durations_are_refused_with_the_fix():
    with pytest.raises(
        PartitionPruningError, match=r"--lateness must be a duration such as 30m, 1h or 2d, not 'soon'"
    ):
        parse_duration_ms("soon")
    assert [parse_duration_ms(t) for t in ("90s", "15m", "2h", "1d", "250ms", "30")] == [
        90_000,
        900_000,
        7_200_000,
        86_400_000,
        250,
        30_000,
    ]
    with pytest.raises(
        ValueError, match="partition_pattern must be a relative strftime pattern containing %Y"
    ):
        PartitionPruning("/dt=%m")
    with pytest.raises(ValueError, match="unknown partition_timezone 'Mars/Olympus'"):
        PartitionPruning("auto", "Mars/Olympus")


def change(op: str, key: int, name: str | None, ms: int, pos: int) -> str:
    image = {"id": key, "name": name}
    return json.dumps(
        {
            "payload": {
                "op": op,
                "ts_ms": ms,
                "before": image if op == "d" else None,
                "after": None if op == "d" else image,
                "source": {"db": "db", "table": "t", "ts_ms": ms, "file": "bin.1", "pos": pos, "row": 0},
            }
        }
    )


def land(root: Path, hour: int, *lines: str) -> None:
    folder = root / "dt=2024-09-02" / f"hour={hour:02d}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "part-0.json").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_hourly_partitions_after_as_of_plus_lateness_are_not_read(spark, tmp_path):
    landing = tmp_path / "landing"
    at = lambda h, m: SEP_2 + h * HOUR + m * 60_000  # noqa: E731
    land(landing, 5, change("c", 1, "a", at(5, 1), 1), change("c", 2, "b", at(5, 2), 2))
    land(landing, 6, change("u", 1, "a6", at(6, 10), 3))
    # Landed in hour 7, within the hour of lateness: an event of 06:59 that arrived late.
    land(landing, 7, change("d", 2, None, at(6, 59), 4), change("c", 3, "c", at(7, 5), 5))
    land(landing, 8, change("c", 4, "d", at(8, 0), 6))
    (landing / "unpartitioned.json").write_text(change("c", 5, "e", at(4, 0), 0) + "\n", encoding="utf-8")
    as_of = at(6, 59)

    def run(name: str, **options) -> dict:
        spec = spec_from_keywords(
            source_format="debezium-json",
            inputs=[str(landing)],
            as_of=as_of,
            output=str(tmp_path / name),
            key=["id"],
            **options,
        )
        return run_snapshot(spark, spec)

    pruned, everything = run("pruned"), run("all", partitions="none")
    sizes = {
        h: (landing / "dt=2024-09-02" / f"hour={h:02d}" / "part-0.json").stat().st_size for h in (5, 6, 7, 8)
    }
    assert pruned["files"] == {
        "read": 4,
        "bytes": sum(sizes[h] for h in (5, 6, 7)) + (landing / "unpartitioned.json").stat().st_size,
        "skipped": 1,
        "bytes_skipped": sizes[8],
        "skipped_because": {"partition starts after AS OF + lateness": 1},
    }
    assert everything["files"]["skipped"] == 0 and everything["files"]["read"] == 5
    assert (
        rows_of(spark, tmp_path / "pruned" / "db.t")
        == rows_of(spark, tmp_path / "all" / "db.t")
        == [
            {"id": 1, "name": "a6"},
            {"id": 5, "name": "e"},
        ]
    )
    assert pruned["events"] == {
        "read": 6,
        "applied": 5,
        "after_as_of": 1,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 0,
    }
    assert_events_add_up(pruned)

    # Without lateness the hour-7 partition is skipped too, and the late delete with it.
    strict = run("strict", lateness="0s")
    assert strict["files"]["skipped"] == 2
    assert rows_of(spark, tmp_path / "strict" / "db.t") == [
        {"id": 1, "name": "a6"},
        {"id": 2, "name": "b"},
        {"id": 5, "name": "e"},
    ]


def test_a_strftime_layout_in_another_time_zone(spark, tmp_path):
    landing = tmp_path / "landing"
    for day in ("2024/09/02", "2024/09/03"):
        (landing / day).mkdir(parents=True)
    # Folders named in Shanghai time: 2024/09/03 starts at 2024-09-02T16:00Z.
    (landing / "2024/09/02/a.json").write_text(change("c", 1, "a", SEP_2 + HOUR, 1) + "\n", encoding="utf-8")
    (landing / "2024/09/03/a.json").write_text(
        change("c", 2, "b", SEP_2 + 17 * HOUR, 2) + "\n", encoding="utf-8"
    )
    spec = spec_from_keywords(
        source_format="debezium-json",
        inputs=[str(landing)],
        as_of=SEP_2 + 14 * HOUR,
        output=str(tmp_path / "out"),
        key=["id"],
        partitions="%Y/%m/%d",
        partition_timezone="Asia/Shanghai",
        lateness="1h",
    )
    metrics = run_snapshot(spark, spec)
    assert metrics["files"]["skipped_because"] == {"partition starts after AS OF + lateness": 1}
    assert rows_of(spark, tmp_path / "out" / "db.t") == [{"id": 1, "name": "a"}]

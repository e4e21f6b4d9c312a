"""The three coverage strategies on real landings: local folders, and an fsspec URI (memory://)."""

from __future__ import annotations

import gzip
import json
import os
import uuid
from pathlib import Path

import fsspec
import pytest

from airflow_cdc_provider.contract.as_of import parse_as_of
from airflow_cdc_provider.contract.partitions import PartitionLayoutError
from airflow_cdc_provider.landing.coverage import Coverage, CoverageSpec, CoverageSpecError, check_coverage

T = 1725264000000  # 2024-09-02T08:00:00Z


def build(root: Path, files: dict[str, str | bytes]) -> str:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return str(root)


def debezium(ts_ms: int) -> str:
    return json.dumps({"schema": {}, "payload": {"op": "c", "ts_ms": ts_ms + 8, "source": {"ts_ms": ts_ms}}})


def jsonl(*times: int) -> str:
    return "".join(debezium(t) + "\n" for t in times)


def check(path: str, as_of: str, **options) -> Coverage:
    return check_coverage(CoverageSpec(path=path, as_of_ms=parse_as_of(as_of), **options))


# ------------------------------------------------------------------------------------------------
# marker
# ------------------------------------------------------------------------------------------------


def test_marker_of_the_day_that_ends_at_as_of(tmp_path):
    root = build(
        tmp_path, {"dt=2024-09-01/a.jsonl": "", "dt=2024-09-01/_SUCCESS": "", "dt=2024-09-02/a.jsonl": ""}
    )

    assert check(root, "2024-09-02T00:00:00Z") == Coverage(
        True,
        f"{root}/dt=2024-09-01/_SUCCESS, the done-marker of partition dt=2024-09-01, which covers AS OF 2024-09-02T00:00:00+00:00",
        f"{root}/dt=2024-09-01/_SUCCESS exists",
    )
    assert check(root, "2024-09-03T00:00:00Z") == Coverage(
        False,
        f"{root}/dt=2024-09-02/_SUCCESS, the done-marker of partition dt=2024-09-02, which covers AS OF 2024-09-03T00:00:00+00:00",
        "no _SUCCESS in dt=2024-09-02; newest partition is dt=2024-09-02",
    )
    # An AS OF inside a day needs that day finished.
    assert check(root, "2024-09-02T00:00:00.001Z").covered is False


def test_named_marker_in_an_hourly_partition_spelled_without_zero_padding(tmp_path):
    root = build(
        tmp_path,
        {
            "ds=20240902/hr=5/part-0.json": "",
            "ds=20240902/hr=5/_DONE": "",
            "ds=20240902/hr=6/part-0.json": "",
        },
    )

    coverage = check(root, "2024-09-02T06:00:00Z", marker="_DONE")
    assert coverage == Coverage(
        True,
        f"{root}/ds=20240902/hr=05/_DONE, the done-marker of partition ds=20240902/hr=05, which covers AS OF 2024-09-02T06:00:00+00:00",
        f"{root}/ds=20240902/hr=5/_DONE exists",
    )
    assert (
        check(root, "2024-09-02T06:00:01Z", marker="_DONE").seen
        == "no _DONE in ds=20240902/hr=06; newest partition is ds=20240902/hr=6"
    )


def test_marker_at_the_root_of_a_landing_without_partitions(tmp_path):
    root = build(tmp_path, {"topic-0.jsonl": ""})
    waiting = f"{root}/_SUCCESS (no dt=/date=/ds= partition folders, so a marker at the root)"

    assert check(root, "2024-09-02T00:00:00Z") == Coverage(False, waiting, f"{root}/_SUCCESS does not exist")
    build(tmp_path, {"_SUCCESS": ""})
    assert check(root, "2024-09-02T00:00:00Z") == Coverage(True, waiting, f"{root}/_SUCCESS exists")


def test_marker_with_a_strftime_pattern_in_a_partition_time_zone(tmp_path):
    # Midnight in Shanghai is 16:00 UTC: AS OF 2024-09-02T16:00Z is covered by the Shanghai day 2024/09/02.
    root = build(tmp_path, {"2024/09/02/part-0": "", "2024/09/02/_SUCCESS": "", "2024/09/03/part-0": ""})
    options = {"partition_pattern": "%Y/%m/%d", "partition_timezone": "Asia/Shanghai"}

    assert check(root, "2024-09-02T16:00:00Z", **options).seen == f"{root}/2024/09/02/_SUCCESS exists"
    assert check(root, "2024-09-02T16:00:00.001Z", **options) == Coverage(
        False,
        f"{root}/2024/09/03/_SUCCESS, the done-marker of partition 2024/09/03, which covers AS OF 2024-09-02T16:00:00.001+00:00",
        "no _SUCCESS in 2024/09/03; newest partition is 2024/09/03",
    )


# ------------------------------------------------------------------------------------------------
# partition
# ------------------------------------------------------------------------------------------------


def test_a_later_partition_covers_as_of(tmp_path):
    root = build(tmp_path, {"dt=2024-09-02/hour=05/a": "", "dt=2024-09-02/hour=06/a": ""})

    assert check(root, "2024-09-02T06:00:00Z", strategy="partition") == Coverage(
        True,
        f"a partition later than dt=2024-09-02/hour=05 (which covers AS OF 2024-09-02T06:00:00+00:00) under {root}",
        "partition dt=2024-09-02/hour=06 exists",
    )
    assert check(root, "2024-09-02T06:30:00Z", strategy="partition") == Coverage(
        False,
        f"a partition later than dt=2024-09-02/hour=06 (which covers AS OF 2024-09-02T06:30:00+00:00) under {root}",
        "newest partition is dt=2024-09-02/hour=06",
    )


def test_partition_strategy_without_partitions(tmp_path):
    root = build(tmp_path, {"flat.jsonl": ""})
    assert check(root, "2024-09-02T00:00:00Z", strategy="partition") == Coverage(
        False,
        f"a partition later than the one covering AS OF 2024-09-02T00:00:00+00:00 under {root}",
        f"no dt=/date=/ds= partition folders under {root} (set partition_pattern for other layouts)",
    )
    assert check(root, "2024-09-02T00:00:00Z", strategy="partition", partition_pattern="%Y/%m/%d").seen == (
        "no partition folders matching %Y/%m/%d"
    )


# ------------------------------------------------------------------------------------------------
# event_time
# ------------------------------------------------------------------------------------------------


def test_event_time_reads_only_the_newest_files_by_modification_time(tmp_path):
    # The oldest file (by mtime) holds a later event that must not be looked at: only the 2 newest are read.
    root = build(
        tmp_path,
        {
            "a.jsonl": jsonl(T + 500_000),
            "b.jsonl": jsonl(T + 10_000, T + 40_000),
            "c.jsonl": jsonl(T + 20_000) + "null\n",
        },
    )
    for age, name in enumerate(("c.jsonl", "b.jsonl", "a.jsonl")):
        os.utime(tmp_path / name, (1_700_000_000 - age * 60, 1_700_000_000 - age * 60))
    options = {"strategy": "event_time", "source_format": "debezium-json", "newest_files": 2}

    assert check(root, "2024-09-02T08:00:00Z", allowed_lateness_ms=30_000, **options) == Coverage(
        True,
        f"a landed debezium-json event later than 2024-09-02T08:00:30+00:00 (AS OF 2024-09-02T08:00:00+00:00 "
        f"+ allowed lateness 0:00:30) under {root}",
        f"newest event time 2024-09-02T08:00:40+00:00 in {root}/b.jsonl",
    )
    assert check(root, "2024-09-02T08:00:00Z", allowed_lateness_ms=40_000, **options).covered is False


def jsonl_lines(*times: int) -> list[str]:
    return [debezium(t) for t in times]


def test_event_time_reads_the_tail_of_a_large_file_and_skips_a_line_being_written(tmp_path):
    # ~200 KiB of early events, then the newest complete record, then half a record (still being written).
    early = "\n".join(jsonl_lines(*(T + i for i in range(2500))))
    complete = debezium(T + 3_600_000)
    partial = debezium(T + 7_200_000)[:40]
    root = build(tmp_path, {"big.jsonl": f"{early}\n{complete}\n{partial}"})
    assert (tmp_path / "big.jsonl").stat().st_size > 3 * 64 * 1024

    coverage = check(root, "2024-09-02T08:59:59Z", strategy="event_time", source_format="debezium-json")
    assert coverage.seen == f"newest event time 2024-09-02T09:00:00+00:00 in {root}/big.jsonl"
    assert coverage.covered is True


def test_event_time_in_gzip_files_and_hive_partitions(tmp_path):
    # The newest partition wins even though the older partition's file was modified later.
    root = build(
        tmp_path,
        {
            "dt=2024-09-01/part-0.jsonl.gz": gzip.compress(jsonl(T - 86_400_000).encode()),
            "dt=2024-09-02/part-0.jsonl.gz": gzip.compress(jsonl(T, T + 1000).encode()),
            "dt=2024-09-02/_SUCCESS": "",
        },
    )
    os.utime(tmp_path / "dt=2024-09-01" / "part-0.jsonl.gz", (1_800_000_000, 1_800_000_000))

    coverage = check(
        root, "2024-09-02T08:00:00Z", strategy="event_time", source_format="debezium-json", newest_files=1
    )
    assert coverage == Coverage(
        True,
        f"a landed debezium-json event later than 2024-09-02T08:00:00+00:00 (AS OF 2024-09-02T08:00:00+00:00 "
        f"+ allowed lateness 0:00:00) under {root}",
        f"newest event time 2024-09-02T08:00:01+00:00 in {root}/dt=2024-09-02/part-0.jsonl.gz",
    )


def test_event_time_with_nothing_to_read(tmp_path):
    root = build(tmp_path, {"_SUCCESS": "", ".part-0.crc": "x", "part-0.jsonl": "null\n\n"})
    options = {"strategy": "event_time", "source_format": "debezium-json"}
    assert check(root, "2024-09-02T08:00:00Z", **options).seen == (
        "no debezium-json event time in the last records of part-0.jsonl"
    )
    (tmp_path / "part-0.jsonl").unlink()
    assert check(root, "2024-09-02T08:00:00Z", **options).seen == f"no data files under {root}"


# ------------------------------------------------------------------------------------------------
# any fsspec URI: the same checks on memory://
# ------------------------------------------------------------------------------------------------


def test_every_strategy_works_on_an_fsspec_uri():
    fs = fsspec.filesystem("memory")
    bucket = f"/cdc-{uuid.uuid4().hex}"
    root = f"memory:/{bucket}/landing"
    fs.pipe(f"{bucket}/landing/dt=2024-09-01/part-0.jsonl", jsonl(T - 86_400_000).encode())
    fs.pipe(f"{bucket}/landing/dt=2024-09-01/_SUCCESS", b"")
    fs.pipe(f"{bucket}/landing/dt=2024-09-02/part-0.jsonl", jsonl(T).encode())

    assert check(root, "2024-09-02T00:00:00Z").seen == f"{root}/dt=2024-09-01/_SUCCESS exists"
    assert check(root, "2024-09-03T00:00:00Z").covered is False
    assert check(root, "2024-09-02T00:00:00Z", strategy="partition").seen == "partition dt=2024-09-02 exists"
    assert check(root, "2024-09-02T07:00:00Z", strategy="event_time", source_format="debezium-json").seen == (
        f"newest event time 2024-09-02T08:00:00+00:00 in {root}/dt=2024-09-02/part-0.jsonl"
    )


# ------------------------------------------------------------------------------------------------
# arguments that make no sense
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {"strategy": "newest"},
            CoverageSpecError,
            "strategy must be one of marker, partition, event_time, got 'newest'",
        ),
        (
            {"strategy": "event_time"},
            CoverageSpecError,
            "strategy 'event_time' needs source_format (the --format of the landed records)",
        ),
        (
            {"marker": "dt=x/_SUCCESS"},
            CoverageSpecError,
            "marker must be a file name (no '/'), got 'dt=x/_SUCCESS'",
        ),
        ({"newest_files": 0}, CoverageSpecError, "newest_files must be at least 1, got 0"),
        ({"allowed_lateness_ms": -1}, CoverageSpecError, "allowed_lateness must not be negative, got -1 ms"),
        (
            {"partition_pattern": "/%Y/%m"},
            PartitionLayoutError,
            "partition_pattern must be a relative strftime pattern containing %Y, e.g. 'dt=%Y-%m-%d/hour=%H' or '%Y/%m/%d', got '/%Y/%m'",
        ),
        (
            {"partition_pattern": "%Y/%m", "partition_timezone": "Mars/Olympus"},
            PartitionLayoutError,
            "unknown partition_timezone 'Mars/Olympus'",
        ),
    ],
)
def test_invalid_specs_are_refused(options, error, message):
    with pytest.raises(error) as raised:
        CoverageSpec(path="/lake", as_of_ms=T, **options)
    assert str(raised.value) == message


def test_the_sensor_refuses_a_compression_the_job_cannot_read(tmp_path):
    """The sensor names the file the job would refuse, rather than read compressed bytes as text."""
    import lzma

    from airflow_cdc_provider.landing.probe import LandingProbe, LandingProbeError, ProbedFile

    (tmp_path / "part-0.json.lzma").write_bytes(lzma.compress(b'{"op": "c"}\n'))
    with pytest.raises(LandingProbeError) as caught:
        LandingProbe(str(tmp_path)).tail_lines(ProbedFile("part-0.json.lzma", 40, None), 1024, 10)
    assert str(caught.value) == (
        f"cannot read {tmp_path}/part-0.json.lzma: .lzma compression has no codec in the replay job; decompress the file "
        "or land it with one of .gz, .bz2, .deflate, .zst, .lz4, .snappy (or uncompressed)"
    )

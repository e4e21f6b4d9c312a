"""Bad input: every kind of damaged record is set aside with its file, position, reason and raw text.

Covers a truncated last line, a gzip or bzip2 file cut short, empty files, a BOM, CRLF line ends,
bytes that are not UTF-8 (in files read whole and in files read in splits), a 50 MB line, JSON
that is an array or a scalar, a record of another format, null images and null keys; and, with
``--on-error fail``, the error that names the file, the position and the reason.
"""

from __future__ import annotations

import bz2
import gzip
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import CDC_REPLAY, assert_events_add_up, rows_of
from tests.replay.test_history import _spec as history_spec
from tests.replay.test_semantics import T0, dbz

from airflow_cdc_provider.replay.errors import DuplicateColumnError, QuarantineError
from airflow_cdc_provider.replay.runs.history import run_history
from airflow_cdc_provider.spark import reader
from reference.records.canal import msg as canal_msg


def quarantined(output: Path) -> list[dict]:
    parts = sorted((output / "_quarantine").glob("part-*.json"))
    return [json.loads(line) for part in parts for line in part.read_text(encoding="utf-8").splitlines()]


def where(records: list[dict]) -> list[tuple]:
    return [(Path(r["file"]).name, r.get("line"), r["reason"], r.get("record")) for r in records]


def file_modes(root: Path) -> set[tuple[str, int]]:
    """(kind, permission bits) of everything under ``root`` except Hadoop's hidden checksum files."""
    return {
        ("dir" if p.is_dir() else "file", p.stat().st_mode & 0o777)
        for p in [root, *root.rglob("*")]
        if not p.name.startswith(".")
    }


BIG = "a long name " + "x" * 800


def test_bad_records_are_set_aside_with_file_position_reason_and_record(replay, tmp_path, monkeypatch):
    landed = tmp_path / "in"
    landed.mkdir()
    null_key = json.dumps(dbz("c", None, T0, name="no key"))
    lines = [
        json.dumps(dbz("c", 1, T0, name="a")),
        "[1, 2]",
        '"just a string"',
        canal_msg("INSERT", [{"id": "7", "name": "canal"}], table="shop", es=T0),  # another format
        json.dumps({**dbz("c", 3, T0), "after": None}),  # null after image
        json.dumps({**dbz("u", 1, T0 + 1), "after": None}),
        json.dumps({**dbz("d", 1, T0 + 2), "before": None}),  # a delete that names no row
        null_key,
    ]
    latin1 = json.dumps(dbz("c", 4, T0, name="caf!")).encode().replace(b"caf!", b"caf\xe9")
    (landed / "a.json").write_bytes(
        "\n".join(lines).encode() + b"\n" + latin1 + b'\n{"op": "c", "after": {"id": 5'  # cut short
    )
    big = [json.dumps(dbz("c", i, T0 + i, name=BIG)) for i in (10, 11, 12)]
    (landed / "big.json").write_bytes(
        b"\xef\xbb\xbf"
        + big[0].encode()
        + b"\r\n"
        + latin1.replace(b'"id": 4', b'"id": 13')
        + b"\r\n"
        + "\r\n".join(big[1:]).encode()
        + b"\r\n"
    )
    (landed / "bom.json").write_bytes(
        b"\xef\xbb\xbf" + json.dumps(dbz("c", 2, T0, name="b")).encode() + b"\r\n"
    )
    (landed / "empty.json").write_bytes(b"")
    (landed / "empty.json.gz").write_bytes(gzip.compress(b""))
    (landed / "zero-bytes.json.gz").write_bytes(b"")
    # Files larger than a.json are read in splits here (1 MiB in production): both readers are covered.
    monkeypatch.setattr(reader, "WHOLE_FILE_MAX_BYTES", (landed / "a.json").stat().st_size)
    assert (landed / "big.json").stat().st_size > reader.WHOLE_FILE_MAX_BYTES

    output = tmp_path / "out"
    metrics, tables = replay("debezium-json", landed, key="id", output=output)

    assert tables == {
        "db.shop": [{"id": i, "name": n} for i, n in [(1, "a"), (10, BIG), (11, BIG), (12, BIG), (2, "b")]]
    }
    assert metrics["events"] == {
        "read": 15,
        "applied": 5,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 10,
    }
    assert_events_add_up(metrics)
    assert metrics["tables"]["db.shop"]["events"]["quarantined"] == 4  # the records that name their table
    records = quarantined(output)
    assert where(records) == [
        ("a.json", 2, "not a JSON object", "[1, 2]"),
        ("a.json", 3, "not a JSON object", '"just a string"'),
        ("a.json", 4, "missing op", lines[3]),
        ("a.json", 5, "missing image", lines[4]),
        ("a.json", 6, "missing image", lines[5]),
        ("a.json", 7, "key unknown: delete with neither before nor after image", lines[6]),
        ("a.json", 8, "missing key", null_key),
        ("a.json", 9, "not UTF-8", latin1.decode("utf-8", "replace")),
        ("a.json", 10, "truncated", '{"op": "c", "after": {"id": 5'),
        ("big.json", 2, "not UTF-8", latin1.replace(b'"id": 4', b'"id": 13').decode("utf-8", "replace")),
    ]
    # Split-read files order records by a position within the file; the line is found afterwards.
    assert records[-1]["file_pos"] > 0
    # The quarantine is written like the snapshot, with the same permissions.
    assert file_modes(output / "_quarantine") <= file_modes(output / "db.shop")
    assert oct(os.stat(output / "_cdc_metrics.json").st_mode & 0o777) == oct(
        next((output / "db.shop").glob("part-*")).stat().st_mode & 0o777
    )


def test_a_split_read_file_cut_short_names_its_last_line_truncated(spark, replay, tmp_path, monkeypatch):
    """As in a file read whole: the unparsable last line of a file that ends without a line break is
    "truncated"; other unparsable lines, and the last line of a file that ends with one, are "not JSON"."""
    landed = tmp_path / "in"
    landed.mkdir()
    rows = [json.dumps(dbz("c", i, T0 + i, name=BIG)) for i in range(1, 7)]
    cut_line = '{"op": "c", "after": {"id": 9'
    (landed / "cut.json").write_bytes(("\n".join([*rows[:2], "{oops", *rows[2:4], cut_line])).encode())
    (landed / "ended.json").write_bytes(("\n".join([*rows[4:], cut_line]) + "\n").encode())
    monkeypatch.setattr(reader, "WHOLE_FILE_MAX_BYTES", 1024)  # both files read in splits
    spark.conf.set("spark.sql.files.maxPartitionBytes", "2048")  # and each in several splits
    try:
        output = tmp_path / "out"
        metrics, tables = replay("debezium-json", landed, key="id", output=output)
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    assert [r["id"] for r in tables["db.shop"]] == [1, 2, 3, 4, 5, 6]
    assert where(quarantined(output)) == [
        ("cut.json", 3, "not JSON", "{oops"),
        ("cut.json", 6, "truncated", cut_line),
        ("ended.json", 3, "not JSON", cut_line),
    ]
    assert metrics["events"]["quarantined"] == 3
    assert_events_add_up(metrics)


def write_cut(path: Path, compress, lines: list[str], keep: float) -> None:
    whole = compress("".join(line + "\n" for line in lines).encode())
    path.write_bytes(whole[: int(len(whole) * keep)])


def test_compressed_files_cut_short_keep_what_spark_can_read(replay, tmp_path):
    landed = tmp_path / "in"
    landed.mkdir()
    records = [json.dumps(dbz("c", i, T0 + i, name=f"row {i} " + "p" * (i % 97))) for i in range(3000)]
    write_cut(landed / "a.json.gz", gzip.compress, records, 0.5)
    write_cut(landed / "b.json.bz2", bz2.compress, [json.dumps(dbz("c", 5000, T0, name="lost"))], 0.8)
    (landed / "c.json").write_text(json.dumps(dbz("c", 6000, T0, name="intact")) + "\n")

    output = tmp_path / "out"
    metrics, tables = replay("debezium-json", landed, key="id", output=output)

    # Spark delivers the gzip's lines up to a little before the cut, in order; bzip2 gives nothing
    # before its first block ends. Each damaged file adds one "truncated" record for the lost rest.
    delivered = metrics["events"]["applied"] - 1
    assert 1000 < delivered < 3000
    rows = tables["db.shop"]
    assert [r["id"] for r in rows] == sorted(list(range(delivered)) + [6000], key=lambda i: json.dumps(i))
    assert all(r["name"] == json.loads(records[r["id"]])["after"]["name"] for r in rows if r["id"] < 3000)
    assert metrics["events"] == {
        "read": delivered + 3,
        "applied": delivered + 1,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 2,
    }
    assert where(quarantined(output)) == [
        ("a.json.gz", delivered + 1, "truncated", None),
        ("b.json.bz2", 1, "truncated", None),
    ]

    with pytest.raises(QuarantineError) as err:
        replay("debezium-json", landed, key="id", on_error="fail", output=tmp_path / "failed")
    assert str(err.value) == (
        f"cannot decode file:{landed}/a.json.gz line {delivered + 1}: truncated "
        "(--on-error fail; rerun with --on-error quarantine to set such records aside)"
    )
    assert not (tmp_path / "failed").exists()


@pytest.mark.slow
def test_a_50_mb_line_is_set_aside_without_exhausting_memory(spark, tmp_path):
    """The job as a user runs it: its own process and JVM with the job's default driver memory.

    (In the suite's shared JVM, what earlier tests left in the heap would be measured too.)
    """
    landed = tmp_path / "in"
    landed.mkdir()
    huge = json.dumps(dbz("c", 2, T0, name="x" * (50 * 1024 * 1024)))
    (landed / "a.json").write_text(
        "\n".join([json.dumps(dbz("c", 1, T0, name="a")), huge, json.dumps(dbz("c", 3, T0, name="c"))]) + "\n"
    )
    output = tmp_path / "out"
    args = ["snapshot", "--format", "debezium-json", "--input", str(landed), "--key", "id"]
    args += ["--as-of", "2100-01-01T00:00:00Z", "--output", str(output)]
    done = subprocess.run(
        [str(CDC_REPLAY), *args], capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((output / "_cdc_metrics.json").read_text())
    tables = {name: rows_of(spark, info["path"]) for name, info in metrics["tables"].items()}
    assert tables == {"db.shop": [{"id": 1, "name": "a"}, {"id": 3, "name": "c"}]}
    assert metrics["quarantine"]["reasons"] == {"record too large": 1}
    (record,) = quarantined(output)
    assert (record["line"], record["reason"], record["record"] == huge) == (2, "record too large", True)


def test_csv_landings_report_cut_files_and_bytes_that_are_not_utf8(replay, tmp_path):
    """DataHub TUPLE as CSV reads lines itself: the same two faults must not slip through there."""
    landed = tmp_path / "in"
    landed.mkdir()
    header = (
        "_sequence_id_,_operation_type_,_excute_time_,_source_table_,_before_image_,_after_image_,id,name"
    )
    rows = [f"{100 + i},I,{T0 + i},db.t,N,Y,{i},row {i}" for i in range(2000)]
    write_cut(landed / "a.csv.gz", gzip.compress, [header, *rows], 0.5)
    intact = f"{header}\n{rows[0].replace(',0,', ',5000,')}\n".encode()
    (landed / "b.csv").write_bytes(intact + b"9,I,1,db.t,N,Y,9001,caf\xe9\n")
    output = tmp_path / "out"
    metrics, tables = replay("datahub-tuple", landed, key="id", output=output)
    delivered = sum(int(r["id"]) < 2000 for r in tables["db.t"])  # CSV values are text
    assert 100 < delivered < 2000
    assert sorted(int(r["id"]) for r in tables["db.t"]) == [*range(delivered), 5000]
    assert metrics["events"] == {
        "read": delivered + 3,
        "applied": delivered + 1,
        "after_as_of": 0,
        "ignored": 0,
        "duplicates": 0,
        "quarantined": 2,
    }
    assert where(quarantined(output)) == [
        ("a.csv.gz", delivered + 2, "truncated", None),
        ("b.csv", 3, "not UTF-8", "9,I,1,db.t,N,Y,9001,caf\ufffd"),
    ]


def test_a_row_that_names_a_column_twice_fails_naming_the_record_and_the_column(replay, tmp_path):
    # {"id":1,"name":"a","name":"b"} is JSON, but no row can hold two values of `name`: Spark's typing
    # of the row fails, and the run says which record and which column instead of Spark's bare error.
    landed = tmp_path / "in"
    landed.mkdir()
    good = json.dumps(
        {"op": "c", "after": {"id": 2, "name": "c"}, "source": {"db": "db", "table": "t", "ts_ms": T0}}
    )
    twice = '{"op": "c", "after": {"id": 1, "name": "a", "name": "b"}, "source": {"db": "db", "table": "t"}}'
    (landed / "a.json").write_text(good + "\n" + twice + "\n")
    with pytest.raises(DuplicateColumnError) as err:
        replay("debezium-json", landed, key="id", output=tmp_path / "out")
    assert str(err.value) == (
        f"file:{landed}/a.json line 2: the row of table db.t names column `name` twice, and a row holds "
        "one value per column. Remove the repeated key from that record (or the record), then run again."
    )
    assert not (tmp_path / "out").exists()


def test_a_superseded_row_that_names_a_column_twice_fails_only_the_history(spark, replay, tmp_path):
    # The snapshot never types the first version; the history types every version it keeps.
    landed = tmp_path / "in"
    landed.mkdir()
    twice = (
        '{"op": "c", "after": {"id": 1, "name": "a", "name": "b"}, '
        f'"source": {{"db": "db", "table": "t", "ts_ms": {T0}}}}}'
    )
    later = json.dumps(
        {"op": "u", "after": {"id": 1, "name": "c"}, "source": {"db": "db", "table": "t", "ts_ms": T0 + 1000}}
    )
    (landed / "a.json").write_text(twice + "\n" + later + "\n")
    _, tables = replay("debezium-json", landed, key="id")
    assert tables == {"db.t": [{"id": 1, "name": "c"}]}
    spec = history_spec(
        "debezium-json", landed, tmp_path / "history", "2100-01-01T00:00:00Z", key_columns="id"
    )
    with pytest.raises(DuplicateColumnError) as err:
        run_history(spark, spec)
    assert str(err.value).startswith(
        f"file:{landed}/a.json line 1: the row of table db.t names column `name` twice"
    )
    assert not (tmp_path / "history").exists()

"""The file-system seam: Hadoop's FileSystem (classic) and fsspec (Spark Connect) behave alike.

Listing must give the URIs Spark's ``_metadata.file_path`` gives, whichever backend lists; the
output's swap and lock rely on rename, exclusive create and delete meaning the same in both.
"""

from __future__ import annotations

import bz2
import gzip
import zlib
from pathlib import Path

import pytest

from airflow_cdc_provider.spark.filesystem import (
    child,
    from_spark_uri,
    glob_regex,
    matches_component,
    name_of,
    normalise,
    parent_of,
    split_uri,
)
from airflow_cdc_provider.spark.fsspec_files import FsspecFileSystem
from airflow_cdc_provider.spark.hadoop_files import HadoopFileSystem


@pytest.fixture
def backends(spark):
    return {"hadoop": HadoopFileSystem(spark), "fsspec": FsspecFileSystem()}


@pytest.fixture
def tree(tmp_path) -> Path:
    """Names with spaces, percent signs, non-ASCII letters and hidden entries, two levels deep."""
    root = tmp_path / "land ing"
    for relative, text in {
        "a%b/x y.json": "1\n",
        "a%b/ü/z.json": "22\n",
        "dt=2024-09-02/part-0.json": "333\n",
        "dt=2024-09-03/part-0.json": "4444\n",
        "_SUCCESS": "",
        ".hidden/skip.json": "5\n",
    }.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _listing(fs, uri: str) -> list[tuple[str, bool, int]]:
    return sorted((s.uri, s.is_dir, s.size if not s.is_dir else 0) for s in fs.list_dir(uri))


def test_both_backends_list_and_qualify_alike(backends, tree):
    hadoop, fsspec = backends["hadoop"], backends["fsspec"]
    root = hadoop.qualify(str(tree))
    assert root == fsspec.qualify(str(tree)) == f"file:{tree}"
    assert _listing(hadoop, root) == _listing(fsspec, root)
    assert _listing(hadoop, child(root, "a%b")) == _listing(fsspec, child(root, "a%b"))
    assert [s.uri for s in fsspec.list_dir(child(root, "a%b", "ü"))] == [f"file:{tree}/a%b/ü/z.json"]


@pytest.mark.parametrize(
    "pattern, names",
    [
        ("dt=*/part-0.json", ["dt=2024-09-02/part-0.json", "dt=2024-09-03/part-0.json"]),
        ("dt=2024-09-0{2,3}/*.json", ["dt=2024-09-02/part-0.json", "dt=2024-09-03/part-0.json"]),
        ("dt=2024-09-0[3]/part-?.json", ["dt=2024-09-03/part-0.json"]),
        ("a%b/x y.json", ["a%b/x y.json"]),
        ("nothing/*.json", []),
        ("missing.json", []),
    ],
)
def test_both_backends_glob_alike(backends, tree, pattern, names):
    expected = [f"file:{tree}/{name}" for name in names]
    for fs in backends.values():
        assert sorted(s.uri for s in fs.glob(f"{tree}/{pattern}")) == expected


def test_listed_files_are_named_as_the_rows_spark_reads_name_them(spark, backends, tree):
    from airflow_cdc_provider.spark.reader import landed_file_column

    files = [f"{tree}/a%b/x y.json", f"{tree}/a%b/ü/z.json"]
    read = spark.read.text(files).select(landed_file_column().alias("file").column()).distinct()
    by_spark = sorted(r[0] for r in read.collect())
    for fs in backends.values():
        assert sorted(fs.glob(f)[0].uri for f in files) == by_spark


def test_odd_file_names_replay_as_plain_ones(replay, tmp_path):
    """Spaces, ``%`` and ``+`` in folder and file names, a damaged gzip among them: the same run."""
    import json

    records = [
        {"op": "c", "ts_ms": 1000 + i, "after": {"id": i, "v": f"v{i}"}, "source": {"db": "d", "table": "t"}}
        for i in range(3000)
    ]
    results = []
    for folder, name in (("plain", "part"), ("odd %41 + %zz", "pa rt+1%2")):
        landing = tmp_path / folder
        landing.mkdir()
        (landing / f"{name}.json").write_text("".join(json.dumps(r) + "\n" for r in records[:20]) + "{bad\n")
        whole = gzip.compress("".join(json.dumps(r) + "\n" for r in records[20:]).encode())
        (landing / f"{name}.json.gz").write_bytes(whole[: len(whole) // 2])
        metrics, tables = replay("debezium-json", landing, key="id", output=tmp_path / f"out-{len(results)}")
        results.append((metrics["events"], metrics["rows"], tables))
    assert results[0] == results[1]
    assert results[0][0]["quarantined"] == 2  # the bad line and the lost rest of the gzip


def test_small_reads_writes_and_the_swap_mean_the_same_in_both(backends, tmp_path):
    for name, fs in backends.items():
        folder = fs.qualify(str(tmp_path / name))
        fs.mkdirs(child(folder, "a", "b"))
        target = child(folder, "a", "b", "f.txt")
        fs.write_bytes(target, b"hello\n")
        assert fs.read_bytes(target) == b"hello\n"
        assert fs.read_bytes(target, 4, 1) == b"o"
        assert fs.read_text(target) == "hello\n"
        assert fs.create_new(child(folder, "lock"), b"1") is True
        assert fs.create_new(child(folder, "lock"), b"2") is False
        assert fs.read_bytes(child(folder, "lock")) == b"1"
        # Rename moves a folder to a name that does not exist, and refuses one that does.
        assert fs.rename(child(folder, "a"), child(folder, "c")) is True
        assert fs.exists(child(folder, "c", "b", "f.txt")) and not fs.exists(child(folder, "a"))
        assert fs.rename(child(folder, "missing"), child(folder, "d")) is False
        assert fs.touch(child(folder, "lock")) > 0
        assert fs.delete(child(folder, "c"), True) is True
        assert fs.status(child(folder, "c")) is None


@pytest.mark.parametrize(
    "suffix, compress", [(".gz", gzip.compress), (".bz2", bz2.compress), (".deflate", zlib.compress)]
)
def test_both_backends_find_a_compressed_stream_cut_short(backends, tmp_path, suffix, compress):
    data = compress(b"".join(b'{"n": %d}\n' % i for i in range(5000)))
    whole, cut = tmp_path / f"whole{suffix}", tmp_path / f"cut{suffix}"
    whole.write_bytes(data + data)  # two streams, one after the other, as appending writers leave them
    cut.write_bytes(data[: len(data) // 2])
    for name, fs in backends.items():
        assert fs.stream_breaks(fs.qualify(str(whole))) is False, name
        assert fs.stream_breaks(fs.qualify(str(cut))) is True, name


def test_both_backends_read_parquet_footers_alike(spark, backends, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"a": [1]}).replace_schema_metadata({"dms": "yes"})
    pq.write_table(table, tmp_path / "x.parquet")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    for fs in backends.values():
        assert fs.parquet_metadata(fs.qualify(str(tmp_path / "x.parquet")))["dms"] == "yes"
        assert fs.parquet_metadata(fs.qualify(str(tmp_path / "bad.parquet"))) is None


@pytest.mark.parametrize(
    "given, normal",
    [
        ("file:///tmp/a b/x.json", "file:/tmp/a b/x.json"),
        ("file:/tmp/a%41b/x.json", "file:/tmp/a%41b/x.json"),
        ("file:/tmp/x/../y//z/", "file:/tmp/y/z"),
        ("s3a://bucket/a//b/", "s3a://bucket/a/b"),
        ("hdfs://nn:8020/a/./b", "hdfs://nn:8020/a/b"),
        ("/tmp/plain", "/tmp/plain"),
    ],
)
def test_a_file_has_one_spelling(given, normal):
    assert normalise(given) == normal


def test_a_file_spark_names_is_the_file_listed():
    assert from_spark_uri("file:///tmp/a%20%2541+b/x.json") == "file:/tmp/a %41+b/x.json"


def test_uri_parts():
    assert split_uri("s3a://bucket/key/x") == ("s3a", "bucket", "/key/x")
    assert split_uri("file:/tmp/x") == ("file", "", "/tmp/x")
    assert parent_of("file:/tmp/x") == "file:/tmp"
    assert parent_of("s3a://bucket/x") == "s3a://bucket/"
    assert parent_of("file:/") is None
    assert name_of("s3a://bucket/key/x.json") == "x.json"


@pytest.mark.parametrize(
    "glob, name, matches",
    [
        ("*.json", "a.json", True),
        ("*.json", "a.csv", False),
        ("dt=2024-0{1,2}", "dt=2024-02", True),
        ("dt=2024-0{1,2}", "dt=2024-03", False),
        ("part-[0-3]", "part-2", True),
        ("part-[^0-3]", "part-2", False),
        ("a\\*b", "a*b", True),
        ("a\\*b", "axb", False),
        ("x?", "xy", True),
    ],
)
def test_hadoop_globs_of_one_component(spark, glob, name, matches):
    assert matches_component(glob, name) is matches
    # The same answer as Hadoop's own GlobPattern.
    pattern = spark.sparkContext._jvm.org.apache.hadoop.fs.GlobPattern(glob)
    assert bool(pattern.matches(name)) is matches
    assert (glob_regex(glob).match(name) is not None) is matches or glob == name

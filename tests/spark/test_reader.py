"""Listing the landing: what counts as a data file, how it is named, and in what order."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_cdc_provider.spark.reader import LandingError, list_landed_files


def _touch(root: Path, relative: str, content: str = "{}\n") -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)


def test_folders_are_walked_recursively_skipping_hidden_files_and_folders(spark, tmp_path):
    for relative in [
        "dt=2024-09-02/hour=01/part-1.json",
        "dt=2024-09-02/hour=00/part-0.json",
        "dt=2024-09-02/_SUCCESS",
        "dt=2024-09-02/.part-0.json.crc",
        "dt=2024-09-02/_temporary/0/part-9.json",  # a writer's unfinished attempt
        ".spark-staging/part-8.json",
        "top.json",
    ]:
        _touch(tmp_path, relative)
    files = list_landed_files(spark, [str(tmp_path)])
    assert [f.relative for f in files] == [
        "dt=2024-09-02/hour=00/part-0.json",
        "dt=2024-09-02/hour=01/part-1.json",
        "top.json",
    ]
    assert [f.path for f in files] == [f"file:{tmp_path}/{f.relative}" for f in files]
    assert [f.size for f in files] == [3, 3, 3]


def test_globs_and_single_files_are_listed_once_by_name(spark, tmp_path):
    _touch(tmp_path, "a/x.json")
    _touch(tmp_path, "b/y.json", "{}\n{}\n")
    files = list_landed_files(spark, [f"{tmp_path}/*/*.json", str(tmp_path / "b" / "y.json")])
    assert [(f.relative, f.size) for f in files] == [("x.json", 3), ("y.json", 6)]


def test_a_landing_of_only_hidden_files_names_the_inputs(spark, tmp_path):
    _touch(tmp_path, "_SUCCESS", "")
    _touch(tmp_path, "_temporary/part-0.json")
    with pytest.raises(
        LandingError, match=rf"^no data files under {tmp_path} \(names starting with _ or \. are skipped\)$"
    ):
        list_landed_files(spark, [str(tmp_path)])


def test_a_compression_the_job_has_no_codec_for_is_refused_by_name(spark, tmp_path):
    import lzma

    _touch(tmp_path, "a.json")
    (tmp_path / "b.json.xz").write_bytes(lzma.compress(b'{"op": "c"}\n'))
    with pytest.raises(LandingError) as caught:
        list_landed_files(spark, [str(tmp_path)])
    assert str(caught.value) == (
        f"cannot read file:{tmp_path}/b.json.xz: .xz compression has no codec in the replay job; decompress the "
        f"file or land it with one of .gz, .bz2, .deflate, .zst, .lz4, .snappy (or uncompressed)"
    )

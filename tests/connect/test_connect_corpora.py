"""Both corpora over Spark Connect: every case gives the rows and metrics classic mode gives.

Classic mode's results are checked against the corpora's expected tables in ``tests/corpus``;
here each case runs again over Connect (one child process, one session, no route to a JVM) and
must equal them: the same metrics (counts, tables, quarantine), the same rows, columns and types,
or the same error.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import CONFORMANCE, REALWORLD, REPO
from tests.connect.test_connect_job import assert_same_snapshot, classic_run

AS_OF = "2100-01-01T00:00:00Z"
# Conformance folders and files -> the format that reads them.
_FORMATS = {
    "canal": "canal-json",
    "debezium": "debezium-json",
    "maxwell": "maxwell-json",
    "ogg": "ogg-json",
    "aliyun": "datahub-blob",
    "aws-dms": "aws-dms",
    "debezium-bson": "debezium-mongodb",
}


def _conformance_cases() -> list[tuple[str, str, list[str], list[str]]]:
    """(case id, format, inputs, key columns) of every conformance case with an expected table."""
    cases = []
    for expected in sorted(CONFORMANCE.glob("flink/*.expected.json")):
        data = json.loads(expected.read_text(encoding="utf-8"))
        fmt = _FORMATS[re.match(r"[a-z]+", expected.name).group(0)]
        cases.append((expected.name, fmt, [str(CONFORMANCE / data["source_file"])], data["key_columns"]))
    for expected in sorted(CONFORMANCE.glob("paimon/*/table/*/*.expected.json")):
        data = json.loads(expected.read_text(encoding="utf-8"))
        fmt = _FORMATS[expected.relative_to(CONFORMANCE).parts[1]]
        inputs = [str(CONFORMANCE / p) for p in data["source_files"]]
        cases.append((str(expected.relative_to(CONFORMANCE)), fmt, inputs, data["key_columns"]))
    for name in ("serde-with-schema.json", "serde-without-schema.json"):
        cases.append((name, "debezium-json", [str(CONFORMANCE / "debezium" / name)], ["id"]))
    return cases


def _realworld_cases() -> list[tuple[str, str, list[str], list[str]]]:
    cases = []
    for expected in sorted(REALWORLD.glob("*/*.expected.json")):
        data = json.loads(expected.read_text(encoding="utf-8"))
        key = data["key_arg"].split(",") if data["key_arg"] else []
        cases.append((expected.name, data["format"], [str(REALWORLD / p) for p in data["inputs"]], key))
    return cases


def _argv(fmt: str, inputs: list[str], key: list[str], output: str) -> list[str]:
    argv = ["--format", fmt, "--as-of", AS_OF, "--output", output]
    for path in inputs:
        argv += ["--input", path]
    return argv + (["--key", ",".join(key)] if key else [])


@pytest.mark.corpus
@pytest.mark.slow
def test_both_corpora_over_connect_equal_classic_mode(spark, connect_url, tmp_path):
    cases = _conformance_cases() + _realworld_cases()
    assert len(cases) >= 30
    plan = [
        _argv(fmt, inputs, key, str(tmp_path / "connect" / str(i)))
        for i, (_, fmt, inputs, key) in enumerate(cases)
    ]
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    # The Connect runs go on in their own process while this one runs the same cases classically.
    over_connect = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.connect.connect_runner",
            connect_url,
            str(tmp_path / "plan.json"),
            str(tmp_path / "results.json"),
        ],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
    )
    classic_results = []
    for i, (_, fmt, inputs, key) in enumerate(cases):
        try:
            classic_results.append(
                classic_run(spark, _argv(fmt, inputs, key, str(tmp_path / "classic" / str(i))))
            )
        except Exception as exc:  # noqa: BLE001 - the same error must come over Connect
            classic_results.append(f"{type(exc).__name__}: {exc}".replace("/classic/", "/connect/"))
    _, errors = over_connect.communicate(timeout=1200)
    assert over_connect.returncode == 0, errors[-4000:]
    connect_results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))

    differ = []
    for i, (name, classic, connect) in enumerate(
        zip([c[0] for c in cases], classic_results, connect_results, strict=True)
    ):
        if isinstance(classic, str):
            if connect != {"error": classic}:
                differ.append((name, connect, classic))
            continue
        if "error" in connect:
            differ.append((name, connect["error"], "classic mode succeeded"))
            continue
        roots = [f"file:{tmp_path / mode / str(i)}" for mode in ("connect", "classic")]
        for got, want in zip(connect["metrics"], classic, strict=True):
            try:
                assert_same_snapshot(spark, got, want, *roots)
            except AssertionError as failure:
                differ.append((name, str(failure)[:2000]))
    assert differ == []

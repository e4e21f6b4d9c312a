"""Shared fixtures: one real local Spark session for the whole test run, a replay runner, an Airflow DB.

Tests that read ``../shared`` (vendor samples, the conformance and real-world corpora) carry the
``corpus`` marker: without the folder they are skipped with the reason ``SHARED_MISSING``.
``CDC_SHARED_DIR`` points them at another folder.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CDC_SHARED_DIR", REPO.parent / "shared"))
SEEDS = SHARED / "seeds"
CONFORMANCE = SHARED / "conformance"
REALWORLD = SHARED / "realworld"
SHARED_MISSING = (
    f"../shared not found at {SHARED}: the vendor samples and real-capture corpora live there "
    "(CDC_SHARED_DIR points to another folder)"
)
# The job's command, installed beside this interpreter: tests that need the job in its own process.
CDC_REPLAY = Path(sys.executable).with_name("cdc-replay")


def shared_present() -> bool:
    return SHARED.is_dir()


def pytest_collection_modifyitems(config, items) -> None:
    """Without ../shared, every ``corpus`` test is skipped with the reason, never failed."""
    if shared_present():
        return
    skip = pytest.mark.skip(reason=SHARED_MISSING)
    for item in items:
        if item.get_closest_marker("corpus"):
            item.add_marker(skip)


def corpus_parametrize(
    argnames: str | Sequence[str], values: Iterable[Any], **kwargs: Any
) -> pytest.MarkDecorator:
    """``pytest.mark.parametrize`` over values found in ../shared at collection time.

    Without the folder there are none to find: one skipped parameter, ``no-shared``, stands for
    them and says why (an empty parameter set would be skipped without the reason). ``ids``, if
    given, must be a callable (a list could not match the one stand-in).
    """
    if shared_present():
        return pytest.mark.parametrize(argnames, list(values), **kwargs)
    names = argnames.split(",") if isinstance(argnames, str) else argnames
    arity = len([name for name in names if name.strip()])
    missing = pytest.param(*[None] * arity, id="no-shared", marks=pytest.mark.skip(reason=SHARED_MISSING))
    return pytest.mark.parametrize(argnames, [missing], **kwargs)


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """A migrated Airflow metadata database (SQLite) for ``dag.test()``.

    The test module must have imported ``tests.airflow_env`` (before airflow) to get its own home.
    """
    from tests import airflow_env

    airflow_env.migrate_once()


@pytest.fixture(scope="session")
def spark():
    from airflow_cdc_provider.spark.session import build_session

    session = build_session(
        master="local[2]",
        app_name="airflow-cdc-provider-tests",
        extra_conf={
            "spark.sql.shuffle.partitions": "4",
            # The suite plans thousands of queries on tiny inputs, so planning, not data, is its cost.
            # Spark keeps 100 compiled classes by default: the suite's formats and stages evict
            # each other and recompile (about an eighth of a module's time).
            "spark.sql.codegen.cache.maxEntries": "4000",
            # Each query's plan text goes to the listener bus; the decoders' plans are large.
            "spark.sql.ui.explainMode": "simple",
            "spark.sql.maxPlanStringLength": "1000",
        },
    )
    yield session
    session.stop()


def rows_of(spark, path: str | Path) -> list[dict[str, Any]]:
    """Rows of a Parquet snapshot as plain Python dicts, sorted for stable comparison."""
    df = spark.read.parquet(str(path))
    rows = [r.asDict(recursive=True) for r in df.collect()]
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


@pytest.fixture
def replay(spark, tmp_path):
    """Run the real engine; return (metrics, {table: sorted rows})."""
    from airflow_cdc_provider.formats import DecodeOptions
    from airflow_cdc_provider.replay.runs.snapshot import run_snapshot
    from airflow_cdc_provider.replay.spec import spec_from_keywords

    counter = {"n": 0}

    def run(
        fmt: str,
        inputs,
        as_of: str | int = "2100-01-01T00:00:00Z",
        *,
        key=(),
        tables=(),
        on_error="quarantine",
        with_metadata=False,
        output=None,
        whole_transactions=False,
        **decode_kwargs,
    ):
        counter["n"] += 1
        out = Path(output) if output else tmp_path / f"out{counter['n']}"
        if isinstance(inputs, (str, Path)):
            inputs = [inputs]
        spec = spec_from_keywords(
            source_format=fmt,
            inputs=[str(p) for p in inputs],
            as_of=as_of,
            output=str(out),
            key=list(key) if not isinstance(key, str) else [key],
            tables=list(tables),
            on_error=on_error,
            with_metadata=with_metadata,
            whole_transactions=whole_transactions,
            decode_options=DecodeOptions(**decode_kwargs) if decode_kwargs else None,
        )
        metrics = run_snapshot(spark, spec)
        tables_out = {name: rows_of(spark, info["path"]) for name, info in metrics["tables"].items()}
        return metrics, tables_out

    return run


def assert_events_add_up(metrics: dict) -> None:
    ev = metrics["events"]
    assert (
        ev["read"] == ev["applied"] + ev["after_as_of"] + ev["ignored"] + ev["duplicates"] + ev["quarantined"]
    ), ev


def write_jsonl(path: Path, records: list) -> Path:
    """Write records (dicts, or raw strings written as they are) one per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def decode_events(spark, fmt: str, paths, **options) -> list[dict]:
    """Canonical events of ``paths`` in landing order, images as plain Python values."""
    from airflow_cdc_provider.formats import DecodeOptions, get_decoder
    from airflow_cdc_provider.spark.reader import list_landed_files

    if isinstance(paths, (str, Path)):
        paths = [paths]
    df = get_decoder(fmt).decode(
        spark, list_landed_files(spark, [str(p) for p in paths]), DecodeOptions(**options)
    )
    out = []
    for row in df.orderBy("file", "file_pos", "sub_pos").collect():
        d = row.asDict()
        for side in ("before", "after"):
            if d[side] is not None:
                d[side] = {k: None if v is None else v.toPython() for k, v in d[side].items()}
        out.append(d)
    return out


def debezium_specs(landing: str | Path, output: str | Path, as_of, **options) -> list:
    """The runs of ``cdc-replay snapshot --format debezium-json --key id`` over ``landing``."""
    from airflow_cdc_provider.contract.args import SnapshotArgs
    from airflow_cdc_provider.replay.spec import SnapshotSpec

    args = SnapshotArgs.build(
        source_format="debezium-json",
        input_paths=str(landing),
        output_path=str(output),
        as_of=as_of,
        key_columns="id",
        **options,
    )
    return SnapshotSpec.each_from_args(args)

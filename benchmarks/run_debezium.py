"""Measure, in one warm Spark session, a full parse of Debezium files against the cdc-replay rebuild.

    python benchmarks/run_debezium.py --events 1000000 --keys 100000

Prints seconds for (a) Spark reading the files with their schema and aggregating every column,
(b) the full ``cdc-replay`` rebuild, and the ratio b/a. Each is run twice; the second run counts.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.generate_debezium import generate

PARSE_SCHEMA = (
    "payload struct<op string, ts_ms bigint, before struct<id bigint>, "
    "after struct<id bigint, name string, email string, balance double, visits bigint, active boolean>, "
    "source struct<db string, table string, ts_ms bigint, file string, pos bigint, row int>>"
)


def full_parse(spark, path: str) -> float:
    from pyspark.sql import functions as F

    start = time.perf_counter()
    df = spark.read.schema(PARSE_SCHEMA).json(path)
    p = F.col("payload")
    df.agg(
        F.count("*"), F.max(p.op), F.max(p.ts_ms), F.max(p.before.id), F.max(p.after.id), F.max(p.after["name"]),
        F.max(p.after.email), F.sum(p.after.balance), F.sum(p.after.visits), F.max(p.after.active),
        F.max(p.source.db), F.max(p.source.table), F.max(p.source.ts_ms), F.max(p.source.file), F.max(p.source.pos),
        F.max(p.source.row),
    ).collect()
    return time.perf_counter() - start


def rebuild(spark, path: str, out: str) -> tuple[float, dict]:
    from airflow_cdc_provider.replay.engine import SnapshotSpec, run_snapshot

    start = time.perf_counter()
    metrics = run_snapshot(spark, SnapshotSpec.from_args(
        source_format="debezium-json", inputs=[path], as_of="2100-01-01T00:00:00Z", output=out, key=["id"]))
    return time.perf_counter() - start, metrics


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    from airflow_cdc_provider.jobs.session import build_session

    work = Path(args.workdir or tempfile.mkdtemp(prefix="cdc-bench-"))
    data = work / "landed"
    if not data.exists():
        truth = generate(data, args.events, args.keys, args.files)
    else:
        truth = None
    spark = build_session(master=args.master, extra_conf={"spark.ui.enabled": "false"})
    results = {}
    for attempt in range(2):
        results["parse_s"] = full_parse(spark, str(data))
        out = work / f"snapshot-{attempt}"
        shutil.rmtree(out, ignore_errors=True)
        results["rebuild_s"], metrics = rebuild(spark, str(data), str(out))
    results["ratio_rebuild_over_parse"] = results["rebuild_s"] / results["parse_s"]
    results["rows"] = metrics["rows"]
    if truth:
        results["expected_rows"] = truth["rows"]
    results["input_mib"] = round(sum(f.stat().st_size for f in data.iterdir()) / 2**20, 1)
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in results.items()}, indent=2))


if __name__ == "__main__":
    main()

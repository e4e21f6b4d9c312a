"""Run ``cdc-replay`` requests over Spark Connect in this process, with every way to a JVM closed.

``python -m tests.connect.connect_runner URL PLAN RESULTS`` reads a JSON list of argument lists
(``cdc-replay snapshot`` arguments without the word, or ``history ...``), runs each through one
Connect session and writes, per request, ``{"metrics": [...]}`` or ``{"error": text}``.
``python -m tests.connect.connect_runner --cli ARGS...`` runs the command line itself instead.

Before anything runs, starting a py4j gateway or a SparkContext raises: a classic-only call left
on the job's path fails the request that reaches it, with its name in the error.
"""

from __future__ import annotations

import json
import sys

CLASSIC_ONLY = "classic-only call under Spark Connect"


def close_the_jvm() -> None:
    """Make every route to a driver JVM in this process raise instead."""
    import pyspark.java_gateway
    from pyspark import SparkContext

    def refuse(*_args, **_kwargs):
        raise RuntimeError(f"{CLASSIC_ONLY}: a py4j gateway or SparkContext was asked for")

    pyspark.java_gateway.launch_gateway = refuse
    SparkContext._ensure_initialized = classmethod(refuse)
    SparkContext.getOrCreate = classmethod(refuse)


def run_plan(url: str, plan: str, results: str) -> None:
    from airflow_cdc_provider.contract.args import SnapshotArgs
    from airflow_cdc_provider.jobs.run import run_request
    from airflow_cdc_provider.spark.session import connect_session

    spark = connect_session(url)
    out = []
    for argv in json.loads(open(plan, encoding="utf-8").read()):
        try:
            out.append({"metrics": run_request(spark, SnapshotArgs.from_argv(argv))})
        except Exception as exc:  # noqa: BLE001 - the test compares the text with classic mode's
            out.append({"error": f"{type(exc).__name__}: {exc}"})
    with open(results, "w", encoding="utf-8") as handle:
        json.dump(out, handle)


def main(argv: list[str]) -> int:
    close_the_jvm()
    if argv[:1] == ["--cli"]:
        from airflow_cdc_provider.jobs import cli

        return cli.main(argv[1:])
    run_plan(*argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

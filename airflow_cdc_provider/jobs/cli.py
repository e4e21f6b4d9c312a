"""``cdc-replay``: the command line of the replay job (``snapshot``, ``history`` and ``formats``).

The same argument parser serves the console script (an embedded ``local[*]`` master by default)
and ``spark_app.py`` under spark-submit (the master comes from spark-submit), so the job contract
(``docs/contract.md``) is defined once.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import traceback
from pathlib import Path

from airflow_cdc_provider.contract.args import SnapshotArgs, add_snapshot_arguments
from airflow_cdc_provider.formats import format_names, get_decoder

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser(*, with_master: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cdc-replay", description="Rebuild table snapshots as of any time from landed CDC files."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    add_snapshot_arguments(
        sub.add_parser("snapshot", help="rebuild snapshots as of a time"), with_master=with_master
    )
    add_snapshot_arguments(
        sub.add_parser("history", help="write every version of every row up to a time (SCD type 2)"),
        with_master=with_master,
        history=True,
    )
    sub.add_parser("formats", help="list the source formats")
    return parser


def _print_formats() -> None:
    for name in format_names():
        try:
            decoder = get_decoder(name)
            needs = f"  [{decoder.needs}]" if decoder.needs else ""
            print(f"{name:16} {decoder.description}{needs}")
        except ImportError as exc:  # a decoder whose optional dependency is missing
            print(f"{name:16} (unavailable: {exc})")


def _write_error_file(path: str | None, exc: BaseException) -> None:
    if path:
        Path(path).write_text(json.dumps({"error": str(exc), "type": type(exc).__name__}), encoding="utf-8")


def run_snapshot_command(args: argparse.Namespace, master: str | None) -> int:
    """``snapshot`` or ``history``: run the job, print its metrics, write its error for the operator."""
    # Imported here so `cdc-replay formats` and `--help` start without a JVM.
    from airflow_cdc_provider.contract.jvm import java_options_for
    from airflow_cdc_provider.replay.runs.history import run_history
    from airflow_cdc_provider.replay.runs.many_as_ofs import run_snapshots
    from airflow_cdc_provider.replay.spec import SnapshotSpec
    from airflow_cdc_provider.spark.session import build_session

    try:
        history = args.command == "history"
        request = SnapshotArgs.from_namespace(args, history=history)
        specs = SnapshotSpec.each_from_args(request)
        get_decoder(specs[0].source_format)
        spark = build_session(master=master, java_options=java_options_for(request))
        written = [run_history(spark, specs[0])] if history else run_snapshots(spark, specs)
    except Exception as exc:  # noqa: BLE001 - every failure becomes one clear line and an exit code
        _write_error_file(args.error_file, exc)
        logging.getLogger(__name__).debug("replay failed", exc_info=True)
        print(f"cdc-replay: error: {exc}", file=sys.stderr)
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            traceback.print_exc()
        return EXIT_FAILED
    # One AS OF prints its metrics object, as it always has; several print the list of them.
    print(json.dumps(written[0] if len(written) == 1 else written, indent=2))
    return EXIT_OK


def main(argv: list[str] | None = None, *, under_spark_submit: bool = False) -> int:
    parser = build_parser(with_master=not under_spark_submit)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "formats":
        _print_formats()
        return EXIT_OK
    return run_snapshot_command(args, None if under_spark_submit else args.master)


if __name__ == "__main__":
    sys.exit(main())

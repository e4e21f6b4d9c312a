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
from typing import TYPE_CHECKING

from airflow_cdc_provider.contract.args import SnapshotArgs, add_snapshot_arguments, remote_url
from airflow_cdc_provider.formats import format_names, get_decoder

if TYPE_CHECKING:
    from airflow_cdc_provider.spark.progress import Reporter

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser(*, with_master: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cdc-replay", description="Rebuild table snapshots as of any time from landed CDC files."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    snapshot = sub.add_parser("snapshot", help="rebuild snapshots as of a time")
    add_snapshot_arguments(snapshot, with_master=with_master)
    history = sub.add_parser("history", help="write every version of every row up to a time (SCD type 2)")
    add_snapshot_arguments(history, with_master=with_master, history=True)
    for run in (snapshot, history):
        _add_output_arguments(run)
    sub.add_parser("formats", help="list the source formats")
    return parser


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """``--quiet`` and ``--verbose``: what the run prints on stderr besides errors (docs/contract.md,
    "Progress"). Not part of ``SnapshotArgs``: they change what is shown, never what is written."""
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument(
        "--quiet",
        action="store_true",
        help="print no progress (phases, Spark's stages and tasks) and no job log below warnings; "
        "errors and the metrics JSON on stdout still print",
    )
    shown.add_argument(
        "--verbose",
        action="store_true",
        help="also print Spark's own log as Spark sets it up (its log4j profile, the JVM's start-up "
        "warnings), which the job otherwise keeps out",
    )


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


def run_snapshot_command(args: argparse.Namespace, master: str | None, remote: str | None = None) -> int:
    """``snapshot`` or ``history``: run the job, print its metrics, write its error for the operator.

    Progress goes to stderr while the job runs (none with ``--quiet``); stdout carries the metrics
    JSON only.
    """
    from airflow_cdc_provider.spark.progress import reporter_for

    try:
        with reporter_for(quiet=args.quiet) as reporter:
            written = _run(args, master, remote, reporter)
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


def _run(args: argparse.Namespace, master: str | None, remote: str | None, reporter: Reporter) -> list[dict]:
    """The run itself, reported to ``reporter``: the session, then the snapshots or the history."""
    # Imported here so `cdc-replay formats` and `--help` start without a JVM.
    from airflow_cdc_provider.contract.jvm import java_options_for
    from airflow_cdc_provider.jobs.run import run_reported
    from airflow_cdc_provider.replay.spec import SnapshotSpec
    from airflow_cdc_provider.spark.session import build_session

    request = SnapshotArgs.from_namespace(args, history=args.command == "history")
    specs = SnapshotSpec.each_from_args(request)  # the request's errors before a JVM starts
    get_decoder(specs[0].source_format)
    starting = "starting: Spark Connect session" if remote else "starting: Spark"
    return run_reported(
        reporter,
        request,
        starting,
        lambda: build_session(
            master=master, java_options=java_options_for(request), remote=remote, verbose=args.verbose
        ),
    )


def _configure_logging(*, quiet: bool) -> None:
    """The job's log on stderr (``sys.stderr`` as it is at each line: a progress bar may have taken
    it over), INFO and up; WARNING and up with ``--quiet``."""
    from airflow_cdc_provider.spark.progress import StderrHandler

    handler = StderrHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, handlers=[handler])


def main(argv: list[str] | None = None, *, under_spark_submit: bool = False) -> int:
    parser = build_parser(with_master=not under_spark_submit)
    args = parser.parse_args(argv)
    _configure_logging(quiet=getattr(args, "quiet", False))
    if args.command == "formats":
        _print_formats()
        return EXIT_OK
    if under_spark_submit:
        return run_snapshot_command(args, None)
    return run_snapshot_command(args, args.master, remote_url(args.master, args.remote))


if __name__ == "__main__":
    sys.exit(main())

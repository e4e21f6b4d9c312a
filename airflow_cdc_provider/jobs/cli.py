"""``cdc-replay``: the command line of the replay job (``snapshot`` and ``formats``).

The same argument parser serves the console script (an embedded ``local[*]`` master by default)
and ``spark_app.py`` under spark-submit (the master comes from spark-submit), so the job contract
of DESIGN.md section 5 is defined once.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import traceback
from pathlib import Path

from airflow_cdc_provider.formats import format_names, get_decoder
from airflow_cdc_provider.jobs.session import DEFAULT_MASTER

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _snapshot_arguments(parser: argparse.ArgumentParser, *, with_master: bool) -> None:
    parser.add_argument("--format", required=True, dest="source_format", help="source format; see `cdc-replay formats`")
    parser.add_argument("--input", required=True, action="append", dest="inputs", metavar="PATH",
                        help="landed files: a file, a folder (read recursively) or a glob; repeatable")
    parser.add_argument("--as-of", required=True, help="ISO-8601 with offset (2024-09-02T06:40:00+00:00, ...Z) or epoch ms")
    parser.add_argument("--output", required=True, help="snapshot folder: <table>/ Parquet, _cdc_metrics.json, _quarantine/")
    parser.add_argument("--key", action="append", default=[], metavar="COL[,COL...]",
                        help="key columns when records do not name them; TABLE=COL,... for one table; repeatable")
    parser.add_argument("--table", action="append", default=[], dest="tables", metavar="NAME",
                        help="only these tables (qualified or bare name); for qlik-json without table fields, the table the files hold")
    if with_master:
        parser.add_argument("--master", default=DEFAULT_MASTER, help=f"Spark master (default {DEFAULT_MASTER})")
    parser.add_argument("--on-error", choices=("quarantine", "fail"), default="quarantine",
                        help="records that cannot be decoded: set aside in _quarantine/ (default) or fail the job")
    parser.add_argument("--with-metadata", action="store_true", help="add _cdc_op, _cdc_event_ts, _cdc_position columns")
    parser.add_argument("--binary-as-text", action="store_true", help="decode Lindorm HBase Base64 values as UTF-8 text")
    parser.add_argument("--partitions", default="auto", metavar="auto|none|PATTERN",
                        help="time partitions of the landing: auto (hive dt=/date=/ds= and hour=/hr= folders, the default), "
                             "none, or a strftime folder pattern such as %%Y/%%m/%%d/%%H; partitions starting after "
                             "AS OF + --lateness are not read")
    parser.add_argument("--partition-timezone", default="UTC", help="time zone the partition folders are named in (default UTC)")
    parser.add_argument("--lateness", default="1h", help="how late an event may land after its time: 30m, 1h, 2d (default 1h)")
    parser.add_argument("--base", metavar="DIR",
                        help="an earlier output written with --keep-state: apply only the events after its AS OF "
                             "(falls back to a full rebuild, and says why in the metrics, when that could differ)")
    parser.add_argument("--keep-state", action="store_true",
                        help="also write _cdc_state/ so a later run can start from this snapshot (implied by --base)")
    parser.add_argument("--error-file", help=argparse.SUPPRESS)  # the operator reads the job's own error from here


def build_parser(*, with_master: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cdc-replay", description="Rebuild table snapshots as of any time from landed CDC files.")
    sub = parser.add_subparsers(dest="command", required=True)
    _snapshot_arguments(sub.add_parser("snapshot", help="rebuild snapshots as of a time"), with_master=with_master)
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
    # Imported here so `cdc-replay formats` and `--help` start without a JVM.
    from airflow_cdc_provider.formats import DecodeOptions
    from airflow_cdc_provider.jobs.session import build_session
    from airflow_cdc_provider.replay.engine import SnapshotSpec, run_snapshot

    try:
        table = args.tables[0] if args.source_format == "qlik-json" and len(args.tables) == 1 else None
        spec = SnapshotSpec.from_args(
            source_format=args.source_format,
            inputs=args.inputs,
            as_of=args.as_of,
            output=args.output,
            key=args.key,
            tables=args.tables,
            on_error=args.on_error,
            with_metadata=args.with_metadata,
            decode_options=DecodeOptions(table=table, binary_as_text=args.binary_as_text),
            partitions=args.partitions,
            partition_timezone=args.partition_timezone,
            lateness=args.lateness,
            base=args.base,
            keep_state=args.keep_state,
        )
        get_decoder(spec.source_format)
        spark = build_session(master=master)
        metrics = run_snapshot(spark, spec)
    except Exception as exc:  # noqa: BLE001 - every failure becomes one clear line and an exit code
        _write_error_file(args.error_file, exc)
        logging.getLogger(__name__).debug("replay failed", exc_info=True)
        print(f"cdc-replay: error: {exc}", file=sys.stderr)
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            traceback.print_exc()
        return EXIT_FAILED
    print(json.dumps(metrics, indent=2))
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

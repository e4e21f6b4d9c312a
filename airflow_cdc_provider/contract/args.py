"""The job's arguments: one class the hook, the command line and the engine all build from.

``SnapshotArgs`` holds every option of ``cdc-replay snapshot`` with the only defaults, validates
loose operator values (a path or a list, a datetime or text) and turns into the argument list and
back. The argument list is built as a list, never a shell string, and every value is checked so
that nothing a template renders can turn into a spark-submit or job option.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_cdc_provider.contract.as_of import normalise_as_ofs, snapshot_folders
from airflow_cdc_provider.contract.checks import CdcJobArgumentError, _checked
from airflow_cdc_provider.contract.partitions import (
    DEFAULT_LATENESS,
    DEFAULT_PARTITION_TIMEZONE,
    DEFAULT_PARTITIONS,
    PartitionPruning,
    parse_duration_ms,
)
from airflow_cdc_provider.contract.quarantine_limit import QuarantineLimit
from airflow_cdc_provider.contract.unavailable import UNAVAILABLE_VALUE_FORMATS, placeholder_bytes

# --format names; the decoder registry (formats/__init__.py) serves exactly these.
FORMAT_NAMES = (
    "aws-dms",
    "canal-json",
    "cdl-json",
    "datahub-blob",
    "datahub-tuple",
    "debezium-avro",
    "debezium-json",
    "debezium-mongodb",
    "dts-avro",
    "maxwell-json",
    "ogg-json",
    "qlik-json",
    "shareplex-json",
)
ON_ERROR_CHOICES = ("quarantine", "fail")
DEFAULT_ON_ERROR = "quarantine"
DEFAULT_MASTER = "local[*]"


def _as_list(name: str, value: str | os.PathLike | Iterable[str] | None) -> list[str]:
    """Accept one value or a list of them (templated fields may render either)."""
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [_checked(name, value)]
    if isinstance(value, Mapping):
        raise CdcJobArgumentError(f"{name} must be a string or a list of strings, got a mapping: {value!r}")
    return [_checked(name, item) for item in value]


def _columns(name: str, value: str | Iterable[str]) -> str:
    """One ``COL[,COL...]`` value from a column name or a list of them."""
    columns = _as_list(name, value)
    for column in columns:
        if "," in column or "=" in column:
            raise CdcJobArgumentError(f"{name} entries are single column names, got {column!r}")
    if not columns:
        raise CdcJobArgumentError(f"{name} must name at least one column")
    return ",".join(columns)


def _table_column_arguments(
    name: str,
    value: str | Iterable[str] | Mapping[str, str | Iterable[str]] | None,
    *,
    table_required: bool = False,
) -> tuple[str, ...]:
    """``COL[,COL...]`` / ``TABLE=COL[,COL...]`` option values (``--key``, ``--columns``).

    A mapping gives one ``TABLE=...`` value per table. Otherwise, with ``table_required`` (every
    value names its table), each item is one ``TABLE=COL[,COL...]`` string; without, the item or
    items are the columns of one value for every table.
    """
    if value is None or value == "":
        return ()
    if not isinstance(value, Mapping):
        items = [value] if isinstance(value, (str, os.PathLike)) else list(value)
        if table_required:
            return tuple(_table_columns_value(name, item) for item in items)
        return (_columns(name, items),) if items else ()
    out = []
    for table, columns in value.items():
        table = _checked(f"{name} table", table)
        if "=" in table or "," in table:
            raise CdcJobArgumentError(f"{name} table names must not contain '=' or ',', got {table!r}")
        out.append(f"{table}={_columns(f'{name}[{table!r}]', columns)}")
    return tuple(out)


def _table_columns_value(name: str, item: str) -> str:
    """One ``TABLE=COL[,COL...]`` string, checked."""
    table, equals, columns = _checked(name, item).partition("=")
    if not equals or not table.strip() or "," in table:
        raise CdcJobArgumentError(f"{name} entries are TABLE=COL[,COL...], got {item!r}")
    return (
        f"{table.strip()}={_columns(f'{name}[{table.strip()!r}]', [c.strip() for c in columns.split(',')])}"
    )


def _key_arguments(value: str | Iterable[str] | Mapping[str, str | Iterable[str]] | None) -> tuple[str, ...]:
    """``--key`` values: a column list for every table, or ``{table: columns}`` for named tables."""
    return _table_column_arguments("key_columns", value)


def _max_quarantined(value: str | int | None, on_error: str) -> str | None:
    """The ``--max-quarantined`` value as the argument list carries it (None or "": no limit).

    Refused with ``--on-error fail``, which already fails on the first record: a limit would say
    that some records may be set aside, the other option that none may.
    """
    if value is None or value == "":
        return None
    if on_error == "fail":
        raise CdcJobArgumentError(
            "max_quarantined limits how many records on_error='quarantine' sets aside; on_error='fail' "
            "fails on the first one: use one or the other"
        )
    return QuarantineLimit.parse(value).text


def _unavailable_arguments(source_format: str, value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``--unavailable-value`` values (none: Debezium's default), refused for formats whose records
    hold no Debezium placeholder: there the option would silently do nothing."""
    if value is None or value == "":
        return ()
    values = tuple(_as_list("unavailable_values", value))
    if values and source_format not in UNAVAILABLE_VALUE_FORMATS:
        raise CdcJobArgumentError(
            f"unavailable_values (--unavailable-value) is for {' and '.join(UNAVAILABLE_VALUE_FORMATS)}, "
            f"whose connectors write a placeholder for values they could not read; not for {source_format}"
        )
    for item in values:
        try:
            placeholder_bytes(item)
        except ValueError as exc:
            raise CdcJobArgumentError(str(exc)) from None
    return values


def _pruning_arguments(partitions: str, timezone: str, lateness: str) -> dict[str, str]:
    """Checked ``--partitions``/``--partition-timezone``/``--lateness`` values (wrong ones fail the task early)."""
    values = {
        "partitions": _checked("partitions", partitions),
        "partition_timezone": _checked("partition_timezone", timezone),
        "lateness": _checked("lateness", lateness),
    }
    try:
        PartitionPruning(
            values["partitions"], values["partition_timezone"], parse_duration_ms(values["lateness"])
        )
    except ValueError as exc:
        raise CdcJobArgumentError(str(exc)) from None
    return values


def _format_name(source_format: str) -> str:
    """The ``--format`` name, one of ``FORMAT_NAMES``."""
    fmt = _checked("source_format", source_format)
    if fmt not in FORMAT_NAMES:
        raise CdcJobArgumentError(f"unknown source_format {fmt!r}; known formats: {', '.join(FORMAT_NAMES)}")
    return fmt


def _input_arguments(input_paths: str | os.PathLike | Iterable[str]) -> tuple[str, ...]:
    """``--input`` values: at least one, each checked."""
    inputs = _as_list("input_paths", input_paths)
    if not inputs:
        raise CdcJobArgumentError("input_paths must name at least one path")
    return tuple(inputs)


def _instant_arguments(
    as_of: str | int | datetime | Iterable[str | int | datetime], *, history: bool
) -> tuple[str, ...]:
    """The ``--as-of`` values, normalised; a history (``--until``) takes exactly one."""
    as_ofs = normalise_as_ofs(as_of)
    if history and len(as_ofs) != 1:
        raise CdcJobArgumentError(f"a history takes one until instant, got {len(as_ofs)}")
    return as_ofs


def check_option_combinations(
    *,
    history: bool,
    as_of_count: int,
    base_path: str | os.PathLike | None,
    keep_state: bool,
    whole_transactions: bool,
) -> None:
    """Refuse the options that do not combine; the one copy of the rule.

    A history and a run of several AS OFs rebuild everything from the landing in one scan, so there
    is no base to start from and no single snapshot whose state could be kept. A whole transaction
    may straddle a base's AS OF, so ``whole_transactions`` needs a full rebuild too. Called where a
    request is built (``SnapshotArgs.build``, for the operators' values and the command line's) and
    where a run is made from one (``SnapshotSpec.each_from_args``), for requests made directly.
    """
    incremental = bool(base_path or keep_state)
    if history and incremental:
        raise CdcJobArgumentError(
            "a history cannot be combined with base_path or keep_state: it is rebuilt from the landing"
        )
    if as_of_count > 1 and incremental:
        raise CdcJobArgumentError(
            "several AS OFs cannot be combined with base_path or keep_state: each snapshot is "
            "rebuilt from the landing in the one scan; run a single AS OF to start from or keep state"
        )
    if whole_transactions and incremental:
        raise CdcJobArgumentError(
            "--whole-transactions cannot be combined with --base or --keep-state yet: a transaction "
            "may straddle the base's AS OF; run a full rebuild with --whole-transactions instead"
        )


def _table_arguments(
    tables: str | Iterable[str] | None,
    table_columns: Iterable[str] | Mapping[str, str | Iterable[str]] | None,
    timestamp_column: str | None,
) -> dict[str, Any]:
    """Checked ``--table``, ``--columns`` and ``--timestamp-column`` values."""
    return {
        "tables": tuple(_as_list("tables", tables)),
        "table_columns": _table_column_arguments("table_columns", table_columns, table_required=True),
        "timestamp_column": _checked("timestamp_column", timestamp_column) if timestamp_column else None,
    }


def _incremental_arguments(base_path: str | os.PathLike | None, keep_state: bool) -> dict[str, Any]:
    """Checked ``--base`` and ``--keep-state`` values."""
    return {
        "base_path": _checked("base_path", base_path) if base_path else None,
        "keep_state": bool(keep_state),
    }


@dataclass(frozen=True)
class SnapshotArgs:
    """One ``cdc-replay snapshot`` run: every option, with the only defaults."""

    source_format: str
    input_paths: Sequence[str]
    output_path: str  # with several AS OFs, a pattern holding {as_of:FORMAT}
    as_of: Sequence[str]  # one or more instants, each as normalise_as_of gives it
    key_arguments: Sequence[str] = ()  # each one --key value: "a,b" or "db.table=a,b"
    tables: Sequence[str] = ()
    table_columns: Sequence[str] = ()  # each one --columns value: "db.table=c1,c2"
    timestamp_column: str | None = None
    on_error: str = DEFAULT_ON_ERROR
    max_quarantined: str | None = None  # "N" records or "P%" of those read; past it the run fails
    with_metadata: bool = False
    binary_as_text: bool = False
    unavailable_values: Sequence[str] = ()  # each one --unavailable-value; none: Debezium's default
    partitions: str = DEFAULT_PARTITIONS
    partition_timezone: str = DEFAULT_PARTITION_TIMEZONE
    lateness: str = DEFAULT_LATENESS
    base_path: str | None = None
    keep_state: bool = False
    whole_transactions: bool = False
    error_file: str | None = None  # where the job writes its own error for the operator to read
    history: bool = False  # ``cdc-replay history``: as_of holds the one --until instant

    @classmethod
    def build(
        cls,
        *,
        source_format: str,
        input_paths: str | os.PathLike | Iterable[str],
        output_path: str | os.PathLike,
        as_of: str | int | datetime | Iterable[str | int | datetime],
        key_columns: str | Iterable[str] | Mapping[str, str | Iterable[str]] | None = None,
        tables: str | Iterable[str] | None = None,
        table_columns: Iterable[str] | Mapping[str, str | Iterable[str]] | None = None,
        timestamp_column: str | None = None,
        on_error: str = DEFAULT_ON_ERROR,
        max_quarantined: str | int | None = None,
        with_metadata: bool = False,
        binary_as_text: bool = False,
        unavailable_values: str | Iterable[str] | None = None,
        partitions: str = DEFAULT_PARTITIONS,
        partition_timezone: str = DEFAULT_PARTITION_TIMEZONE,
        lateness: str = DEFAULT_LATENESS,
        base_path: str | os.PathLike | None = None,
        keep_state: bool = False,
        whole_transactions: bool = False,
        error_file: str | os.PathLike | None = None,
        history: bool = False,
    ) -> SnapshotArgs:
        """Validate loose operator values (a path or a list, datetime or text) into a request."""
        fmt = _format_name(source_format)
        inputs = _input_arguments(input_paths)
        keys = _key_arguments(key_columns)
        if on_error not in ON_ERROR_CHOICES:
            raise CdcJobArgumentError(f"on_error must be one of {ON_ERROR_CHOICES}, got {on_error!r}")
        as_ofs = _instant_arguments(as_of, history=history)
        output = _checked("output_path", output_path)
        snapshot_folders(output, as_ofs)
        check_option_combinations(
            history=history,
            as_of_count=len(as_ofs),
            base_path=base_path,
            keep_state=keep_state,
            whole_transactions=whole_transactions,
        )
        return cls(
            source_format=fmt,
            input_paths=inputs,
            output_path=output,
            as_of=as_ofs,
            key_arguments=keys,
            **_table_arguments(tables, table_columns, timestamp_column),
            on_error=on_error,
            max_quarantined=_max_quarantined(max_quarantined, on_error),
            with_metadata=bool(with_metadata),
            binary_as_text=bool(binary_as_text),
            unavailable_values=_unavailable_arguments(fmt, unavailable_values),
            **_pruning_arguments(partitions, partition_timezone, lateness),
            **_incremental_arguments(base_path, keep_state),
            whole_transactions=bool(whole_transactions),
            error_file=_checked("error_file", error_file) if error_file else None,
            history=bool(history),
        )

    def to_argv(self) -> list[str]:
        """The job's argument list: ``cdc-replay snapshot`` arguments without the word ``snapshot``,
        or ``history`` and its arguments."""
        args = ["history"] if self.history else []
        args += ["--format", self.source_format]
        for path in self.input_paths:
            args += ["--input", path]
        for as_of in self.as_of:
            args += ["--until" if self.history else "--as-of", as_of]
        args += ["--output", self.output_path]
        for key in self.key_arguments:
            args += ["--key", key]
        for table in self.tables:
            args += ["--table", table]
        for columns in self.table_columns:
            args += ["--columns", columns]
        if self.timestamp_column:
            args += ["--timestamp-column", self.timestamp_column]
        args += ["--on-error", self.on_error]
        if self.max_quarantined is not None:
            args += ["--max-quarantined", self.max_quarantined]
        if self.with_metadata:
            args.append("--with-metadata")
        if self.binary_as_text:
            args.append("--binary-as-text")
        for value in self.unavailable_values:
            args += ["--unavailable-value", value]
        for option, value, default in (
            ("--partitions", self.partitions, DEFAULT_PARTITIONS),
            ("--lateness", self.lateness, DEFAULT_LATENESS),
            ("--partition-timezone", self.partition_timezone, DEFAULT_PARTITION_TIMEZONE),
        ):
            if value != default:
                args += [option, value]
        if self.base_path:
            args += ["--base", self.base_path]
        if self.keep_state:
            args.append("--keep-state")
        if self.whole_transactions:
            args.append("--whole-transactions")
        if self.error_file:
            args += ["--error-file", self.error_file]
        return args

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> SnapshotArgs:
        """The arguments back from a list ``to_argv`` wrote (or a user typed): the inverse of ``to_argv``."""
        history = list(argv[:1]) == ["history"]
        parser = argparse.ArgumentParser(prog="cdc-replay history" if history else "cdc-replay snapshot")
        add_snapshot_arguments(parser, history=history)
        return cls.from_namespace(parser.parse_args(list(argv[1:] if history else argv)), history=history)

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace, history: bool = False) -> SnapshotArgs:
        """From the options ``add_snapshot_arguments`` parsed; validated as an operator's values are."""
        return cls.build(
            source_format=ns.source_format,
            input_paths=ns.inputs,
            output_path=ns.output,
            as_of=ns.as_of,
            key_columns=None,
            tables=ns.tables,
            table_columns=ns.table_columns,
            timestamp_column=ns.timestamp_column,
            on_error=ns.on_error,
            max_quarantined=ns.max_quarantined,
            with_metadata=ns.with_metadata,
            binary_as_text=ns.binary_as_text,
            unavailable_values=ns.unavailable_values,
            partitions=ns.partitions,
            partition_timezone=ns.partition_timezone,
            lateness=ns.lateness,
            base_path=getattr(ns, "base", None),
            keep_state=getattr(ns, "keep_state", False),
            whole_transactions=ns.whole_transactions,
            error_file=ns.error_file,
            history=history,
        ).with_key_arguments(ns.key)

    def snapshots(self) -> list[tuple[str, str]]:
        """(AS OF, output folder) of each snapshot the run writes, in the order the AS OFs were given."""
        return list(zip(self.as_of, snapshot_folders(self.output_path, self.as_of)))

    def with_key_arguments(self, values: Sequence[str]) -> SnapshotArgs:
        """These ``--key`` values as typed (``COL[,COL]`` or ``TABLE=COL[,COL]``), each checked."""
        from dataclasses import replace

        return replace(self, key_arguments=tuple(_checked("--key", v) for v in values))


def add_snapshot_arguments(
    parser: argparse.ArgumentParser, *, with_master: bool = False, history: bool = False
) -> None:
    """The options of ``cdc-replay snapshot`` (``history``: of ``cdc-replay history``, ``--until``
    in place of ``--as-of``, no ``--base``/``--keep-state``), as ``SnapshotArgs`` reads and writes them.

    Added group by group, in the order ``--help`` lists them.
    """
    _add_input_arguments(parser)
    _add_instant_arguments(parser, history=history)
    _add_table_arguments(parser)
    if with_master:
        _add_session_arguments(parser)
    _add_error_arguments(parser)
    _add_value_arguments(parser)
    _add_partition_arguments(parser)
    if not history:
        _add_incremental_arguments(parser)
    parser.add_argument(
        "--whole-transactions",
        action="store_true",
        help="apply a transaction whole or not at all: as of T only when its last event is at or before T "
        "(formats whose records carry transaction ids)",
    )
    parser.add_argument(
        "--error-file", help=argparse.SUPPRESS
    )  # the operator reads the job's own error from here


def remote_url(master: str | None, remote: str | None) -> str | None:
    """The Spark Connect URL a command line asks for: ``--remote``, else ``SPARK_REMOTE`` unless
    ``--master`` was given (an explicit master wins over the environment)."""
    if remote:
        return remote
    return None if master else (os.environ.get("SPARK_REMOTE") or None)


def _add_session_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the job's Spark runs: an embedded master, or a Spark Connect server (not under spark-submit)."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--master",
        help=f"Spark master of an embedded driver (default {DEFAULT_MASTER}, unless SPARK_REMOTE is set)",
    )
    where.add_argument(
        "--remote",
        metavar="sc://HOST:PORT/;token=...",
        help="run the whole job through a Spark Connect server (default: the SPARK_REMOTE environment "
        "variable, as PySpark reads it); the files are listed and the output swapped from this process",
    )


def _add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """``--format`` and ``--input``: what was landed, and where."""
    parser.add_argument(
        "--format",
        required=True,
        dest="source_format",
        choices=FORMAT_NAMES,
        metavar="FORMAT",
        help="source format; see `cdc-replay formats`",
    )
    parser.add_argument(
        "--input",
        required=True,
        action="append",
        dest="inputs",
        metavar="PATH",
        help="landed files: a file, a folder (read recursively) or a glob; repeatable",
    )


def _add_instant_arguments(parser: argparse.ArgumentParser, *, history: bool) -> None:
    """``--as-of`` (repeatable) or, for a history, ``--until``; and ``--output``, which says what
    the command writes there."""
    if history:
        parser.add_argument(
            "--until",
            required=True,
            dest="as_of",
            metavar="TIMESTAMP",
            help="the versions up to this instant: ISO-8601 with offset or epoch ms",
        )
        parser.add_argument(
            "--output",
            required=True,
            help="history folder: <table>/ Parquet (the table's columns, then _cdc_valid_from, "
            "_cdc_valid_to, _cdc_op, _cdc_position), _cdc_metrics.json, _quarantine/",
        )
        return
    parser.add_argument(
        "--as-of",
        required=True,
        action="append",
        help="ISO-8601 with offset (2024-09-02T06:40:00+00:00, ...Z) or epoch ms; repeatable: one "
        "scan writes a snapshot per AS OF",
    )
    parser.add_argument(
        "--output",
        required=True,
        help="snapshot folder: <table>/ Parquet, _cdc_metrics.json, _quarantine/; with several "
        "--as-of, a pattern holding {as_of:FORMAT} (strftime, UTC), e.g. /lake/snap/dt={as_of:%%Y-%%m-%%d}",
    )


def _add_table_arguments(parser: argparse.ArgumentParser) -> None:
    """``--key``, ``--table``, ``--columns``, ``--timestamp-column``: which tables, and what the
    records do not say about them."""
    parser.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="COL[,COL...]",
        help="key columns when records do not name them; TABLE=COL,... for one table; repeatable",
    )
    parser.add_argument(
        "--table",
        action="append",
        default=[],
        dest="tables",
        metavar="NAME",
        help="only these tables (qualified or bare name); for qlik-json without table fields, the table the files hold",
    )
    parser.add_argument(
        "--columns",
        action="append",
        default=[],
        dest="table_columns",
        metavar="TABLE=COL[,COL...]",
        help="aws-dms: the columns of TABLE's headerless CSV rows after Op, in file order; repeatable",
    )
    parser.add_argument(
        "--timestamp-column",
        metavar="NAME",
        help="aws-dms: the column DMS adds with TimestampColumnName; it orders events, not a snapshot column",
    )


def _add_error_arguments(parser: argparse.ArgumentParser) -> None:
    """``--on-error`` and ``--max-quarantined``: what happens to records that cannot be decoded."""
    parser.add_argument(
        "--on-error",
        choices=ON_ERROR_CHOICES,
        default=DEFAULT_ON_ERROR,
        help="records that cannot be decoded: set aside in _quarantine/ (default) or fail the job",
    )
    parser.add_argument(
        "--max-quarantined",
        metavar="N|P%",
        help="fail the run, leaving its output as it was, when more than N records (or P%% of the "
        "records read) are quarantined; they are kept in .OUTPUT.cdc-rejected/ beside the output",
    )


def _add_value_arguments(parser: argparse.ArgumentParser) -> None:
    """``--with-metadata``, ``--binary-as-text``, ``--unavailable-value``: what each row holds."""
    parser.add_argument(
        "--with-metadata",
        action="store_true",
        help="add _cdc_op, _cdc_event_ts, _cdc_position, _cdc_file, _cdc_line columns",
    )
    parser.add_argument(
        "--binary-as-text", action="store_true", help="decode Lindorm HBase Base64 values as UTF-8 text"
    )
    parser.add_argument(
        "--unavailable-value",
        action="append",
        default=[],
        dest="unavailable_values",
        metavar="TEXT",
        help="debezium-json, debezium-avro: the connector's unavailable.value.placeholder (hex:... for raw "
        "bytes); a column holding it keeps its earlier value. Repeatable; default __debezium_unavailable_value",
    )


def _add_partition_arguments(parser: argparse.ArgumentParser) -> None:
    """``--partitions``, ``--partition-timezone``, ``--lateness``: which partitions need not be read."""
    parser.add_argument(
        "--partitions",
        default=DEFAULT_PARTITIONS,
        metavar="auto|none|PATTERN",
        help="time partitions of the landing: auto (hive dt=/date=/ds= and hour=/hr= folders, the default), "
        "none, or a strftime folder pattern such as %%Y/%%m/%%d/%%H; partitions starting after "
        "AS OF + --lateness are not read",
    )
    parser.add_argument(
        "--partition-timezone",
        default=DEFAULT_PARTITION_TIMEZONE,
        help=f"time zone the partition folders are named in (default {DEFAULT_PARTITION_TIMEZONE})",
    )
    parser.add_argument(
        "--lateness",
        default=DEFAULT_LATENESS,
        help=f"how late an event may land after its time: 30m, 1h, 2d (default {DEFAULT_LATENESS})",
    )


def _add_incremental_arguments(parser: argparse.ArgumentParser) -> None:
    """``--base`` and ``--keep-state``: a snapshot that starts from, or is kept for, another run."""
    parser.add_argument(
        "--base",
        metavar="DIR",
        help="an earlier output written with --keep-state: apply only the events after its AS OF "
        "(falls back to a full rebuild, and says why in the metrics, when that could differ)",
    )
    parser.add_argument(
        "--keep-state",
        action="store_true",
        help="also write _cdc_state/ so a later run can start from this snapshot (implied by --base)",
    )

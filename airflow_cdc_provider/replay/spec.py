"""What one rebuild does, resolved from the job's arguments: instants, keys, pruning, format options.

Takes the job's ``SnapshotArgs`` (docs/contract.md, "Arguments"); gives one ``SnapshotSpec`` per
snapshot they ask for (``SnapshotSpec.each_from_args``), which every stage of a run reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from airflow_cdc_provider.contract.args import ON_ERROR_CHOICES, SnapshotArgs, check_option_combinations
from airflow_cdc_provider.contract.as_of import parse_as_of
from airflow_cdc_provider.contract.partitions import PartitionPruning, parse_duration_ms
from airflow_cdc_provider.contract.quarantine_limit import QuarantineLimit
from airflow_cdc_provider.contract.unavailable import placeholders
from airflow_cdc_provider.formats import DecodeOptions, get_decoder
from airflow_cdc_provider.replay.keys import KeyConfig


@dataclass(frozen=True)
class SnapshotSpec:
    source_format: str
    inputs: tuple[str, ...]
    as_of_ms: int
    output: str
    keys: KeyConfig
    tables: tuple[str, ...]
    on_error: str
    with_metadata: bool
    decode_options: DecodeOptions
    partitions: PartitionPruning
    base: str | None  # an earlier output (written with keep_state) to start from
    keep_state: bool  # also write _cdc_state/ so a later run can start from this one
    whole_transactions: bool = False  # a transaction applies whole or not at all
    max_quarantined: QuarantineLimit | None = None  # past it the run fails, its output left as it was

    @property
    def writes_state(self) -> bool:
        return self.keep_state or self.base is not None

    @classmethod
    def each_from_args(
        cls, args: SnapshotArgs, decode_options: DecodeOptions | None = None
    ) -> list[SnapshotSpec]:
        """One run per snapshot ``args`` asks for (an AS OF and its folder), in the order given.

        The one way to build specs; ``decode_options`` (tests) may set the format options.
        """
        snapshots = args.snapshots()
        if args.on_error not in ON_ERROR_CHOICES:
            raise ValueError(
                f"--on-error must be one of {', '.join(ON_ERROR_CHOICES)}, not {args.on_error!r}"
            )
        keys = parse_keys(args.key_arguments)
        check_option_combinations(
            history=args.history,
            as_of_count=len(snapshots),
            base_path=args.base_path,
            keep_state=args.keep_state,
            whole_transactions=args.whole_transactions,
        )
        if args.whole_transactions:
            _check_transaction_ids(args.source_format)
        first = cls(
            source_format=args.source_format,
            inputs=tuple(args.input_paths),
            as_of_ms=0,
            output="",
            keys=keys,
            tables=tuple(args.tables),
            on_error=args.on_error,
            with_metadata=args.with_metadata,
            decode_options=_decode_options(args, keys, decode_options),
            partitions=PartitionPruning(
                args.partitions, args.partition_timezone, parse_duration_ms(args.lateness)
            ),
            base=args.base_path or None,
            keep_state=args.keep_state,
            whole_transactions=args.whole_transactions,
            max_quarantined=QuarantineLimit.parse(args.max_quarantined) if args.max_quarantined else None,
        )
        return [replace(first, as_of_ms=parse_as_of(as_of), output=folder) for as_of, folder in snapshots]


def _decode_options(args: SnapshotArgs, keys: KeyConfig, given: DecodeOptions | None) -> DecodeOptions:
    """The format options ``args`` set, over those ``given`` (tests)."""
    # One --table names the table of files that do not say which, for formats that need it.
    table = (
        args.tables[0]
        if len(args.tables) == 1 and get_decoder(args.source_format).table_from_filter
        else None
    )
    given = given or DecodeOptions(table=table, binary_as_text=args.binary_as_text)
    return DecodeOptions(
        key_columns=keys.default,
        table_keys=dict(keys.per_table),
        table=given.table,
        binary_as_text=given.binary_as_text,
        with_metadata=args.with_metadata,
        table_columns=given.table_columns or parse_table_columns(args.table_columns),
        timestamp_column=given.timestamp_column or args.timestamp_column,
        whole_transactions=args.whole_transactions,
        unavailable_values=placeholders(args.unavailable_values)
        if args.unavailable_values
        else given.unavailable_values,
    )


def spec_from_keywords(
    *,
    source_format: str,
    inputs: list[str],
    as_of: str | int,
    output: str,
    key: Sequence[str] = (),
    tables: Sequence[str] = (),
    base: str | None = None,
    decode_options: DecodeOptions | None = None,
    **options: Any,
) -> SnapshotSpec:
    """One run from keyword arguments named as on the command line (tests and benchmarks): the
    ``SnapshotArgs`` they name, through ``SnapshotSpec.each_from_args``."""
    args = SnapshotArgs(
        source_format=source_format,
        input_paths=tuple(inputs),
        output_path=output,
        as_of=(str(as_of),),
        key_arguments=tuple(key),
        tables=tuple(tables),
        base_path=base,
        **options,
    )
    [spec] = SnapshotSpec.each_from_args(args, decode_options)
    return spec


def _check_transaction_ids(source_format: str) -> None:
    """``--whole-transactions`` needs transaction ids in the records."""
    from airflow_cdc_provider.formats import format_names

    if not get_decoder(source_format).transaction_ids:
        carrying = [name for name in format_names() if get_decoder(name).transaction_ids]
        raise ValueError(
            f"--whole-transactions: {source_format} records carry no transaction ids, so its "
            f"transactions cannot be told apart; drop the option, or use a format that carries them: "
            f"{', '.join(carrying)}"
        )


def _table_and_columns(value: str) -> tuple[str | None, tuple[str, ...]]:
    """``a,b`` -> ``(None, (a, b))``; ``db.t=a,b`` -> ``("db.t", (a, b))``."""
    table, equals, cols = value.partition("=")
    if not equals:
        table, cols = None, value
    return (table.strip() if table is not None else None), tuple(
        c.strip() for c in cols.split(",") if c.strip()
    )


def parse_keys(values: list[str]) -> KeyConfig:
    """``--key id`` / ``--key a,b`` (every table) and ``--key db.t=a,b`` (one table)."""
    default: tuple[str, ...] = ()
    per_table: list[tuple[str, tuple[str, ...]]] = []
    for value in values:
        table, columns = _table_and_columns(value)
        if table is None:
            default = default + columns
        else:
            per_table.append((table, columns))
    return KeyConfig(default=default, per_table=tuple(per_table))


def parse_table_columns(values: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``--columns db.t=a,b`` (repeatable): the columns of each named table, parsed as ``--key TABLE=``."""
    parsed = {}
    for value in values:
        table, columns = _table_and_columns(value)
        if table is None:
            raise ValueError(f"--columns takes TABLE=COL[,COL...], got {value!r}")
        parsed[table] = columns
    return parsed

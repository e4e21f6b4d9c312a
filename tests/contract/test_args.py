"""The one arguments class: every option survives the trip to the argument list and back."""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields, replace

import pytest

from airflow_cdc_provider.contract.args import FORMAT_NAMES, SnapshotArgs, add_snapshot_arguments
from airflow_cdc_provider.contract.checks import CdcJobArgumentError

EVERY_OPTION = SnapshotArgs(
    source_format="debezium-json",
    input_paths=("/lake/a", "s3a://lake/b/*.json"),
    output_path="/lake/out",
    as_of=("2024-09-02T06:40:00+00:00",),
    key_arguments=("id,region", "db.orders=order_id"),
    tables=("db.orders", "customers"),
    table_columns=("hr.employee=id,name,hired", "orders=order_id,qty"),
    timestamp_column="dms_ts",
    on_error="fail",
    with_metadata=True,
    binary_as_text=True,
    unavailable_values=("N/A", "hex:00ff"),
    partitions="%Y/%m/%d",
    partition_timezone="Asia/Shanghai",
    lateness="2h",
    base_path="/lake/2024-09-01",
    keep_state=True,
    error_file="/tmp/err.json",
)


def test_every_option_round_trips():
    optional = [f for f in fields(SnapshotArgs) if f.default is not MISSING]
    # Every option set (a history is the other command and whole transactions refuse a base: their
    # own round trips below; max_quarantined refuses on_error="fail":
    # tests/reliability/test_quarantine_limit.py round-trips it).
    unset = [f.name for f in optional if getattr(EVERY_OPTION, f.name) == f.default]
    assert unset == ["max_quarantined", "whole_transactions", "history"]
    assert SnapshotArgs.from_argv(EVERY_OPTION.to_argv()) == EVERY_OPTION


def test_whole_transactions_round_trip_and_refuse_a_base():
    whole = replace(EVERY_OPTION, whole_transactions=True, base_path=None, keep_state=False)
    assert "--whole-transactions" in whole.to_argv()
    assert SnapshotArgs.from_argv(whole.to_argv()) == whole
    with pytest.raises(
        CdcJobArgumentError,
        match=r"^--whole-transactions cannot be combined with --base or --keep-state yet: a transaction "
        r"may straddle the base's AS OF; run a full rebuild with --whole-transactions instead$",
    ):
        SnapshotArgs.from_argv([*whole.to_argv(), "--keep-state"])


def test_every_history_option_round_trips():
    history = replace(EVERY_OPTION, history=True, base_path=None, keep_state=False)
    argv = history.to_argv()
    assert argv[:1] == ["history"] and argv[argv.index("--until") + 1] == "2024-09-02T06:40:00+00:00"
    assert "--as-of" not in argv
    assert SnapshotArgs.from_argv(argv) == history


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"as_of": [0, 1]}, "a history takes one until instant, got 2"),
        ({"as_of": 0, "keep_state": True}, "a history cannot be combined with base_path or keep_state"),
    ],
)
def test_a_history_refuses(options, message):
    with pytest.raises(CdcJobArgumentError, match=message):
        SnapshotArgs.build(
            source_format="debezium-json",
            input_paths="/in",
            output_path="/o/{as_of:%H}",
            history=True,
            **options,
        )


def test_defaults_round_trip_and_stay_off_the_argument_list():
    args = SnapshotArgs.build(source_format="debezium-json", input_paths="/lake/a", output_path="/o", as_of=0)
    assert args.to_argv() == [
        "--format",
        "debezium-json",
        "--input",
        "/lake/a",
        "--as-of",
        "0",
        "--output",
        "/o",
        "--on-error",
        "quarantine",
    ]
    assert SnapshotArgs.from_argv(args.to_argv()) == args


def test_the_command_line_parser_is_the_contracts():
    parser = argparse.ArgumentParser()
    add_snapshot_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--format", "no-such-format", "--input", "/a", "--as-of", "0", "--output", "/o"])
    with pytest.raises(CdcJobArgumentError, match="must not start with '-'"):
        SnapshotArgs.from_argv(
            ["--format", "qlik-json", "--input", "/a", "--as-of", "0", "--output", "/o", "--key=-x"]
        )


def test_format_names_are_the_registrys():
    from airflow_cdc_provider.formats import format_names

    assert tuple(format_names()) == FORMAT_NAMES


def test_table_columns_from_a_mapping_or_table_entries_and_refused_without_a_table():
    args = SnapshotArgs.build(
        source_format="aws-dms",
        input_paths="/lake/dms",
        output_path="/o",
        as_of=0,
        table_columns={"hr.employee": ["id", "name"], "orders": "order_id"},
        timestamp_column="ts",
    )
    assert args.table_columns == ("hr.employee=id,name", "orders=order_id")
    assert args.to_argv() == [
        "--format", "aws-dms", "--input", "/lake/dms", "--as-of", "0", "--output", "/o",
        "--columns", "hr.employee=id,name", "--columns", "orders=order_id", "--timestamp-column", "ts",
        "--on-error", "quarantine",
    ]  # fmt: skip
    assert SnapshotArgs.from_argv(args.to_argv()) == args
    listed = SnapshotArgs.build(
        source_format="aws-dms", input_paths="/l", output_path="/o", as_of=0, table_columns=["hr.e = a, b"]
    )
    assert listed.table_columns == ("hr.e=a,b",)
    for bad, message in (
        (["id,name"], "TABLE=COL"),
        ({"hr.e": []}, "at least one column"),
        ({"a=b": "x"}, "must not contain"),
        (["hr.e=a,-b"], "must not start with '-'"),
    ):
        with pytest.raises(CdcJobArgumentError, match=message):
            SnapshotArgs.build(
                source_format="aws-dms", input_paths="/l", output_path="/o", as_of=0, table_columns=bad
            )


def test_several_as_ofs_round_trip_and_name_one_folder_each():
    args = SnapshotArgs.build(
        source_format="debezium-json",
        input_paths="/lake/a",
        output_path="/lake/snap/dt={as_of:%Y-%m-%d}/at={as_of:%H%M}",
        as_of=["2024-09-01T23:30:00+02:00", 1725321600000],
    )
    assert args.as_of == ("2024-09-01T23:30:00+02:00", "1725321600000")
    assert args.to_argv()[4:8] == ["--as-of", "2024-09-01T23:30:00+02:00", "--as-of", "1725321600000"]
    assert SnapshotArgs.from_argv(args.to_argv()) == args
    # Folders are named in UTC, whatever offset the AS OF was written with.
    assert args.snapshots() == [
        ("2024-09-01T23:30:00+02:00", "/lake/snap/dt=2024-09-01/at=2130"),
        ("1725321600000", "/lake/snap/dt=2024-09-03/at=0000"),
    ]


def test_one_as_of_may_use_the_pattern_too():
    args = SnapshotArgs.build(
        source_format="debezium-json", input_paths="/a", output_path="/s/{as_of:%Y%m%d}", as_of=0
    )
    assert args.snapshots() == [("0", "/s/19700101")]


@pytest.mark.parametrize(
    ("output", "as_of", "extra", "message"),
    [
        (
            "/lake/snap",
            ["2024-09-01T00:00:00Z", "2024-09-02T00:00:00Z"],
            {},
            "2 AS OFs need one output folder each: put {as_of:FORMAT} in output_path '/lake/snap', "
            "e.g. /lake/snap/dt={as_of:%Y-%m-%d}",
        ),
        (
            "/lake/dt={as_of:%Y-%m-%d}",
            ["2024-09-01T10:00:00Z", "2024-09-01T20:00:00Z"],
            {},
            "AS OFs 2024-09-01T10:00:00Z and 2024-09-01T20:00:00Z both write /lake/dt=2024-09-01; give them "
            "distinct folders with a finer {as_of:FORMAT} in output_path (e.g. %Y-%m-%dT%H%M)",
        ),
        (
            "/lake/dt={as_of}",
            ["2024-09-01T10:00:00Z"],
            {},
            "output_path '/lake/dt={as_of}': write the AS OF field as {as_of:FORMAT} with a strftime "
            "FORMAT, e.g. {as_of:%Y-%m-%d}",
        ),
        (
            "/lake/dt={as_of:%Y-%m-%d}",
            ["2024-09-01T00:00:00Z", "2024-09-02T00:00:00Z"],
            {"keep_state": True},
            "several AS OFs cannot be combined with base_path or keep_state: each snapshot is rebuilt "
            "from the landing in the one scan; run a single AS OF to start from or keep state",
        ),
        ("/lake/dt={as_of:%Y-%m-%d}", [], {}, "as_of must name at least one instant"),
    ],
)
def test_several_as_ofs_are_checked_before_the_job_starts(output, as_of, extra, message):
    with pytest.raises(CdcJobArgumentError) as caught:
        SnapshotArgs.build(
            source_format="debezium-json", input_paths="/a", output_path=output, as_of=as_of, **extra
        )
    assert str(caught.value) == message

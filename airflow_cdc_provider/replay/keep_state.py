"""Keeping state: ``_cdc_state/``, what a later ``--base`` run starts from (see ``base_state``).

Part of the write stage of a run with ``--keep-state`` or ``--base``. Takes the run's resolved
rows, ``Input``, what typed its tables and its metrics; gives, in the staging folder, the rows as
the fold left them (``base_state.state_rows``) and ``state.json``. The layout is docs/contract.md,
"``_cdc_state``".
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from airflow_cdc_provider.contract.metrics import STATE_DIR, STATE_FILE
from airflow_cdc_provider.replay.base_state import ROWS_DIR, BaseState, state_rows
from airflow_cdc_provider.replay.output import OutputTarget
from airflow_cdc_provider.replay.read import Input, decode_json, keys_json
from airflow_cdc_provider.replay.schemas import SchemaInputs
from airflow_cdc_provider.replay.spec import SnapshotSpec


def _lines_complete(spec: SnapshotSpec, read: Input) -> bool:
    """Whether every row of the state carries its last event's line: filled for all of them with
    ``--with-metadata``; otherwise exact only where no file was read in splits, in this run and
    in its base."""
    if spec.with_metadata:
        return True
    unsplit = not any(f.split_read for f in read.files)
    return unsplit and (read.base is None or read.base.lines_complete)


def write_state(
    spec: SnapshotSpec,
    target: OutputTarget,
    read: Input,
    resolved: DataFrame,
    typing_inputs: SchemaInputs,
    key_columns: dict[str, list[str]],
    metrics: dict,
) -> None:
    """``_cdc_state/``: what a later ``--base`` run starts from (see replay/base_state.py)."""
    state_rows(resolved).write.mode("overwrite").parquet(target.staging_uri(STATE_DIR, ROWS_DIR))
    base = read.base
    files = dict(base.files) if base is not None else {}
    for landed in read.files:
        files[landed.path] = [landed.size, read.horizons.get(landed.path)]
    tables = {}
    for table, entry in metrics["tables"].items():
        tables[table] = {
            "signatures": sorted(
                {tuple(map(tuple, sig)) for t, sig in typing_inputs.signatures if t == table}
            ),
            "dropped": sorted(typing_inputs.dropped.get(table, ())),
            "key_columns": key_columns.get(table, []),
            "last_event_ms": entry["last_event_ms"],
        }
    state = BaseState(
        uri=target.final_uri(STATE_DIR),
        format=spec.source_format,
        as_of_ms=spec.as_of_ms,
        keys=keys_json(spec.keys),
        tables_filter=sorted(spec.tables),
        tables=tables,
        files=files,
        decode=decode_json(spec),
        lines_complete=_lines_complete(spec, read),
    )
    target.write_text(f"{STATE_DIR}/{STATE_FILE}", state.to_json())

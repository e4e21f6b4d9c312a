"""Rebuild a point-in-time snapshot of the bundled Debezium sample, then report its row counts.

Runs as is on a machine with this package installed and a ``spark_default`` connection (for local
mode: ``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type":"spark","host":"local[*]"}'``). Everything that
touches the file system happens inside tasks: parsing this file does no I/O, looks up no
connection and queries no database.

DAG params (change them in "Trigger DAG w/ config"):
- ``input_path``: the landed files (default: the sample bundled with the package).
- ``as_of``: the instant to rebuild; empty means the run's data interval end.
- ``output_dir``: where the snapshot goes; empty means a fresh temporary directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

import airflow_cdc_provider
from airflow_cdc_provider.operators.snapshot import CdcSnapshotOperator

# A path computed from the installed package; nothing is read here.
SAMPLE_INPUT = str(Path(airflow_cdc_provider.__file__).parent / "sample_data" / "debezium")
SAMPLE_AS_OF = "2024-09-02T09:00:00+00:00"

with DAG(
    dag_id="cdc_snapshot_example",
    description="Rebuild a snapshot of the bundled Debezium sample and report its row counts",
    schedule=None,
    start_date=pendulum.datetime(2024, 9, 1, tz="UTC"),
    catchup=False,
    tags=["cdc", "example"],
    params={
        "input_path": Param(SAMPLE_INPUT, type="string", description="Landed Debezium JSON files"),
        "as_of": Param(SAMPLE_AS_OF, type="string", description="AS OF (ISO-8601 with offset); empty: data interval end"),
        "output_dir": Param("", type="string", description="Snapshot directory; empty: a fresh temporary directory"),
    },
) as dag:

    @task
    def choose_output(params: dict[str, Any]) -> str:
        """The snapshot directory: the param, or a new temporary one (created at run time, not parse time)."""
        import tempfile

        if params.get("output_dir"):
            return params["output_dir"]
        return str(Path(tempfile.mkdtemp(prefix="cdc-snapshot-example-")) / "snapshot")

    snapshot = CdcSnapshotOperator(
        task_id="rebuild_snapshot",
        source_format="debezium-json",
        input_paths="{{ params.input_path }}",
        output_path=choose_output(),
        as_of="{{ params.as_of }}",
        key_columns=["id"],
    )

    @task
    def report_row_counts(metrics: dict[str, Any]) -> dict[str, Any]:
        """Hand the row counts to whatever comes next (here: the log and this task's XCom)."""
        counts = {name: info["rows"] for name, info in metrics["tables"].items()}
        print(f"snapshot as of {metrics['as_of']}: {metrics['rows']} rows {counts}")
        return {"as_of": metrics["as_of"], "rows": metrics["rows"], "tables": counts}

    report_row_counts(snapshot.output)

"""Where the bundled sample landing is (``sample_data/``), for the example DAGs and their tests.

Only paths and arguments are computed here; nothing is read, so DAG files can import it at parse time.
"""

from __future__ import annotations

from pathlib import Path

SAMPLE_DATA_DIR = Path(__file__).resolve().parent
# Debezium JSON, hive-style dt=YYYY-MM-DD partitions; 2024-09-01 and 09-02 are finished (_SUCCESS).
SAMPLE_LANDING = str(SAMPLE_DATA_DIR / "debezium")
SAMPLE_EXPECTED = SAMPLE_DATA_DIR / "expected.json"
# The point-in-time example's defaults (sample_data/README.md documents the snapshot they give).
SAMPLE_AS_OF = "2024-09-02T09:00:00+00:00"
SAMPLE_TABLE = "default.customers"


def replay_arguments(output: str) -> list[str]:
    """The ``cdc-replay`` arguments that rebuild the sample as of ``SAMPLE_AS_OF`` into ``output``
    (what ``scripts/quickstart.sh`` runs; ``expected.json`` holds the snapshot they give)."""
    return [
        *("snapshot", "--format", "debezium-json", "--input", SAMPLE_LANDING),
        *("--as-of", SAMPLE_AS_OF, "--key", "id", "--output", output),
    ]

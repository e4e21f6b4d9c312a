"""What the job writes beside the snapshots, by name: the metrics file and the quarantine folder.

The operator reads ``METRICS_FILE`` back and pushes it to XCom; its keys are the job contract of
``docs/contract.md`` (``format``, ``as_of``, ``as_of_ms``, ``output``, ``rows``, ``events``, ``tables``).
"""

METRICS_FILE = "_cdc_metrics.json"
QUARANTINE_DIR = "_quarantine"
STATE_DIR = "_cdc_state"  # --keep-state: what a later --base run starts from
STATE_FILE = "state.json"
# events.read always equals the sum of the other event counts.
EVENT_COUNTS = ("read", "applied", "after_as_of", "ignored", "duplicates", "quarantined")

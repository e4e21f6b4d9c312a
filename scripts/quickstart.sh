#!/usr/bin/env bash
# Install everything, then rebuild a snapshot of the bundled Debezium sample and print its row counts.
#
# Usage: scripts/quickstart.sh [OUTPUT_DIR]     (default: a new temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install.sh

VENV="${VENV:-.venv}"
SAMPLE="airflow_cdc_provider/sample_data"
AS_OF="2024-09-02T09:00:00+00:00"
OUT="${1:-$(mktemp -d -t cdc-quickstart.XXXXXX)/snapshot}"

echo "==> cdc-replay snapshot of $SAMPLE/debezium as of $AS_OF into $OUT"
# The job prints the whole metrics object; it is also in $OUT/_cdc_metrics.json, summarised below.
"$VENV/bin/cdc-replay" snapshot --format debezium-json --input "$SAMPLE/debezium" \
    --as-of "$AS_OF" --key id --output "$OUT" >/dev/null

"$VENV/bin/python" - "$OUT/_cdc_metrics.json" "$SAMPLE/expected.json" <<'PY'
import json
import sys

metrics = json.load(open(sys.argv[1]))
expected = json.load(open(sys.argv[2]))
print(f"\nSnapshot as of {metrics['as_of']} in {metrics['output']}")
for name, info in sorted(metrics["tables"].items()):
    print(f"  {name:<28} {info['rows']:>5} rows")
print(f"  {'total':<28} {metrics['rows']:>5} rows")
print("  events:", ", ".join(f"{k} {v}" for k, v in metrics["events"].items()))
want = {name: info["rows"] for name, info in expected["tables"].items()}
got = {name: info["rows"] for name, info in metrics["tables"].items()}
if got == want:
    print("Row counts match the sample's documented expectation.")
else:
    sys.exit(f"Row counts differ from {sys.argv[2]}: expected {want}, got {got}")
PY

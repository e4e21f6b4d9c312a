"""spark-submit entry point: ``spark-submit .../spark_app.py --format ... --input ... --as-of ... --output ...``.

Takes the arguments of ``cdc-replay snapshot``, or ``history`` and its arguments (without
``--master``: spark-submit decides), so the same job runs unchanged in local mode, on a
standalone cluster, on YARN or on Kubernetes.
"""

from __future__ import annotations

import sys

from airflow_cdc_provider.jobs.cli import main

if __name__ == "__main__":
    # ``SnapshotArgs.to_argv``: a history's arguments start with the word, a snapshot's do not.
    argv = sys.argv[1:]
    sys.exit(main(argv if argv[:1] == ["history"] else ["snapshot", *argv], under_spark_submit=True))

"""spark-submit entry point: ``spark-submit .../spark_app.py --format ... --input ... --as-of ... --output ...``.

Takes the arguments of ``cdc-replay snapshot`` (without ``--master``: spark-submit decides), so the
same job runs unchanged in local mode, on a standalone cluster, on YARN or on Kubernetes.
"""

from __future__ import annotations

import sys

from airflow_cdc_provider.jobs.cli import main

if __name__ == "__main__":
    sys.exit(main(["snapshot", *sys.argv[1:]], under_spark_submit=True))

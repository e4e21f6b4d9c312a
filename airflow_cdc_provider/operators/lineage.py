"""OpenLineage for a snapshot or history run: the landed inputs, one output per table, its row count.

Imported only from ``BaseCdcReplayOperator.get_openlineage_facets_on_complete``, which the
OpenLineage provider calls when it is installed; nothing else in the package needs it.
Dataset names follow OpenLineage's naming spec: local files are namespace ``file`` with the
absolute path as name; object stores are ``scheme://bucket`` with the key as name (Hadoop's
``s3a``/``s3n`` are S3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow_cdc_provider.contract.paths import is_local_path, local_path

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage

_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}


def dataset_id(location: str) -> tuple[str, str]:
    """(namespace, name) of a path or URI, as OpenLineage names datasets."""
    if is_local_path(location):
        return "file", local_path(location)
    parts = urlsplit(location)
    scheme = _SCHEME_ALIASES.get(parts.scheme, parts.scheme)
    if scheme in ("hdfs", "webhdfs"):
        return f"{scheme}://{parts.netloc}", parts.path
    return f"{scheme}://{parts.netloc}", parts.path.lstrip("/")


def snapshot_lineage(input_paths: Sequence[str], written: Sequence[dict[str, Any]]) -> OperatorLineage:
    """Inputs = the landed paths the job read; outputs = each table's folder in every snapshot
    written (one per AS OF), with its rows."""
    from airflow.providers.common.compat.openlineage.facet import (
        InputDataset,
        OutputDataset,
        OutputStatisticsOutputDatasetFacet,
    )
    from airflow.providers.openlineage.extractors import OperatorLineage

    inputs = [InputDataset(*dataset_id(path)) for path in input_paths]
    outputs = [
        OutputDataset(
            *dataset_id(info["path"]),
            outputFacets={"outputStatistics": OutputStatisticsOutputDatasetFacet(rowCount=info["rows"])},
        )
        for metrics in written
        for _table, info in sorted(metrics["tables"].items())
    ]
    return OperatorLineage(inputs=inputs, outputs=outputs)

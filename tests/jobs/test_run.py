"""What a Spark Connect run says when the server's Python workers lack a decoder's modules."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.formats import get_decoder
from airflow_cdc_provider.jobs.run import _missing_worker_module

# How a failed mapInArrow over Connect reads: the worker's traceback inside the server's error.
_WORKER_FAILURE = (
    "[PYTHON_EXCEPTION] An exception was thrown from the Python worker. Traceback (most recent call last):\n"
    '  File "<string>", line 1, in <module>\n'
    "ModuleNotFoundError: No module named '{module}'"
)


@pytest.mark.parametrize("module", ["fastavro", "pyarrow", "airflow_cdc_provider"])
def test_a_module_a_python_decoder_needs_is_named(module):
    failure = RuntimeError(_WORKER_FAILURE.format(module=module))
    assert _missing_worker_module(failure, get_decoder("debezium-avro")) == module


def test_other_failures_are_not_taken_for_missing_modules():
    decoder = get_decoder("dts-avro")
    assert _missing_worker_module(RuntimeError("[FAILED_READ_FILE] cannot read"), decoder) is None
    assert _missing_worker_module(RuntimeError(_WORKER_FAILURE.format(module="numpy")), decoder) is None


def test_json_decoders_run_no_python_workers():
    assert get_decoder("debezium-json").worker_modules == ()
    assert get_decoder("dts-avro").worker_modules == ("fastavro", "pyarrow")

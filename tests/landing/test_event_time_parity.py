"""The sensor's Spark-free event time equals the decoder's, record by record, in every format.

The event time is computed twice: in Spark by each decoder (``event_ms`` of the canonical event)
and in plain Python by ``landing/event_time.py`` for the sensor. Here both read the same records:
a generated history per format (the test suite's encoders, every op), and every line-oriented
Debezium and Canal capture of the conformance and real-world corpora.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.conftest import SHARED, corpus_parametrize, decode_events

from airflow_cdc_provider.landing.event_time import extractor_for
from reference.histories import ENCODERS, before_images, random_history

# Corpus files by format: the decoder's name for what each capture holds.
CORPUS_PATTERNS = {
    "debezium-json": (
        "conformance/debezium/*.json",
        "conformance/flink/debezium-*.txt",
        "realworld/risingwave/debezium*.1",
        "realworld/flink-cdc/debezium-*.txt",
    ),
    "canal-json": (
        "conformance/flink/canal-*.txt",
        "realworld/risingwave/cannal_json.1",
        "realworld/flink-cdc/canal-*.txt",
    ),
}


def _line_oriented(path: Path) -> bool:
    """Every non-blank line is a JSON object (pretty-printed documents are not compared line by line)."""
    try:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        return bool(lines) and all(isinstance(json.loads(line), dict) for line in lines)
    except (UnicodeDecodeError, ValueError):
        return False


def _corpus(fmt: str) -> list[Path]:
    found = sorted({p for pattern in CORPUS_PATTERNS.get(fmt, ()) for p in SHARED.glob(pattern)})
    return [p for p in found if _line_oriented(p)]


def _assert_parity(spark, fmt: str, path: Path, **options) -> int:
    """Compare every row change's event time; return how many were compared."""
    lines = path.read_text(encoding="utf-8").splitlines()
    extract = extractor_for(fmt)
    compared, wrong = 0, []
    for event in decode_events(spark, fmt, path, **options):
        if event["kind"] != "change" or event["line"] is None:
            continue
        record = lines[event["line"] - 1]
        compared += 1
        if extract(record) != event["event_ms"]:
            wrong.append((event["line"], event["event_ms"], extract(record)))
    assert wrong == [], f"{path.name}: (line, decoder, sensor) disagree: {wrong[:5]}"
    return compared


@pytest.mark.parametrize("fmt", sorted(ENCODERS))
def test_generated_history(fmt, spark, tmp_path):
    encoder = ENCODERS[fmt]
    changes = random_history(random.Random(f"parity {fmt}"), keys=5)
    table = "parity"
    texts = [line.text for line in encoder.preamble(table)]
    for change, before in zip(changes, before_images(changes)):
        texts += [line.text for line in encoder.write(table, change, before)]
    path = tmp_path / f"{fmt}.json"
    path.write_text(
        "\n".join(t.decode() if isinstance(t, bytes) else t for t in texts) + "\n", encoding="utf-8"
    )
    key = {"key_columns": tuple(encoder.key)} if encoder.key else {}
    assert _assert_parity(spark, fmt, path, **key) >= len(changes) - 1


@pytest.mark.corpus
@corpus_parametrize(
    ("fmt", "path"),
    [(fmt, p) for fmt in sorted(CORPUS_PATTERNS) for p in _corpus(fmt)],
    ids=lambda value: value.name if isinstance(value, Path) else value,
)
def test_real_captures(fmt, path, spark):
    assert _assert_parity(spark, fmt, path, key_columns=("id",)) > 0

"""Fixtures of the operator tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.operators.landed_customers import ANNE, ANNE_MARIE, GEORGE, SALLY, lindorm


@pytest.fixture
def landed(tmp_path: Path) -> Path:
    """Two files; a key's events span both; a tombstone; one event after AS OF."""
    root = tmp_path / "landing"
    root.mkdir()
    (root / "a.jsonl").write_text(
        "\n".join([lindorm("c", 1, None, ANNE), lindorm("c", 2, None, SALLY), "null"]) + "\n",
        encoding="utf-8",
    )
    (root / "b.jsonl").write_text(
        "\n".join(
            [lindorm("u", 3, ANNE, ANNE_MARIE), lindorm("d", 4, SALLY, None), lindorm("c", 10, None, GEORGE)]
        )
        + "\n",
        encoding="utf-8",
    )
    return root

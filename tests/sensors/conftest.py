"""Fixtures of the sensor tests."""

from __future__ import annotations

from tests.triggers.unfinished_day import landing  # noqa: F401 - the fixture, found by its name

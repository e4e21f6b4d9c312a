"""Fixtures of the trigger tests."""

from __future__ import annotations

from tests.triggers.unfinished_day import landing  # noqa: F401 - the fixture, found by its name

"""The checks every job argument passes: no option look-alikes, no line breaks, no empty values."""

from __future__ import annotations

import os
from typing import Any

_FORBIDDEN_CHARS = ("\n", "\r", "\x00")


class CdcJobArgumentError(ValueError):
    """An operator argument cannot be passed to the job safely or is not valid."""


def _checked(name: str, value: Any) -> str:
    """Return ``value`` as a job argument, refusing what could be read as an option or split a line."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise CdcJobArgumentError(f"{name} must be a string, got {type(value).__name__}: {value!r}")
    if not value.strip():
        raise CdcJobArgumentError(f"{name} must not be empty")
    if value.startswith("-"):
        raise CdcJobArgumentError(
            f"{name} must not start with '-' (it would be read as an option): {value!r}"
        )
    if any(ch in value for ch in _FORBIDDEN_CHARS):
        raise CdcJobArgumentError(f"{name} must not contain line breaks or NUL characters: {value!r}")
    return value

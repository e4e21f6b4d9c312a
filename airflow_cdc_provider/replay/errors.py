"""The failures of a run that cannot produce a correct snapshot; each message says what to do.

Raised by the stages (``write`` for keys and quarantine, ``typed`` for a repeated column) and
caught by nobody in the replay: the job reports them (see docs/contract.md).
"""

from __future__ import annotations


class ReplayError(RuntimeError):
    """A run that cannot produce a correct snapshot; the message says what to do."""


class MissingKeyError(ReplayError):
    pass


class QuarantineError(ReplayError):
    """``--on-error fail`` and a record could not be decoded."""


class QuarantineLimitError(ReplayError):
    """More records were quarantined than ``--max-quarantined`` allows; the output was not replaced."""


class DuplicateColumnError(ReplayError):
    """A row's image names one column twice (a JSON object that repeats a key)."""

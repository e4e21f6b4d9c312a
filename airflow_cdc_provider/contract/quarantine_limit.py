"""``--max-quarantined``: how many undecodable records a run may set aside and still publish.

Quarantine keeps a run going past a few bad records. Many bad records mean something else (an
upstream format changed, a wrong ``--format``): a snapshot built from what is left would look
complete. So a run may be given a limit, a record count (``N``) or a share of the records it read
(``P%``); a run at the limit passes, one past it fails without replacing its output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from airflow_cdc_provider.contract.checks import CdcJobArgumentError

_COUNT = re.compile(r"[0-9]+")
_PERCENT = re.compile(r"([0-9]+(?:\.[0-9]+)?)%")
_TOP_REASONS = 3


@dataclass(frozen=True)
class QuarantineLimit:
    """A parsed ``--max-quarantined`` value: ``count`` records, or ``percent`` of the records read."""

    count: int | None = None
    percent: Decimal | None = None

    @classmethod
    def parse(cls, value: str | int) -> QuarantineLimit:
        """``100`` (or the int 100) or ``0.5%``; anything else is refused with the accepted forms."""
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 0:
                raise CdcJobArgumentError(_refusal(value))
            return cls(count=value)
        text = value.strip() if isinstance(value, str) else None
        if text is not None and _COUNT.fullmatch(text):
            return cls(count=int(text))
        share = _PERCENT.fullmatch(text) if text is not None else None
        if share is None:
            raise CdcJobArgumentError(_refusal(value))
        percent = Decimal(share.group(1))
        if percent > 100:
            raise CdcJobArgumentError(
                f"max_quarantined {value!r}: a share of the records read is at most 100%"
            )
        return cls(percent=percent)

    @property
    def text(self) -> str:
        """The value as the argument list carries it (``100``, ``0.5%``)."""
        if self.count is not None:
            return str(self.count)
        return f"{self.percent.normalize():f}%"

    def allowed(self, read: int) -> int:
        """The most records a run that read ``read`` records may quarantine and still pass."""
        if self.count is not None:
            return self.count
        return int(self.percent * read // 100)

    def exceeded(self, quarantined: int, read: int) -> bool:
        return quarantined > self.allowed(read)

    def failure(
        self, quarantined: int, read: int, reasons: dict[str, int], what: str, kept_at: str, output: str
    ) -> str:
        """The error of a run past the limit: the count, the limit, the top reasons, where the
        quarantined records are, and that ``output`` was not replaced (``what``: the run, e.g.
        ``the snapshot as of ...``)."""
        top = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))[:_TOP_REASONS]
        listed = ", ".join(f"{reason} ({n})" for reason, n in top)
        return (
            f"too many quarantined records for {what}: {quarantined} of the {read} records read, past "
            f"--max-quarantined {self.text} (at most {self.allowed(read)}); top reasons: {listed}. The "
            f"quarantined records are in {kept_at}; {output} is left as it was."
        )


def _refusal(value: object) -> str:
    return (
        f"max_quarantined must be a record count N or a share P% of the records read "
        f"(e.g. 100 or 0.5%), got {value!r}"
    )

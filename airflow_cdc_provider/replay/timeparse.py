"""AS OF arguments: ISO-8601 with an offset, or epoch milliseconds."""

from __future__ import annotations

from datetime import datetime, timezone


class AsOfError(ValueError):
    pass


def parse_as_of(value: str | int) -> int:
    """Epoch milliseconds of an AS OF argument; a time without an offset is refused (ambiguous)."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise AsOfError(
            f"--as-of {value!r} is neither ISO-8601 with an offset (2024-09-02T06:40:00+00:00, ...Z) nor epoch milliseconds"
        ) from None
    if parsed.tzinfo is None:
        raise AsOfError(f"--as-of {value!r} has no UTC offset; add one, e.g. {text}+00:00 or {text}Z")
    return int(parsed.timestamp() * 1000)


def format_as_of(as_of_ms: int) -> str:
    moment = datetime.fromtimestamp(as_of_ms / 1000, tz=timezone.utc)
    spec = "milliseconds" if as_of_ms % 1000 else "seconds"
    return moment.isoformat(timespec=spec)

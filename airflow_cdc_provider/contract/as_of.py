"""AS OF: ISO-8601 with an offset, or epoch milliseconds; parsed, normalised and formatted here only.

The snapshot operator and the landed-files sensor must agree on the instant, or the sensor would
wait for one thing and the snapshot rebuild another; both resolve a task's AS OF here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from airflow_cdc_provider.contract.checks import CdcJobArgumentError, _checked


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


def normalise_as_of(value: str | int | datetime) -> str:
    """AS OF as the job takes it: ISO-8601 with a UTC offset, or epoch milliseconds."""
    if isinstance(value, bool):
        raise CdcJobArgumentError(f"as_of must be a timestamp, got {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise CdcJobArgumentError(f"as_of must be timezone-aware, got naive datetime {value!r}")
        return value.isoformat()
    text = _checked("as_of", value).strip()
    if text.isdigit():
        return text
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise CdcJobArgumentError(
            f"as_of must be ISO-8601 with an offset (2024-09-02T06:40:00+00:00 or ...Z) or epoch "
            f"milliseconds, got {text!r}"
        ) from None
    if parsed.tzinfo is None:
        raise CdcJobArgumentError(
            f"as_of must carry a UTC offset (e.g. {text}+00:00 or {text}Z), got {text!r}"
        )
    return text


def normalise_as_ofs(value: str | int | datetime | Iterable[str | int | datetime]) -> tuple[str, ...]:
    """One AS OF or several (a list), each as ``normalise_as_of`` gives it."""
    values = [value] if isinstance(value, (str, int, datetime)) else list(value)
    if not values:
        raise CdcJobArgumentError("as_of must name at least one instant")
    return tuple(normalise_as_of(v) for v in values)


# ``{as_of:FORMAT}`` in an output path: the AS OF in strftime FORMAT, in UTC.
_AS_OF_FIELD = re.compile(r"\{as_of:([^{}]+)\}")


def snapshot_folder(output: str, as_of_ms: int) -> str:
    """``output`` with every ``{as_of:FORMAT}`` field filled in with ``as_of_ms``."""
    moment = datetime.fromtimestamp(as_of_ms / 1000, tz=timezone.utc)
    return _AS_OF_FIELD.sub(lambda m: moment.strftime(m.group(1)), output)


def snapshot_folders(output: str, as_ofs: Sequence[str]) -> list[str]:
    """The folder each AS OF's snapshot is written to, in the order of ``as_ofs``.

    Several AS OFs need an ``{as_of:FORMAT}`` field in ``output``, and no two of them may give the
    same folder: one would silently replace the other.
    """
    if "{as_of" in _AS_OF_FIELD.sub("", output):
        raise CdcJobArgumentError(
            f"output_path {output!r}: write the AS OF field as {{as_of:FORMAT}} with a strftime "
            f"FORMAT, e.g. {{as_of:%Y-%m-%d}}"
        )
    if len(as_ofs) > 1 and not _AS_OF_FIELD.search(output):
        raise CdcJobArgumentError(
            f"{len(as_ofs)} AS OFs need one output folder each: put {{as_of:FORMAT}} in output_path "
            f"{output!r}, e.g. {output.rstrip('/')}/dt={{as_of:%Y-%m-%d}}"
        )
    folders: dict[str, str] = {}
    for as_of in as_ofs:
        try:
            folder = snapshot_folder(output, parse_as_of(as_of))
        except AsOfError as exc:
            raise CdcJobArgumentError(str(exc)) from None
        if folder in folders:
            raise CdcJobArgumentError(
                f"AS OFs {folders[folder]} and {as_of} both write {folder}; give them distinct folders "
                f"with a finer {{as_of:FORMAT}} in output_path (e.g. %Y-%m-%dT%H%M)"
            )
        folders[folder] = as_of
    return list(folders)


def default_as_of(context: Mapping[str, Any]) -> datetime:
    """The run's data interval end; runs without a data interval fall back to when the run was due."""
    for candidate in (context.get("data_interval_end"), context.get("logical_date")):
        if candidate is not None:
            return candidate
    return context["dag_run"].run_after


def resolve_as_of(value: Any, context: Mapping[str, Any]) -> str:
    """AS OF as the job takes it; ``None`` or an empty rendered template means the default."""
    return normalise_as_of(value if value not in (None, "") else default_as_of(context))


def resolve_as_of_ms(value: Any, context: Mapping[str, Any]) -> int:
    return parse_as_of(resolve_as_of(value, context))

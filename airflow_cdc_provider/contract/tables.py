"""A table's identity and the one folder name each table is written to.

A table is identified by its parts as the format gives them (catalog or database, schema, table;
Lindorm's namespace and table; MongoDB's database and collection). The replay carries it as one
*qualified name*: the parts joined by ``.``, where a part that holds a ``.`` or a ``"``, or is
empty, is written as a SQL quoted identifier (``"a.b"``; a quote inside is doubled). So
``inventory.customers`` reads as it always did, and db ``x`` table ``a.b`` (``x."a.b"``) never
meets db ``x.a`` table ``b`` (``"x.a".b``).

``table_folder`` maps a qualified name to the folder its snapshot is written to. Every writer and
reader of a table folder goes through it; see docs/contract.md, "Table folders", for the rule.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")

QUOTE = '"'
SEPARATOR = "."

# A folder name is kept within this many bytes (the limit of ext4, XFS, HDFS's default, ADLS, ...).
MAX_FOLDER_BYTES = 255
# A shortened folder keeps this many bytes of its readable name, then ``~`` and a hash of the name.
_KEPT_BYTES = 200
_HASH_CHARS = 16

# Characters escaped as %XX wherever they stand: path separators, the escape character itself, what
# Hive escapes in partition folders (Spark does the same), what Hadoop globs read, what Windows,
# ADLS and S3 refuse or advise against, and ``~`` (it introduces a shortened name's hash).
_ESCAPED = frozenset("\"#%'*/:<=>?[\\]^`{|}~")
# A name may not start with these (Spark and Hadoop skip such files as hidden or temporary) ...
_NOT_FIRST = frozenset("._")
# ... nor end with these (Windows and ADLS strip them).
_NOT_LAST = frozenset(". ")


class TableNameError(ValueError):
    """A table name a user wrote that cannot be read, or that names more than one table."""


def needs_quotes(part: str) -> bool:
    return part == "" or SEPARATOR in part or QUOTE in part


def quote_part(part: str) -> str:
    """A part as it stands in a qualified name: as it is, or quoted when it would be ambiguous."""
    if not needs_quotes(part):
        return part
    return QUOTE + part.replace(QUOTE, QUOTE * 2) + QUOTE


def qualify(parts: Iterable[str | None]) -> str:
    """The qualified name of a table's parts (absent parts, None, are left out)."""
    return SEPARATOR.join(quote_part(p) for p in parts if p is not None)


def split_qualified(name: str) -> tuple[str, ...]:
    """The parts of a qualified name (``qualify``'s inverse); unquoted parts are split at every dot."""
    parts: list[str] = []
    i, n = 0, len(name)
    while True:
        if i < n and name[i] == QUOTE:
            part, i = _quoted(name, i)
            if i < n and name[i] != SEPARATOR:
                raise TableNameError(
                    f"table name {name!r}: a quoted part must be followed by '.' or the end, "
                    f"found {name[i]!r} at character {i + 1}"
                )
        else:
            end = name.find(SEPARATOR, i)
            end = n if end < 0 else end
            part = name[i:end]
            if QUOTE in part:
                raise TableNameError(
                    f"table name {name!r}: a '\"' may only open a quoted part (write a part holding "
                    f'\'"\' as "..." with the quote doubled)'
                )
            i = end
        parts.append(part)
        if i >= n:
            return tuple(parts)
        i += 1  # the separator


def _quoted(name: str, start: int) -> tuple[str, int]:
    """The quoted part opening at ``start`` and the index just after its closing quote."""
    out: list[str] = []
    i = start + 1
    while i < len(name):
        if name[i] == QUOTE:
            if name[i + 1 : i + 2] == QUOTE:
                out.append(QUOTE)
                i += 2
                continue
            return "".join(out), i + 1
        out.append(name[i])
        i += 1
    raise TableNameError(
        f"table name {name!r}: the quoted part opening at character {start + 1} is not closed"
    )


def dotted(parts: Sequence[str]) -> str:
    """The parts joined by dots with no quoting: the form users often write, not always unique."""
    return SEPARATOR.join(parts)


def table_folder(qualified: str) -> str:
    """The folder name of a table's snapshot inside the output (and its staging folder).

    Readable names stay as they are (``inventory.customers``). Otherwise: each character in
    ``_ESCAPED``, each control character and a leading ``.``/``_`` or trailing ``.``/space is written
    as ``%XX`` (its UTF-8 bytes, as Hive escapes partition values); other characters, non-ASCII
    included, stay. A name over 255 bytes keeps its first 200 bytes and ends in ``~`` and 16 hex
    digits of the SHA-256 of the qualified name. So the name never holds a path separator, never
    is ``.`` or ``..``, is never hidden, and two tables never share a folder; ``folder_table``
    reverses every name that was not shortened (the metrics keep the parts for all).
    """
    chars = [_escape(c) if c in _ESCAPED or _is_control(c) else c for c in qualified]
    if not chars:
        return "%22%22"  # the empty name, as its quoted form
    if qualified[0] in _NOT_FIRST:
        chars[0] = _escape(qualified[0])
    if qualified[-1] in _NOT_LAST:
        chars[-1] = _escape(qualified[-1])
    folder = "".join(chars)
    if len(folder.encode("utf-8")) <= MAX_FOLDER_BYTES:
        return folder
    kept, size = [], 0
    for piece in chars:  # never cut an escape or a character in two
        size += len(piece.encode("utf-8"))
        if size > _KEPT_BYTES:
            break
        kept.append(piece)
    digest = hashlib.sha256(qualified.encode("utf-8")).hexdigest()[:_HASH_CHARS]
    return "".join(kept) + "~" + digest


def folder_table(folder: str) -> str | None:
    """The qualified name a ``table_folder`` name stands for; None for a shortened name."""
    if "~" in folder:
        return None
    raw = bytearray()
    i = 0
    while i < len(folder):
        if folder[i] == "%":
            raw += bytes.fromhex(folder[i + 1 : i + 3])
            i += 3
        else:
            raw += folder[i].encode("utf-8")
            i += 1
    return raw.decode("utf-8")


def _escape(char: str) -> str:
    return "".join(f"%{b:02X}" for b in char.encode("utf-8"))


def _is_control(char: str) -> bool:
    code = ord(char)
    return code < 0x20 or 0x7F <= code <= 0x9F or char in "\u2028\u2029"


# Names with more dots than this are matched only as their own parts: the readings of a dotted
# name double with each dot.
_MAX_READINGS_DOTS = 8


def name_readings(name: str) -> tuple[tuple[str, ...], ...]:
    """The part sequences a name a user wrote (``--table``, ``--key TABLE=``, ``--columns TABLE=``) can mean.

    A name with a quote is read exactly (``x."a.b"``). A plain dotted name means its dot-split
    parts, or any grouping of them into parts that hold dots: ``x.a.b`` can be (x, a, b),
    (x, "a.b"), ("x.a", b) or ("x.a.b").
    """
    if QUOTE in name:
        return (split_qualified(name),)
    pieces = name.split(SEPARATOR)
    if len(pieces) - 1 > _MAX_READINGS_DOTS:
        return (tuple(pieces),)
    readings = []
    for cuts in itertools.product((True, False), repeat=len(pieces) - 1):
        parts, current = [], pieces[0]
        for cut, piece in zip(cuts, pieces[1:]):
            if cut:
                parts.append(current)
                current = piece
            else:
                current = current + SEPARATOR + piece
        parts.append(current)
        readings.append(tuple(parts))
    return tuple(readings)


def name_forms(name: str) -> tuple[str, ...]:
    """The qualified names whose tail a table's qualified name must be to match ``name``."""
    return tuple(dict.fromkeys(qualify(parts) for parts in name_readings(name)))


def matching_reading(name: str, table: str) -> tuple[str, ...] | None:
    """The parts of ``table``'s tail that ``name`` names, or None when it names another table.

    A name matches a table when it is the table's whole qualified name or its last parts
    (``customers`` matches ``inventory.customers``), read as any of ``name_readings``.
    """
    parts = split_qualified(table)
    for reading in name_readings(name):
        if len(reading) <= len(parts) and parts[len(parts) - len(reading) :] == reading:
            return reading
    return None


def check_unambiguous(names: Iterable[str], tables: Iterable[str], option: str) -> None:
    """Refuse a dotted name that matched tables through different readings of its dots.

    ``--table x.a.b`` where the landing holds db ``x`` table ``a.b`` and db ``x.a`` table ``b``
    would silently pick both; the error shows the parts each could mean and how to write them.
    """
    tables = sorted(set(tables))
    for name in names:
        readings: dict[tuple[str, ...], list[str]] = {}
        for table in tables:
            reading = matching_reading(name, table)
            if reading is not None:
                readings.setdefault(reading, []).append(table)
        if len(readings) > 1:
            meant = "; ".join(
                f"{list(reading)} (write {qualify(reading)}: {', '.join(found)})"
                for reading, found in sorted(readings.items())
            )
            raise TableNameError(
                f"{option} {name!r} is ambiguous: it names tables whose parts differ: {meant}. "
                f"Quote the part that holds a dot, as shown."
            )


def lookup(entries: Mapping[str, T], table: str | None) -> T | None:
    """The entry whose name names ``table``: its exact name first, else the one naming most parts.

    The rule ``--key TABLE=`` and ``--columns TABLE=`` follow on the driver.
    """
    if table is None:
        return None
    if table in entries:
        return entries[table]
    found = [
        (len(reading), name) for name in entries if (reading := matching_reading(name, table)) is not None
    ]
    return entries[max(found)[1]] if found else None

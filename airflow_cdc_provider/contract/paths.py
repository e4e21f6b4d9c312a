"""Path rules the job and the sensor share: what is not data, what is compressed, what is local."""

from __future__ import annotations

from urllib.parse import urlsplit

# _SUCCESS, _temporary/, .crc files and the like are not data (Spark's own rule).
HIDDEN_PREFIXES = ("_", ".")
# Compressed landed files the job decompresses (Hadoop's codecs, chosen by suffix).
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".deflate", ".zst", ".lz4", ".snappy")
# Compressed files the job has no codec for. Read as text they would be garbage, so the job and the
# sensor both refuse them by name.
UNREADABLE_COMPRESSED_SUFFIXES = (".xz", ".lzma", ".zip", ".7z", ".br")
# Schemes that name this machine's own file system.
_LOCAL_SCHEMES = ("", "file", "local")


def is_hidden(name: str) -> bool:
    """A file or folder name Spark and this product skip at any depth."""
    return name.startswith(HIDDEN_PREFIXES)


def unreadable_compression(path: str) -> str | None:
    """Why a landed file cannot be read (a compression the job has no codec for), or None."""
    suffix = next((s for s in UNREADABLE_COMPRESSED_SUFFIXES if path.lower().endswith(s)), None)
    if suffix is None:
        return None
    readable = ", ".join(COMPRESSED_SUFFIXES)
    return (
        f"cannot read {path}: {suffix} compression has no codec in the replay job; decompress the file "
        f"or land it with one of {readable} (or uncompressed)"
    )


def is_local_path(location: str) -> bool:
    """A plain path, a ``file:``/``local:`` URI or a Windows drive path: the local file system."""
    scheme = urlsplit(location).scheme
    return scheme in _LOCAL_SCHEMES or (len(scheme) == 1 and location[1:2] == ":")


def local_path(location: str) -> str:
    """The file-system path of a local location (``file:///x`` -> ``/x``)."""
    return urlsplit(location).path if urlsplit(location).scheme in ("file", "local") else location

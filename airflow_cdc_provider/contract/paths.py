"""Path rules the job and the sensor share: what is not data, what is compressed, what is local."""

from __future__ import annotations

from urllib.parse import urlsplit

# _SUCCESS, _temporary/, .crc files and the like are not data (Spark's own rule).
HIDDEN_PREFIXES = ("_", ".")
# Suffixes of compressed landed files. The job and the sensor both read exactly these, and refuse
# any other compressed file by name rather than read its bytes as text.
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".deflate", ".zst", ".lz4", ".snappy", ".xz", ".lzma")
# Schemes that name this machine's own file system.
_LOCAL_SCHEMES = ("", "file", "local")


def is_hidden(name: str) -> bool:
    """A file or folder name Spark and this product skip at any depth."""
    return name.startswith(HIDDEN_PREFIXES)


def is_local_path(location: str) -> bool:
    """A plain path, a ``file:``/``local:`` URI or a Windows drive path: the local file system."""
    scheme = urlsplit(location).scheme
    return scheme in _LOCAL_SCHEMES or (len(scheme) == 1 and location[1:2] == ":")


def local_path(location: str) -> str:
    """The file-system path of a local location (``file:///x`` -> ``/x``)."""
    return urlsplit(location).path if urlsplit(location).scheme in ("file", "local") else location

"""Checksums (spec "Integrity"): CRC-32C by default, SHA-256 optional.

The ``crc32c`` package takes any buffer (memoryview, NumPy array) without a
copy and releases the GIL, so a writer can checksum in a second thread while
the main thread writes.

>>> crc32c_hex(b"123456789")
'e3069283'
>>> crc32c_of(b"1234") == crc32c_of(b"34", crc32c_of(b"12"))
True
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Final

import crc32c as _crc32c

CRC32C_HEX: Final = re.compile(r"^[0-9a-f]{8}$")
SHA256_HEX: Final = re.compile(r"^[0-9a-f]{64}$")
#: Bytes hashed per call when streaming: big enough to amortise the call,
#: small enough to stay in L2 cache between checksumming and copying.
CHUNK_BYTES: Final = 1 << 20


def crc32c_of(data: object, value: int = 0) -> int:
    """CRC-32C of a buffer, optionally continuing from a previous value."""
    return int(_crc32c.crc32c(data, value))  # type: ignore[arg-type]  # any buffer-protocol object


def crc32c_hex(data: object) -> str:
    """CRC-32C of a buffer as 8 lowercase hex digits."""
    return format(crc32c_of(data), "08x")


def format_crc32c(value: int) -> str:
    """Render a CRC-32C value the way the manifest stores it."""
    return format(value, "08x")


def new_sha256() -> hashlib._Hash:
    """A SHA-256 hasher (optional content-address digest)."""
    return hashlib.sha256()


def file_entry(size: int, crc: int, digest: hashlib._Hash | None = None) -> dict[str, Any]:
    """The manifest's record of one file: size, CRC-32C and, when computed, SHA-256.

    >>> file_entry(3, crc32c_of(b"abc"))
    {'size': 3, 'crc32c': '364b3fb7'}
    """
    entry: dict[str, Any] = {"size": size, "crc32c": format_crc32c(crc)}
    if digest is not None:
        entry["sha256"] = digest.hexdigest()
    return entry

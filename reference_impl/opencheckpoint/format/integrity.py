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
import importlib.machinery
import importlib.util
import re
import sys
from collections.abc import Callable
from typing import Any, Final

CRC32C_HEX: Final = re.compile(r"^[0-9a-f]{8}$")
SHA256_HEX: Final = re.compile(r"^[0-9a-f]{64}$")
#: Bytes hashed per call when streaming: big enough to amortise the call,
#: small enough to stay in L2 cache between checksumming and copying.
CHUNK_BYTES: Final = 1 << 20


def _load_crc32c() -> Callable[..., int]:
    """The ``crc32c`` package's C function ``crc32c(data, value=0)``, loaded without the package's ``__init__``.

    That ``__init__`` imports :mod:`importlib.metadata` only to set ``__version__``: 75 ms of CPU, a
    quarter of the command line's start-up budget (docs/benchmarks.md, "Start-up"). The function is
    the extension module ``crc32c._crc32c``'s, which the package re-exports; it is loaded from the
    package's folder and registered under its own name, so a later ``import crc32c`` reuses it.
    Anything unexpected (another layout of the package) falls back to the plain import.
    """
    name = "crc32c._crc32c"
    module = sys.modules.get(name)
    if module is None:
        package = importlib.util.find_spec("crc32c")  # finds the package without running its __init__
        folders = (package.submodule_search_locations or []) if package is not None else []
        loader = (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES)
        spec = importlib.machinery.FileFinder(folders[0], loader).find_spec(name) if folders else None
        if spec is None or spec.loader is None:
            import crc32c

            return crc32c.crc32c
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module.crc32c  # type: ignore[no-any-return]


#: ``crc32c(data, value=0)``: CRC-32C of any buffer (bytes, memoryview, NumPy array), continuing
#: from ``value``; the C function of the ``crc32c`` package (it releases the GIL).
crc32c: Final = _load_crc32c()


def crc32c_of(data: object, value: int = 0) -> int:
    """CRC-32C of a buffer, optionally continuing from a previous value."""
    return int(crc32c(data, value))


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

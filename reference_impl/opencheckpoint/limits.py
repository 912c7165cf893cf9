"""Limits every reader enforces before trusting a number read from a file (spec "Limits").

They are module constants, not knobs: a checkpoint is portable only if every
conforming reader accepts it, so the limits are part of the format.
"""

from __future__ import annotations

from typing import Final

MANIFEST_MAX_BYTES: Final = 64 * 1024 * 1024
JSON_MAX_DEPTH: Final = 64
#: I-JSON: integers outside +-(2**53 - 1) are not interoperable.
JSON_MAX_SAFE_INT: Final = 2**53 - 1
MAX_COMPONENTS: Final = 100_000
MAX_FILES: Final = 1_000_000
PATH_MAX_BYTES: Final = 1024
SEGMENT_MAX_CHARS: Final = 128
TREE_MAX_BYTES: Final = 1024 * 1024 * 1024
TREE_MAX_DEPTH: Final = 128
TREE_MAX_NODES: Final = 10_000_000
TREE_MAX_STR_BYTES: Final = 256 * 1024 * 1024
ARRAY_MAX_NDIM: Final = 64
#: Byte lengths and offsets are signed 64-bit on every platform we care about.
ARRAY_MAX_NBYTES: Final = 2**63 - 1
ARCHIVE_MAX_MEMBERS: Final = MAX_FILES + 1
#: Every array starts at a multiple of this (and so does every archive member's data).
ALIGNMENT: Final = 64

"""Limits every reader enforces before trusting a number read from a file (spec §14 "Limits").

They are module constants, not knobs: a checkpoint is portable only if every
conforming reader accepts it, so the limits are part of the format. Each
constant names the requirement that states it.

>>> TREE_MAX_DEPTH, JSON_MAX_DEPTH
(128, 64)
"""

from __future__ import annotations

from typing import Final

#: R-LIM-1
MANIFEST_MAX_BYTES: Final = 64 * 1024 * 1024
#: R-LIM-2
VALUE_JSON_MAX_BYTES: Final = 64 * 1024 * 1024
#: R-LIM-3 (each object or array counts 1; the top-level value is at depth 1)
JSON_MAX_DEPTH: Final = 64
#: R-LIM-4: integers outside +-(2**53 - 1) are not interoperable (I-JSON).
JSON_MAX_SAFE_INT: Final = 2**53 - 1
#: R-LIM-5
MAX_COMPONENTS: Final = 100_000
#: R-LIM-6
MAX_FILES: Final = 1_000_000
#: R-LIM-7 (bytes)
PATH_MAX_BYTES: Final = 1024
#: R-LIM-8 (bytes)
SEGMENT_MAX_BYTES: Final = 128
#: R-LIM-9
TREE_MAX_BYTES: Final = 1024 * 1024 * 1024
#: R-LIM-10
TREE_MAX_DEPTH: Final = 128
#: R-LIM-11
TREE_MAX_NODES: Final = 10_000_000
#: R-LIM-12
TREE_MAX_STR_BYTES: Final = 256 * 1024 * 1024
#: R-LIM-13
ARRAY_MAX_NDIM: Final = 64
#: R-LIM-14 (a dimension may be at most this)
ARRAY_MAX_DIM: Final = 2**63 - 1
#: R-LIM-17
ARCHIVE_MAX_MEMBERS: Final = MAX_FILES + 1
#: R-LIM-18: bytes of a big int's two's complement magnitude (tag 3). 8,192 bits, at most 2,467 decimal
#: digits: every reader can print one (Python refuses int-to-str conversions beyond 4,300 digits by default).
TREE_MAX_BIG_INT_BYTES: Final = 1024
#: R-LIM-20 (format version 2): shard records of one sharded array (tag 10), so coverage checks stay bounded.
SHARDS_MAX_PER_ARRAY: Final = 65_536
#: Every array starts at a multiple of this (and so does every archive member's data).
ALIGNMENT: Final = 64

"""Shared constants and helpers of the independent reader (spec §4, §5, §14)."""
from __future__ import annotations

import os
import re

from errors import CheckpointError

MANIFEST = "manifest.json"
MAX_MANIFEST = 64 * 1024 * 1024
MAX_VALUE_JSON = 64 * 1024 * 1024
MAX_TREE = 1024 * 1024 * 1024
MAX_COMPONENTS = 100_000
MAX_FILE_ENTRIES = 1_000_000
MAX_PATH = 1024
MAX_SEGMENT = 128
MAX_INT53 = 2**53 - 1

SEGMENT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
NAME_RE = SEGMENT_RE  # R-CMP-1 uses the same grammar
CHECKPOINT_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
CREATED_AT_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,9})?Z")
KIND_RE = re.compile(r"[a-z][a-z0-9-]*(\.[a-z0-9-]+)+/[a-z0-9_.-]+")
EXT_NAME_RE = re.compile(r"[a-z][a-z0-9-]*(\.[a-z0-9-]+)+")
HEX8_RE = re.compile(r"[0-9a-f]{8}")
HEX64_RE = re.compile(r"[0-9a-f]{64}")
SHARD_FILE_RE = re.compile(r"shards/rank-[0-9]{5,}\.bin")  # R-SHD-3 (used with fullmatch)
SUFFIX_RE = re.compile(rb'"manifest_crc32c": "([0-9a-f]{8})"\n}\n\Z')

TOP_MEMBERS = ("format", "format_version", "checkpoint_id", "created_at", "producer",
               "metadata", "extensions", "components", "manifest_crc32c")
COMPONENT_MEMBERS = ("kind", "kind_version", "path", "files", "hints", "metadata")
BUILTIN_KINDS = {"tree": 1, "json": 1, "files": 1}  # highest kind_version implemented in format version 1
# format version 2: sharded arrays (spec/opencheckpoint-v2.md). OC_READER_MAX_FORMAT_VERSION=1 (the run-v1
# wrapper) makes this a version 1 reader: it rejects format_version 2 with UnsupportedVersion (R-VER-3) and
# declares no opt-in capability (§S.8), as a reader written from the 1.0 text alone would.
MAX_FORMAT_VERSION = 1 if os.environ.get("OC_READER_MAX_FORMAT_VERSION") == "1" else 2


def max_kind_version(kind: str, fv: int) -> int:
    """Highest kind_version of a built-in kind in a checkpoint of format version fv (S.3, R-SHD-2)."""
    if kind == "tree" and fv >= 2:
        return 2
    return BUILTIN_KINDS[kind]


def E(cls, file, field, msg, req=""):
    return CheckpointError(cls, file, field, msg, req)


def is_int(v):
    return type(v) is int


def esc(k: str) -> str:
    return k.replace("~", "~0").replace("/", "~1")


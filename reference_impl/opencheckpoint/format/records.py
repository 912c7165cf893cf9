"""The typed view of a verified manifest: plain frozen records, one per document of the format.

:func:`opencheckpoint.format.manifest.parse_manifest` builds them after every
rule of steps 7 and 8 has been checked by its function in the rule tables, so
they check nothing again. They have the members of the pydantic models of
:mod:`.models` (the JSON Schemas' source), member for member, and are plain
dataclasses so that reading a checkpoint does not import pydantic (its model
machinery was a fifth of ``opencheckpoint inspect``'s CPU time:
docs/benchmarks.md, "Start-up"). ``tests/spec/test_records.py`` checks that
records and models name the same members. An optional member absent from the
file is ``None``.

>>> entry = FileEntry(size=3, crc32c="0a1b2c3d")
>>> entry.size, entry.sha256
(3, None)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FileEntry:
    """Size and checksums of one file; the checksums cover every byte of it."""

    size: int
    crc32c: str
    sha256: str | None = None


@dataclass(frozen=True)
class ComponentRecord:
    """One named component: its kind, where its files are, and their inventory."""

    kind: str
    kind_version: int
    path: str
    files: dict[str, FileEntry]
    hints: dict[str, str] | None = None
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True)
class Extension:
    """A declared extension; readers that do not understand a must_understand one reject the file."""

    version: int
    must_understand: bool
    data: Any


@dataclass(frozen=True)
class Producer:
    """Which software wrote the checkpoint (informational)."""

    name: str
    version: str
    environment: dict[str, str] | None = None


@dataclass(frozen=True)
class Manifest:
    """The root document ``manifest.json`` (of any format version: ``format_version`` says which)."""

    format: str
    format_version: int
    checkpoint_id: str
    created_at: str
    producer: Producer
    metadata: dict[str, Any]
    extensions: dict[str, Extension]
    components: dict[str, ComponentRecord]
    manifest_crc32c: str

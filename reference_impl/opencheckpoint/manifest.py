"""Reading and writing ``manifest.json`` (spec "manifest.json" and "Manifest checksum").

The manifest verifies itself: it ends with the fixed 32-byte suffix
``"manifest_crc32c": "hhhhhhhh"\\n}\\n`` and ``hhhhhhhh`` is the CRC-32C of every
byte before that suffix. Validation runs in a fixed order so that every
implementation reports the same error class for the same file:

1. size limit; 2. UTF-8 + I-JSON; 3. ``format`` and ``format_version``
(migrating older versions); 4. the manifest checksum; 5. the schema;
6. ``must_understand`` extensions; 7. paths, counts and kind file sets.

>>> body = {"format": "opencheckpoint", "format_version": 1, "checkpoint_id": "x",
...         "created_at": "2026-01-01T00:00:00Z", "producer": {"name": "doc", "version": "1"},
...         "metadata": {}, "extensions": {}, "components": {}}
>>> data = serialize_manifest(body)
>>> data[-32:]
b'"manifest_crc32c": "2eb47535"\\n}\\n'
>>> parse_manifest(data).manifest.checkpoint_id
'x'
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from .errors import (
    CheckpointError,
    IntegrityError,
    LimitExceeded,
    ManifestError,
    NotACheckpoint,
    UnsupportedExtension,
)
from .integrity import crc32c_of, format_crc32c
from .limits import MANIFEST_MAX_BYTES, MAX_COMPONENTS, MAX_FILES
from .migrations import DEFAULT_CHAIN, MigrationChainRunner
from .models import FORMAT_NAME, Manifest
from .paths import check_no_conflicts, check_relative_path, check_segment

MANIFEST_NAME: Final = "manifest.json"
SUFFIX_LENGTH: Final = 32
_SUFFIX: Final = re.compile(rb'"manifest_crc32c": "([0-9a-f]{8})"\n\}\n\Z')
_BEFORE_SUFFIX: Final = re.compile(rb",[ \t\r\n]*\Z")

#: Files each built-in kind (version 1) has, relative to the component path.
KIND_FILES: Final[dict[str, frozenset[str] | None]] = {
    "tree": frozenset({"tree.msgpack", "data.bin"}),
    "json": frozenset({"value.json"}),
    "files": None,  # any files
}
KIND_VERSIONS: Final = {"tree": 1, "json": 1, "files": 1}


@dataclass(frozen=True)
class ParsedManifest:
    """A verified manifest, its raw JSON, and the version it was written in."""

    manifest: Manifest
    raw: dict[str, Any]
    written_version: int
    size: int

    def file_paths(self) -> dict[str, tuple[str, str]]:
        """Full path -> (component name, name relative to the component path)."""
        out: dict[str, tuple[str, str]] = {}
        for name, record in self.manifest.components.items():
            for rel in record.files:
                out[f"{record.path}/{rel}"] = (name, rel)
        return out


def serialize_manifest(body: Mapping[str, Any]) -> bytes:
    """Serialize a manifest (without ``manifest_crc32c``) and append the checksum suffix."""
    import json

    if "manifest_crc32c" in body:
        raise ValueError("serialize_manifest adds manifest_crc32c itself")
    text = json.dumps(body, indent=2, ensure_ascii=False, allow_nan=False)
    if not text.endswith("\n}"):
        raise ValueError("manifest body must be a non-empty JSON object")
    prefix = (text[: -len("\n}")] + ",\n  ").encode("utf-8")
    crc = format_crc32c(crc32c_of(prefix))
    return prefix + f'"manifest_crc32c": "{crc}"\n}}\n'.encode("ascii")


def verify_manifest_checksum(data: bytes) -> None:
    """Check the 32-byte suffix and the CRC-32C of everything before it."""
    match = _SUFFIX.search(data[-SUFFIX_LENGTH:]) if len(data) >= SUFFIX_LENGTH else None
    if match is None or not _BEFORE_SUFFIX.search(data[: len(data) - SUFFIX_LENGTH][-4096:]):
        raise IntegrityError(
            'manifest does not end with the checksum suffix \'"manifest_crc32c": "<8 hex>"\\n}\\n\'',
            file=MANIFEST_NAME, field="$.manifest_crc32c", section="R-CHK-2",
        )
    stored = match.group(1).decode("ascii")
    computed = format_crc32c(crc32c_of(memoryview(data)[: len(data) - SUFFIX_LENGTH]))
    if stored != computed:
        raise IntegrityError(
            f"manifest crc32c mismatch: stored {stored}, computed {computed}",
            file=MANIFEST_NAME, field="$.manifest_crc32c", section="R-CHK-3",
        )


def _pydantic_location(loc: tuple[Any, ...]) -> str:
    path = "$"
    for part in loc:
        path += f".{part}" if isinstance(part, str) and part.isidentifier() else f"[{part!r}]"
    return path


def _schema_error(exc: ValidationError) -> ManifestError:
    first = exc.errors()[0]
    field = _pydantic_location(tuple(first["loc"]))
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return ManifestError(f"{first['msg']}{more}", file=MANIFEST_NAME, field=field, section="R-MAN-5")


def check_manifest_semantics(manifest: Manifest) -> None:
    """The rules a schema cannot state: path safety, counts, overlaps, built-in kinds' files."""
    if len(manifest.components) > MAX_COMPONENTS:
        raise LimitExceeded(f"{len(manifest.components)} components, limit {MAX_COMPONENTS}",
                            file=MANIFEST_NAME, field="$.components", section="R-LIM-3")
    all_paths: list[str] = [MANIFEST_NAME]
    component_dirs: dict[str, str] = {}
    total = 0
    for name, record in manifest.components.items():
        where = f"$.components.{name}"
        try:
            check_segment(name)
            check_relative_path(record.path)
        except CheckpointError as exc:
            raise exc.at(file=MANIFEST_NAME, field=where + ".path") from None
        component_dirs[name] = record.path
        total += len(record.files)
        if total > MAX_FILES:
            raise LimitExceeded(f"more than {MAX_FILES} files", file=MANIFEST_NAME,
                                field=where + ".files", section="R-LIM-4")
        for rel in record.files:
            try:
                all_paths.append(check_relative_path(f"{record.path}/{check_relative_path(rel)}"))
            except CheckpointError as exc:
                raise exc.at(file=MANIFEST_NAME, field=f"{where}.files[{rel!r}]") from None
        expected = KIND_FILES.get(record.kind)
        if expected is not None and record.kind_version == KIND_VERSIONS[record.kind]:
            if set(record.files) != expected:
                raise ManifestError(
                    f"a {record.kind!r} component has exactly the files {sorted(expected)}, "
                    f"got {sorted(record.files)}",
                    file=MANIFEST_NAME, field=where + ".files", section="R-CMP-4",
                )
    _check_component_dirs_disjoint(component_dirs)
    try:
        check_no_conflicts(all_paths)
    except CheckpointError as exc:
        raise exc.at(file=MANIFEST_NAME, field="$.components") from None


def _check_component_dirs_disjoint(component_dirs: Mapping[str, str]) -> None:
    seen: dict[str, str] = {}
    for name, path in sorted(component_dirs.items(), key=lambda item: item[1].lower()):
        folded = path.lower()
        for other_path, other in seen.items():
            if folded == other_path or folded.startswith(other_path + "/"):
                raise ManifestError(
                    f"component {name!r} path {path!r} is inside component {other!r}'s directory",
                    file=MANIFEST_NAME, field=f"$.components.{name}.path", section="R-CMP-3",
                )
        seen[folded] = name


def parse_manifest(
    data: bytes,
    *,
    chain: MigrationChainRunner = DEFAULT_CHAIN,
    understood_extensions: Collection[str] = (),
) -> ParsedManifest:
    """Verify and parse manifest bytes in the spec's fixed order."""
    from .strict_json import parse_ijson

    if len(data) > MANIFEST_MAX_BYTES:
        raise LimitExceeded(f"manifest is {len(data)} bytes, limit {MANIFEST_MAX_BYTES}",
                            file=MANIFEST_NAME, section="R-LIM-1")
    raw = parse_ijson(data, file=MANIFEST_NAME)
    if not isinstance(raw, dict):
        raise ManifestError("the manifest is not a JSON object", file=MANIFEST_NAME, field="$", section="R-MAN-5")
    if raw.get("format") != FORMAT_NAME:
        raise NotACheckpoint(
            f"'format' is {raw.get('format')!r}, expected {FORMAT_NAME!r}",
            file=MANIFEST_NAME, field="$.format", section="R-MAN-6",
        )
    if "format_version" not in raw:
        raise ManifestError("required member is missing", file=MANIFEST_NAME,
                            field="$.format_version", section="R-MAN-5")
    written_version = raw["format_version"]
    migrated = chain.migrate_manifest(raw)
    if written_version == chain.current_version:
        verify_manifest_checksum(data)
    try:
        manifest = Manifest.model_validate(migrated)
    except ValidationError as exc:
        raise _schema_error(exc) from None
    for name, extension in manifest.extensions.items():
        if extension.must_understand and name not in understood_extensions:
            raise UnsupportedExtension(
                f"extension {name!r} (version {extension.version}) must be understood and this reader "
                "does not implement it",
                file=MANIFEST_NAME, field=f"$.extensions.{name}", section="R-EXT-2",
            )
    check_manifest_semantics(manifest)
    return ParsedManifest(manifest=manifest, raw=migrated, written_version=written_version, size=len(data))

"""Reading and writing ``manifest.json`` (spec §5, §6, §7 and steps 3-9 of §15).

The manifest verifies itself: it ends with the fixed 32-byte suffix
``"manifest_crc32c": "hhhhhhhh"\\n}\\n`` and ``hhhhhhhh`` is the CRC-32C of every
byte before that suffix. :func:`parse_manifest` runs the steps of the spec's
fixed validation order so every implementation reports the same error class
for the same file:

3. size (R-LIM-1); 4. UTF-8 + I-JSON (R-MAN-1..6, R-LIM-3, R-LIM-4);
5. ``format`` / ``format_version`` (NotACheckpoint, R-MAN-10, R-VER-3, R-SHD-12);
6. the checksum suffix (R-CHK-1, R-CHK-2, then R-CHK-3);
7. the members (R-MAN-7, R-MAN-11..23, R-CMP-*, R-CHK-4/5, R-EXT-1..5, R-LIM-5/6);
8. paths (R-LIM-7/8, then R-PATH-1..4, R-CMP-6..8); 9. ``must_understand`` extensions.

Steps 7 and 8 report every violation they find (``validate`` lists them all);
the reader raises the first.

>>> body = {"format": "opencheckpoint", "format_version": 1, "checkpoint_id": "x",
...         "created_at": "2026-01-01T00:00:00Z", "producer": {"name": "doc", "version": "1"},
...         "metadata": {}, "extensions": {}, "components": {}}
>>> data = serialize_manifest(body)
>>> data[-32:]
b'"manifest_crc32c": "2eb47535"\\n}\\n'
>>> parse_manifest(data).manifest.checkpoint_id
'x'
>>> parse_manifest(serialize_manifest({**body, "created_at": "2026-02-30T00:00:00Z"}))
Traceback (most recent call last):
...
opencheckpoint.format.errors.ManifestError: ManifestError: manifest.json: $.created_at: day 30 does not exist in 2026-02 [R-MAN-15]
"""  # noqa: E501  (doctest: an error message is shown whole, as users see it)

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..rules.container import CON
from ..rules.v1 import KIND_FILES as KIND_FILES  # re-exported: the test kit reads it from here
from ..rules.v1 import V1
from ..rules.v1 import timestamp_error as timestamp_error
from ..rules.v2 import V2
from .errors import (
    CheckpointError,
)
from .integrity import crc32c_of, format_crc32c
from .limits import MAX_FILES
from .migrations import DEFAULT_CHAIN, MigrationChainRunner
from .names import FORMAT_NAME
from .names import MANIFEST_NAME as MANIFEST_NAME  # re-exported: most modules import it from here
from .paths import COMPONENT_PATH, INVENTORY_PATH, ascii_fold, conflict_errors, path_grammar_error, path_limit_error
from .records import ComponentRecord, Extension, FileEntry, Manifest, Producer

SUFFIX_LENGTH: Final = 32
_SUFFIX: Final = re.compile(rb'"manifest_crc32c": "([0-9a-f]{8})"\n\}\n')
_SUFFIX_SHAPE: Final = re.compile(rb'"manifest_crc32c": "([^"]{8})"\n\}\n')
_WHITESPACE: Final = b" \t\r\n"

#: Highest kind_version of each built-in kind this reader implements (R-CMP-19). A tree of kind_version 2
#: (sharded arrays) is valid only in a checkpoint of format version 2 (R-SHD-2).
KIND_VERSIONS: Final = {"tree": 2, "json": 1, "files": 1}
#: Extension name -> highest version this reader implements. Format version 1 defines none.
UNDERSTOOD_EXTENSIONS: Final[Mapping[str, int]] = {}
RESERVED_EXTENSION_PREFIX: Final = "org.opencheckpoint."

_TOP_LEVEL: Final = ("format", "format_version", "checkpoint_id", "created_at", "producer", "metadata",
                     "extensions", "components", "manifest_crc32c")
_RECORD_REQUIRED: Final = ("kind", "kind_version", "path", "files")
_RECORD_MEMBERS: Final = frozenset((*_RECORD_REQUIRED, "hints", "metadata"))
_ENTRY_MEMBERS: Final = frozenset({"size", "crc32c", "sha256"})
_EXTENSION_MEMBERS: Final = ("version", "must_understand", "data")
_PRODUCER_MEMBERS: Final = frozenset({"name", "version", "environment"})


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
    if "manifest_crc32c" in body:
        raise ValueError("serialize_manifest adds manifest_crc32c itself")
    text = json.dumps(body, indent=2, ensure_ascii=False, allow_nan=False)
    if not text.endswith("\n}"):
        raise ValueError("manifest body must be a non-empty JSON object")
    prefix = (text[: -len("\n}")] + ",\n  ").encode("utf-8")
    crc = format_crc32c(crc32c_of(prefix))
    return prefix + f'"manifest_crc32c": "{crc}"\n}}\n'.encode("ascii")


def _at(error: CheckpointError, field: str) -> CheckpointError:
    error.file = error.file or MANIFEST_NAME
    error.field = error.field or field
    return error


def field_of(*parts: str) -> str:
    """``$``-rooted location of a manifest member: ``field_of("components", "m", "files", "data.bin")``."""
    out = "$"
    for part in parts:
        out += f".{part}" if part.isidentifier() else f"[{part!r}]"
    return out


# -- step 5 -----------------------------------------------------------------------------------
def identify(raw: Any, chain: MigrationChainRunner = DEFAULT_CHAIN) -> int:
    """R-MAN-8, R-MAN-9, then R-MAN-10, R-VER-3 and R-SHD-12; return the written format version."""
    if not isinstance(raw, dict):
        raise V1.error("R-MAN-8", f"the top-level JSON value is a {type(raw).__name__}, not an object",
                       file=MANIFEST_NAME, field="$")
    if raw.get("format") != FORMAT_NAME:
        shown = repr(raw["format"])[:60] if "format" in raw else "missing"
        # torchrl's Checkpoint has a manifest.json of its own: name it and the way to convert it
        foreign = (" (a torchrl Checkpoint: `opencheckpoint convert SRC DST` converts it)"
                   if raw.get("format") == "torchrl.checkpoint" else "")
        raise V1.error("R-MAN-9", f"member 'format' is {shown}, expected {FORMAT_NAME!r}{foreign}",
                       file=MANIFEST_NAME, field="$.format")
    if "format_version" not in raw:
        raise V1.error("R-MAN-10", "required member 'format_version' is missing", file=MANIFEST_NAME,
                       field="$.format_version")
    version = raw["format_version"]
    # R-MAN-10 is a rule of format version 1; a chain that migrates a (hypothetical) older draft
    # reads that draft by its own rules, so only versions below the chain's oldest are rejected here.
    if type(version) is not int or version < min(1, chain.oldest_version):
        raise V1.error("R-MAN-10", f"format_version {version!r} is not an integer >= 1"[:120], file=MANIFEST_NAME,
                       field="$.format_version")
    chain.steps_from(version)  # R-VER-3: newer than this reader
    error = V2.check("R-SHD-12", "$.format_version", version, raw.get("components"))
    if error is not None:  # a version 2 label on content without sharded arrays: a version problem, found first
        raise error
    return int(version)


# -- step 6 -----------------------------------------------------------------------------------
def verify_manifest_checksum(data: bytes) -> None:
    """R-CHK-1 (the 32-byte suffix), R-CHK-2 (a comma before it), then R-CHK-3 (the CRC-32C)."""
    tail = bytes(data[-SUFFIX_LENGTH:]) if len(data) >= SUFFIX_LENGTH else b""
    match = _SUFFIX.fullmatch(tail)
    if match is None:
        shape = _SUFFIX_SHAPE.fullmatch(tail)
        why = ("the checksum is not 8 lowercase hex digits" if shape else
               'the file does not end with \'"manifest_crc32c": "<8 hex digits>"\\n}\\n\'')
        raise V1.error("R-CHK-1", why, file=MANIFEST_NAME, field="$.manifest_crc32c")
    head = memoryview(data)[: len(data) - SUFFIX_LENGTH]
    position = len(head) - 1
    while position >= 0 and head[position] in _WHITESPACE:
        position -= 1
    if position < 0 or head[position] != ord(","):
        raise V1.error("R-CHK-2", "the bytes before the checksum suffix do not end with ',' and whitespace",
                       file=MANIFEST_NAME, field="$.manifest_crc32c")
    stored = match.group(1).decode("ascii")
    computed = format_crc32c(crc32c_of(head))
    if stored != computed:
        raise V1.error("R-CHK-3", f"manifest crc32c mismatch: stored {stored}, computed {computed}",
                       file=MANIFEST_NAME, field="$.manifest_crc32c")


# -- step 7 -----------------------------------------------------------------------------------
class _Found:
    """The errors of step 7, in order: each comes from its rule table's dispatcher (:data:`V1`, :data:`V2`)."""

    def __init__(self, written_version: int) -> None:
        self.errors: list[CheckpointError] = []
        #: the format_version the file states (before migration): a rule of a later version is not checked
        self.written_version = written_version

    def check(self, rule: str, where: str, *args: Any) -> None:
        error = (V2 if rule in V2.rules else V1).check(rule, where, *args)
        if error is not None:
            self.errors.append(error)

    def integer(self, rule: str, where: str, value: Any, what: str) -> None:
        """R-MAN-7 (a plain number token) first, then the member's own rule."""
        error = V1.first(where, ("R-MAN-7", (value, what)), (rule, (value,)))
        if error is not None:
            self.errors.append(error)

    def members(self, obj: dict[str, Any], required: Collection[str], allowed: Collection[str], where: str,
                missing_rule: str, extra_rule: str) -> None:
        for name in required:
            self.check(missing_rule, f"{where}{field_of(name)[1:]}", obj, name)
        for name in obj:
            if name not in allowed:
                self.check(extra_rule, f"{where}{field_of(name)[1:]}", name)


def structure_errors(raw: dict[str, Any], written_version: int | None = None) -> list[CheckpointError]:
    """Step 7: every member rule, in the order of the spec's tables, each checked by its rule's function.

    ``written_version`` is the ``format_version`` the file states (default: ``raw``'s): R-SHD-3 is a rule of
    format version 2 and is not checked in a version 1 checkpoint, whose kind_version 2 tree is R-SHD-2's
    (step 12) whatever its inventory (spec §S.2).
    """
    stated = raw.get("format_version")
    found = _Found(written_version if written_version is not None else stated if type(stated) is int else 1)
    found.members(raw, _TOP_LEVEL, _TOP_LEVEL, "$", "R-MAN-11", "R-MAN-12")
    if "checkpoint_id" in raw:
        found.check("R-MAN-13", "$.checkpoint_id", raw["checkpoint_id"])
    if "created_at" in raw:
        before = len(found.errors)
        found.check("R-MAN-14", "$.created_at", raw["created_at"])
        if len(found.errors) == before:
            found.check("R-MAN-15", "$.created_at", raw["created_at"])
    if "producer" in raw:
        _producer_errors(raw["producer"], found)
    if "metadata" in raw:
        found.check("R-MAN-21", "$.metadata", raw["metadata"])
    if "extensions" in raw:
        found.check("R-MAN-22", "$.extensions", raw["extensions"])
    if "components" in raw:
        found.check("R-MAN-23", "$.components", raw["components"])
    if isinstance(raw.get("extensions"), dict):
        for name, record in raw["extensions"].items():
            _extension_errors(name, record, found)
    if isinstance(raw.get("components"), dict):
        _components_errors(raw["components"], found)
    return found.errors


def _components_errors(components: dict[str, Any], found: _Found) -> None:
    before = len(found.errors)
    found.check("R-LIM-5", "$.components", components)
    if len(found.errors) > before:
        return
    total = 0
    for name, record in components.items():
        total += _component_errors(name, record, found)
        if total > MAX_FILES:
            found.check("R-LIM-6", field_of("components", name, "files"), total)
            break


def _producer_errors(producer: Any, found: _Found) -> None:
    found.check("R-MAN-16", "$.producer", producer)
    if not isinstance(producer, dict):
        return
    found.check("R-MAN-17", "$.producer.name", producer)
    found.check("R-MAN-18", "$.producer.version", producer)
    if "environment" in producer:
        found.check("R-MAN-19", "$.producer.environment", producer["environment"])
    for name in producer:
        if name not in _PRODUCER_MEMBERS:
            found.check("R-MAN-20", f"$.producer{field_of(name)[1:]}", name)


def _extension_errors(name: str, record: Any, found: _Found) -> None:
    where = field_of("extensions", name)
    found.check("R-EXT-1", where, name)
    found.check("R-EXT-2", where, record)
    if not isinstance(record, dict):
        return
    found.members(record, _EXTENSION_MEMBERS, _EXTENSION_MEMBERS, where, "R-EXT-2", "R-EXT-3")
    if "version" in record:
        found.integer("R-EXT-4", where + ".version", record["version"], "version")
    if "must_understand" in record:
        found.check("R-EXT-5", where + ".must_understand", record["must_understand"])


def _component_errors(name: str, record: Any, found: _Found) -> int:
    """Record the errors of one component record; return its number of file entries."""
    where = field_of("components", name)
    found.check("R-CMP-1", where, name)
    found.check("R-CMP-2", where, record)
    if not isinstance(record, dict):
        return 0
    found.members(record, _RECORD_REQUIRED, _RECORD_MEMBERS, where, "R-CMP-2", "R-CMP-3")
    kind = record.get("kind")
    if "kind" in record:
        found.check("R-CMP-4", where + ".kind", kind)
    if "kind_version" in record:
        found.integer("R-CMP-5", where + ".kind_version", record["kind_version"], "kind_version")
    if "path" in record:
        # Table 6-1 types path; its type is R-CMP-2 (step 7), the path rules of step 8 judge strings only.
        found.check("R-CMP-2", where + ".path", record, "path", True)
    if "hints" in record:
        found.check("R-CMP-10", where + ".hints", record["hints"])
    if "metadata" in record:
        found.check("R-CMP-11", where + ".metadata", record["metadata"])
    if "files" not in record:
        return 0
    files = record["files"]
    before = len(found.errors)
    found.check("R-CMP-9", where + ".files", files)
    if len(found.errors) > before:
        return 0
    for rel, entry in files.items():
        _entry_errors(f"{where}.files{field_of(rel)[1:]}", entry, found)
    if kind in ("tree", "json") and record.get("kind_version") == 1:
        found.check("R-CMP-16" if kind == "tree" else "R-CMP-17", where + ".files", files)
    elif kind == "tree" and record.get("kind_version") == 2 and found.written_version >= 2:
        found.check("R-SHD-3", where + ".files", files)
    return len(files)


def _entry_errors(where: str, entry: Any, found: _Found) -> None:
    found.check("R-CMP-13", where, entry)
    if not isinstance(entry, dict):
        return
    found.members(entry, ("size", "crc32c"), _ENTRY_MEMBERS, where, "R-CMP-13", "R-CMP-14")
    if "size" in entry:
        found.integer("R-CMP-15", where + ".size", entry["size"], "size")
    if "crc32c" in entry:
        found.check("R-CHK-4", where + ".crc32c", entry["crc32c"])
    if "sha256" in entry:
        found.check("R-CHK-5", where + ".sha256", entry["sha256"])


# -- step 8 -----------------------------------------------------------------------------------
def path_errors(raw: dict[str, Any]) -> list[CheckpointError]:
    """Step 8: R-LIM-7/R-LIM-8 on every path, then the grammar, then conflicts."""
    components: dict[str, Any] = raw["components"]
    # (path, component, files key or None for the component path): the field of each is made only
    # for an error, so a manifest of a million files costs a million checks, not a million strings.
    located: list[tuple[object, str, str | None]] = []
    full_paths: list[tuple[str, str, str]] = []
    for name, record in components.items():
        located.append((record["path"], name, None))
        for rel in record["files"]:
            located.append((rel, name, rel))
            if isinstance(record["path"], str):
                full_paths.append((f"{record['path']}/{rel}", name, rel))

    def field(name: str, rel: str | None) -> str:
        return field_of("components", name, "path") if rel is None else field_of("components", name, "files", rel)

    errors: list[CheckpointError] = []
    for path, name, key in located:
        error = path_limit_error(path)
        if error:
            errors.append(_at(error, field(name, key)))
    for path, name, rel in full_paths:
        error = path_limit_error(path)
        if error:
            errors.append(_at(error, field(name, rel)))
    if errors:
        return errors
    for path, name, key in located:
        grammar = path_grammar_error(path, COMPONENT_PATH if key is None else INVENTORY_PATH)
        if grammar:
            errors.append(_at(grammar, field(name, key)))
    if errors:
        return errors
    folded: dict[str, str] = {}
    for name, record in components.items():
        where = field_of("components", name, "path")
        key = ascii_fold(record["path"])
        if key == MANIFEST_NAME:
            errors.append(V1.error("R-CMP-8", "a component path may not be 'manifest.json'", file=MANIFEST_NAME,
                                   field=where))
        if key in folded:
            errors.append(V1.error("R-CMP-6", f"component path {record['path']!r} equals that of {folded[key]!r} after "
                                   "ASCII case folding", file=MANIFEST_NAME, field=where))
        folded.setdefault(key, name)
    for name, record in components.items():
        parts = ascii_fold(record["path"]).split("/")
        for depth in range(1, len(parts)):
            other = folded.get("/".join(parts[:depth]))
            if other is not None:
                errors.append(V1.error("R-CMP-7", f"component path {record['path']!r} is inside component {other!r}'s "
                                       "path", file=MANIFEST_NAME, field=field_of("components", name, "path")))
                break
    for conflict in conflict_errors([MANIFEST_NAME] + [path for path, _, _ in full_paths]):
        errors.append(_at(conflict, "$.components"))
    return errors


# -- step 9 -----------------------------------------------------------------------------------
def understands(name: str, version: int, understood: Collection[str] | Mapping[str, int]) -> bool:
    """Whether this reader implements extension ``name`` at ``version`` (R-EXT-7, R-EXT-9)."""
    if name.startswith(RESERVED_EXTENSION_PREFIX) or name not in understood:
        return False
    if isinstance(understood, Mapping):
        return version <= understood[name]
    return True


def typed_view(raw: dict[str, Any]) -> Manifest:
    """The typed view of a manifest that passed steps 7 and 8: plain records, not checked a second time.

    Every rule was checked once, by its function in the rule table, and the member sets are closed
    (R-MAN-7, R-CMP-*), so each record gets exactly its members; the models' ``Field`` constraints are
    the JSON Schema's statement of the same rules, not a second check.
    """
    components = {
        name: ComponentRecord(**{**record, "files": {
            rel: FileEntry(**entry) for rel, entry in record["files"].items()}})
        for name, record in raw["components"].items()
    }
    extensions = {name: Extension(**record) for name, record in raw["extensions"].items()}
    return Manifest(**{**raw, "producer": Producer(**raw["producer"]), "extensions": extensions,
                       "components": components})


def _raise_first(errors: list[CheckpointError], issues: list[CheckpointError] | None) -> None:
    if errors:
        if issues is not None:
            issues.extend(errors[1:])
        raise errors[0]


def parse_manifest(
    data: bytes,
    *,
    chain: MigrationChainRunner = DEFAULT_CHAIN,
    understood_extensions: Collection[str] | Mapping[str, int] = UNDERSTOOD_EXTENSIONS,
    issues: list[CheckpointError] | None = None,
) -> ParsedManifest:
    """Verify and parse manifest bytes in the spec's fixed order (steps 3-9).

    When ``issues`` is given, every further error of steps 7 and 8 is appended
    to it before the first one is raised.
    """
    from .strict_json import parse_ijson

    too_big = CON.check("R-LIM-1", None, len(data), file=MANIFEST_NAME)
    if too_big is not None:
        raise too_big
    raw = parse_ijson(data, file=MANIFEST_NAME)
    written_version = identify(raw, chain)
    if written_version >= 1:  # the checksum suffix is a rule of every format version from 1 on
        verify_manifest_checksum(data)
    migrated = chain.migrate_manifest(raw)
    _raise_first(structure_errors(migrated, written_version), issues)
    _raise_first(path_errors(migrated), issues)
    manifest = typed_view(migrated)
    for name, extension in manifest.extensions.items():
        if extension.must_understand and not understands(name, extension.version, understood_extensions):
            raise V1.error("R-EXT-7",
                f"extension {name!r} (version {extension.version}) is declared must_understand and this "
                "reader does not implement it",
                file=MANIFEST_NAME, field=field_of("extensions", name))
    return ParsedManifest(manifest=manifest, raw=migrated, written_version=written_version, size=len(data))

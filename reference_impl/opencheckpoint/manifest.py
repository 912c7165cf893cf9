"""Reading and writing ``manifest.json`` (spec §5, §6, §7 and steps 3-9 of §15).

The manifest verifies itself: it ends with the fixed 32-byte suffix
``"manifest_crc32c": "hhhhhhhh"\\n}\\n`` and ``hhhhhhhh`` is the CRC-32C of every
byte before that suffix. :func:`parse_manifest` runs the steps of the spec's
fixed validation order so every implementation reports the same error class
for the same file:

3. size (R-LIM-1); 4. UTF-8 + I-JSON (R-MAN-1..6, R-LIM-3, R-LIM-4);
5. ``format`` / ``format_version`` (NotACheckpoint, R-MAN-10, R-VER-3);
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
opencheckpoint.errors.ManifestError: ManifestError: manifest.json: $.created_at: day 30 does not exist in 2026-02 [R-MAN-15]
"""  # noqa: E501  (doctest: an error message is shown whole, as users see it)

from __future__ import annotations

import json
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
    UnsafePath,
    UnsupportedExtension,
)
from .integrity import crc32c_of, format_crc32c
from .limits import JSON_MAX_SAFE_INT, MANIFEST_MAX_BYTES, MAX_COMPONENTS, MAX_FILES
from .migrations import DEFAULT_CHAIN, MigrationChainRunner
from .models import EXTENSION_NAME_PATTERN, FORMAT_NAME, ID_PATTERN, KIND_PATTERN, TIMESTAMP_PATTERN, Manifest
from .paths import ascii_fold, conflict_errors, path_grammar_error, path_limit_error

MANIFEST_NAME: Final = "manifest.json"
SUFFIX_LENGTH: Final = 32
_SUFFIX: Final = re.compile(rb'"manifest_crc32c": "([0-9a-f]{8})"\n\}\n')
_SUFFIX_SHAPE: Final = re.compile(rb'"manifest_crc32c": "([^"]{8})"\n\}\n')
_WHITESPACE: Final = b" \t\r\n"

#: Files each built-in kind (version 1) has, relative to the component path (R-CMP-16, R-CMP-17).
KIND_FILES: Final[dict[str, frozenset[str] | None]] = {
    "tree": frozenset({"tree.msgpack", "data.bin"}),
    "json": frozenset({"value.json"}),
    "files": None,  # any files
}
KIND_FILE_RULE: Final = {"tree": "R-CMP-16", "json": "R-CMP-17"}
#: Highest kind_version of each built-in kind this reader implements (R-CMP-19).
KIND_VERSIONS: Final = {"tree": 1, "json": 1, "files": 1}
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

_ID = re.compile(ID_PATTERN[1:-1], re.ASCII)
_TIMESTAMP = re.compile(TIMESTAMP_PATTERN[1:-1], re.ASCII)
_KIND = re.compile(KIND_PATTERN[1:-1], re.ASCII)
_EXTENSION_NAME = re.compile(EXTENSION_NAME_PATTERN[1:-1], re.ASCII)
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}", re.ASCII)
_CRC = re.compile(r"[0-9a-f]{8}", re.ASCII)
_SHA = re.compile(r"[0-9a-f]{64}", re.ASCII)


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
    """R-MAN-8, R-MAN-9, then R-MAN-10 and R-VER-3; return the written format version."""
    if not isinstance(raw, dict):
        raise NotACheckpoint(f"the top-level JSON value is a {type(raw).__name__}, not an object",
                             file=MANIFEST_NAME, field="$", rule="R-MAN-8")
    if raw.get("format") != FORMAT_NAME:
        shown = repr(raw["format"])[:60] if "format" in raw else "missing"
        raise NotACheckpoint(f"member 'format' is {shown}, expected {FORMAT_NAME!r}",
                             file=MANIFEST_NAME, field="$.format", rule="R-MAN-9")
    if "format_version" not in raw:
        raise ManifestError("required member 'format_version' is missing", file=MANIFEST_NAME,
                            field="$.format_version", rule="R-MAN-10")
    version = raw["format_version"]
    # R-MAN-10 is a rule of format version 1; a chain that migrates a (hypothetical) older draft
    # reads that draft by its own rules, so only versions below the chain's oldest are rejected here.
    if type(version) is not int or version < min(1, chain.oldest_version):
        raise ManifestError(f"format_version {version!r} is not an integer >= 1"[:120], file=MANIFEST_NAME,
                            field="$.format_version", rule="R-MAN-10")
    chain.steps_from(version)  # R-VER-3: newer than this reader
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
        raise ManifestError(why, file=MANIFEST_NAME, field="$.manifest_crc32c", rule="R-CHK-1")
    head = memoryview(data)[: len(data) - SUFFIX_LENGTH]
    position = len(head) - 1
    while position >= 0 and head[position] in _WHITESPACE:
        position -= 1
    if position < 0 or head[position] != ord(","):
        raise ManifestError("the bytes before the checksum suffix do not end with ',' and whitespace",
                            file=MANIFEST_NAME, field="$.manifest_crc32c", rule="R-CHK-2")
    stored = match.group(1).decode("ascii")
    computed = format_crc32c(crc32c_of(head))
    if stored != computed:
        raise IntegrityError(f"manifest crc32c mismatch: stored {stored}, computed {computed}",
                             file=MANIFEST_NAME, field="$.manifest_crc32c", rule="R-CHK-3")


# -- step 7 -----------------------------------------------------------------------------------
def _is_int(value: Any) -> bool:
    return type(value) is int


def _integer_error(value: Any, where: str, rule: str, what: str, minimum: int) -> CheckpointError | None:
    if type(value) is float:
        return ManifestError(f"{what} is written with a fraction or exponent; integers are written "
                             "as plain number tokens", file=MANIFEST_NAME, field=where, rule="R-MAN-7")
    if not _is_int(value) or not minimum <= value <= JSON_MAX_SAFE_INT:
        return ManifestError(f"{what} must be an integer >= {minimum}, got {value!r}"[:200], file=MANIFEST_NAME,
                             field=where, rule=rule)
    return None


def _members(obj: dict[str, Any], required: Collection[str], allowed: Collection[str], where: str,
             missing_rule: str, extra_rule: str, errors: list[CheckpointError]) -> None:
    for name in required:
        if name not in obj:
            errors.append(ManifestError(f"required member {name!r} is missing", file=MANIFEST_NAME,
                                        field=f"{where}{field_of(name)[1:]}", rule=missing_rule))
    for name in obj:
        if name not in allowed:
            errors.append(ManifestError(f"unknown member {name!r}", file=MANIFEST_NAME,
                                        field=f"{where}{field_of(name)[1:]}", rule=extra_rule))


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


def timestamp_error(text: str) -> str | None:
    """Why an R-MAN-14-shaped ``created_at`` is not a real UTC date and time (R-MAN-15), or None.

    >>> timestamp_error("2024-02-29T23:59:59Z") is None, timestamp_error("2023-12-31T23:59:60Z")
    (True, 'second 60 is not in 00-59')
    """
    year, month, day = int(text[0:4]), int(text[5:7]), int(text[8:10])
    hour, minute, second = int(text[11:13]), int(text[14:16]), int(text[17:19])
    if not 1 <= month <= 12:
        return f"month {month:02d} is not in 01-12"
    if not 1 <= day <= _days_in_month(year, month):
        return f"day {day:02d} does not exist in {year:04d}-{month:02d}"
    if hour > 23:
        return f"hour {hour:02d} is not in 00-23"
    if minute > 59:
        return f"minute {minute:02d} is not in 00-59"
    if second > 59:
        return f"second {second:02d} is not in 00-59"
    return None


def _string_map_error(value: Any, where: str, rule: str, what: str) -> CheckpointError | None:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        return ManifestError(f"{what} must be an object whose member values are strings", file=MANIFEST_NAME,
                             field=where, rule=rule)
    return None


def structure_errors(raw: dict[str, Any]) -> list[CheckpointError]:
    """Step 7: every member rule a schema states, with the requirement each breaks."""
    errors: list[CheckpointError] = []
    add = errors.append
    _members(raw, _TOP_LEVEL, _TOP_LEVEL, "$", "R-MAN-11", "R-MAN-12", errors)
    if "checkpoint_id" in raw:
        value = raw["checkpoint_id"]
        if not isinstance(value, str) or not _ID.fullmatch(value):
            add(ManifestError(f"checkpoint_id {value!r} does not match {ID_PATTERN}"[:200], file=MANIFEST_NAME,
                              field="$.checkpoint_id", rule="R-MAN-13"))
    if "created_at" in raw:
        value = raw["created_at"]
        if not isinstance(value, str) or not _TIMESTAMP.fullmatch(value):
            add(ManifestError(f"created_at {value!r} does not match {TIMESTAMP_PATTERN}"[:200],
                              file=MANIFEST_NAME, field="$.created_at", rule="R-MAN-14"))
        else:
            why = timestamp_error(value)
            if why:
                add(ManifestError(why, file=MANIFEST_NAME, field="$.created_at", rule="R-MAN-15"))
    if "producer" in raw:
        _producer_errors(raw["producer"], errors)
    for name, rule in (("metadata", "R-MAN-21"), ("extensions", "R-MAN-22"), ("components", "R-MAN-23")):
        if name in raw and not isinstance(raw[name], dict):
            add(ManifestError(f"{name} must be an object", file=MANIFEST_NAME, field=f"$.{name}", rule=rule))
    if isinstance(raw.get("extensions"), dict):
        for name, record in raw["extensions"].items():
            _extension_errors(name, record, errors)
    components = raw.get("components")
    if isinstance(components, dict):
        if len(components) > MAX_COMPONENTS:
            add(LimitExceeded(f"{len(components)} components, limit {MAX_COMPONENTS}", file=MANIFEST_NAME,
                              field="$.components", rule="R-LIM-5"))
            return errors
        total = 0
        for name, record in components.items():
            total += _component_errors(name, record, errors)
            if total > MAX_FILES:
                add(LimitExceeded(f"more than {MAX_FILES} file entries", file=MANIFEST_NAME,
                                  field=field_of("components", name, "files"), rule="R-LIM-6"))
                break
    return errors


def _producer_errors(producer: Any, errors: list[CheckpointError]) -> None:
    if not isinstance(producer, dict):
        errors.append(ManifestError("producer must be an object", file=MANIFEST_NAME, field="$.producer",
                                    rule="R-MAN-16"))
        return
    for name, rule in (("name", "R-MAN-17"), ("version", "R-MAN-18")):
        value = producer.get(name)
        if not isinstance(value, str) or not 1 <= len(value) <= 128:
            what = "is missing" if name not in producer else f"is {value!r}"[:80]
            errors.append(ManifestError(f"producer.{name} must be a string of 1 to 128 code points; it {what}",
                                        file=MANIFEST_NAME, field=f"$.producer.{name}", rule=rule))
    if "environment" in producer:
        error = _string_map_error(producer["environment"], "$.producer.environment", "R-MAN-19",
                                  "producer.environment")
        if error:
            errors.append(error)
    for name in producer:
        if name not in _PRODUCER_MEMBERS:
            errors.append(ManifestError(f"unknown member {name!r}", file=MANIFEST_NAME,
                                        field=f"$.producer{field_of(name)[1:]}", rule="R-MAN-20"))


def _extension_errors(name: str, record: Any, errors: list[CheckpointError]) -> None:
    where = field_of("extensions", name)
    if not _EXTENSION_NAME.fullmatch(name):
        errors.append(ManifestError(f"extension name {name!r} does not match {EXTENSION_NAME_PATTERN}",
                                    file=MANIFEST_NAME, field=where, rule="R-EXT-1"))
    if not isinstance(record, dict):
        errors.append(ManifestError("an extension record must be an object", file=MANIFEST_NAME, field=where,
                                    rule="R-EXT-2"))
        return
    _members(record, _EXTENSION_MEMBERS, _EXTENSION_MEMBERS, where, "R-EXT-2", "R-EXT-3", errors)
    if "version" in record:
        error = _integer_error(record["version"], where + ".version", "R-EXT-4", "version", 1)
        if error:
            errors.append(error)
    if "must_understand" in record and type(record["must_understand"]) is not bool:
        errors.append(ManifestError("must_understand must be true or false", file=MANIFEST_NAME,
                                    field=where + ".must_understand", rule="R-EXT-5"))


def _component_errors(name: str, record: Any, errors: list[CheckpointError]) -> int:
    """Append the errors of one component record; return its number of file entries."""
    add = errors.append
    where = field_of("components", name)
    if not _NAME.fullmatch(name):
        add(ManifestError(f"component name {name!r} does not match ^[A-Za-z0-9_][A-Za-z0-9._-]{{0,127}}$"[:200],
                          file=MANIFEST_NAME, field=where, rule="R-CMP-1"))
    if not isinstance(record, dict):
        add(ManifestError("a component record must be an object", file=MANIFEST_NAME, field=where,
                          rule="R-CMP-2"))
        return 0
    _members(record, _RECORD_REQUIRED, _RECORD_MEMBERS, where, "R-CMP-2", "R-CMP-3", errors)
    kind = record.get("kind")
    if "kind" in record and (not isinstance(kind, str) or not _KIND.fullmatch(kind)):
        add(ManifestError(f"kind {kind!r} is not 'tree', 'json', 'files' or a namespaced kind"[:200],
                          file=MANIFEST_NAME, field=where + ".kind", rule="R-CMP-4"))
    if "kind_version" in record:
        error = _integer_error(record["kind_version"], where + ".kind_version", "R-CMP-5", "kind_version", 1)
        if error:
            add(error)
    if "path" in record and not isinstance(record["path"], str):
        # Table 6-1 types path; its type is R-CMP-2 (step 7), the path rules of step 8 judge strings only.
        add(ManifestError(f"path {record['path']!r} is not a string"[:200], file=MANIFEST_NAME,
                          field=where + ".path", rule="R-CMP-2"))
    if "hints" in record:
        error = _string_map_error(record["hints"], where + ".hints", "R-CMP-10", "hints")
        if error:
            add(error)
    if "metadata" in record and not isinstance(record["metadata"], dict):
        add(ManifestError("metadata must be an object", file=MANIFEST_NAME, field=where + ".metadata",
                          rule="R-CMP-11"))
    files = record.get("files")
    if "files" not in record:
        return 0
    if not isinstance(files, dict):
        add(ManifestError("files must be an object", file=MANIFEST_NAME, field=where + ".files",
                          rule="R-CMP-9"))
        return 0
    for rel, entry in files.items():
        _entry_errors(f"{where}.files{field_of(rel)[1:]}", entry, errors)
    expected = KIND_FILES.get(kind) if isinstance(kind, str) else None
    if expected is not None and isinstance(kind, str) and record.get("kind_version") == 1 and set(files) != expected:
        add(ManifestError(f"a {kind!r} component of kind_version 1 has exactly the files {sorted(expected)}, "
                          f"got {sorted(files)}"[:300], file=MANIFEST_NAME, field=where + ".files",
                          rule=KIND_FILE_RULE[kind]))
    return len(files)


def _entry_errors(where: str, entry: Any, errors: list[CheckpointError]) -> None:
    add = errors.append
    if not isinstance(entry, dict):
        add(ManifestError("a file entry must be an object", file=MANIFEST_NAME, field=where, rule="R-CMP-13"))
        return
    _members(entry, ("size", "crc32c"), _ENTRY_MEMBERS, where, "R-CMP-13", "R-CMP-14", errors)
    if "size" in entry:
        error = _integer_error(entry["size"], where + ".size", "R-CMP-15", "size", 0)
        if error:
            add(error)
    if "crc32c" in entry and (not isinstance(entry["crc32c"], str) or not _CRC.fullmatch(entry["crc32c"])):
        add(ManifestError("crc32c must be 8 lowercase hex digits", file=MANIFEST_NAME, field=where + ".crc32c",
                          rule="R-CHK-4"))
    if "sha256" in entry and (not isinstance(entry["sha256"], str) or not _SHA.fullmatch(entry["sha256"])):
        add(ManifestError("sha256 must be 64 lowercase hex digits", file=MANIFEST_NAME, field=where + ".sha256",
                          rule="R-CHK-5"))


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
        grammar = path_grammar_error(path, "R-PATH-1" if key is None else "R-PATH-2")
        if grammar:
            errors.append(_at(grammar, field(name, key)))
    if errors:
        return errors
    folded: dict[str, str] = {}
    for name, record in components.items():
        where = field_of("components", name, "path")
        key = ascii_fold(record["path"])
        if key == MANIFEST_NAME:
            errors.append(UnsafePath("a component path may not be 'manifest.json'", file=MANIFEST_NAME,
                                     field=where, rule="R-CMP-8"))
        if key in folded:
            errors.append(UnsafePath(f"component path {record['path']!r} equals that of {folded[key]!r} after "
                                     "ASCII case folding", file=MANIFEST_NAME, field=where, rule="R-CMP-6"))
        folded.setdefault(key, name)
    for name, record in components.items():
        parts = ascii_fold(record["path"]).split("/")
        for depth in range(1, len(parts)):
            other = folded.get("/".join(parts[:depth]))
            if other is not None:
                errors.append(UnsafePath(f"component path {record['path']!r} is inside component {other!r}'s "
                                         "path", file=MANIFEST_NAME, field=field_of("components", name, "path"),
                                         rule="R-CMP-7"))
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


def _schema_error(exc: ValidationError) -> ManifestError:
    first = exc.errors()[0]
    where = field_of(*(str(part) for part in first["loc"]))
    return ManifestError(f"{first['msg']}", file=MANIFEST_NAME, field=where, rule="R-MAN-11")


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

    if len(data) > MANIFEST_MAX_BYTES:
        raise LimitExceeded(f"manifest is {len(data)} bytes, limit {MANIFEST_MAX_BYTES}",
                            file=MANIFEST_NAME, rule="R-LIM-1")
    raw = parse_ijson(data, file=MANIFEST_NAME)
    written_version = identify(raw, chain)
    if written_version >= 1:  # the checksum suffix is a rule of every format version from 1 on
        verify_manifest_checksum(data)
    migrated = chain.migrate_manifest(raw)
    _raise_first(structure_errors(migrated), issues)
    _raise_first(path_errors(migrated), issues)
    try:
        manifest = Manifest.model_validate(migrated)
    except ValidationError as exc:  # every rule is checked above; this is a safety net
        raise _schema_error(exc) from None
    for name, extension in manifest.extensions.items():
        if extension.must_understand and not understands(name, extension.version, understood_extensions):
            raise UnsupportedExtension(
                f"extension {name!r} (version {extension.version}) is declared must_understand and this "
                "reader does not implement it",
                file=MANIFEST_NAME, field=field_of("extensions", name), rule="R-EXT-7")
    return ParsedManifest(manifest=manifest, raw=migrated, written_version=written_version, size=len(data))

"""The rule table of format version 1: one check per requirement ID of step 7 of §15 (manifest members).

Each function is the only place its rule is checked; it returns why a value
breaks the rule, or None. The walk that decides which value each rule sees,
and in which order (the order of the spec's tables), is
:func:`opencheckpoint.format.manifest.structure_errors`. Patterns come from
:mod:`opencheckpoint.format.models`, the source of the JSON Schemas, so the schema
and the check state one pattern.
"""

from __future__ import annotations

import re
from typing import Any, Final

from ..format.errors import (
    IntegrityError,
    LimitExceeded,
    ManifestError,
    NotACheckpoint,
    UnknownComponentKind,
    UnsafePath,
    UnsupportedExtension,
    UnsupportedVersion,
)
from ..format.limits import JSON_MAX_SAFE_INT, MAX_COMPONENTS, MAX_FILES
from ..format.names import (
    CRC32C_PATTERN,
    EXTENSION_NAME_PATTERN,
    ID_PATTERN,
    KIND_PATTERN,
    MANIFEST_NAME,
    SHA256_PATTERN,
    TIMESTAMP_PATTERN,
)
from ..format.paths import NAME_PATTERN
from . import RuleTable

V1 = RuleTable(version=1, file=MANIFEST_NAME)
rule = V1.rule

# Rules of steps 5, 6, 8, 9 and 12 whose site holds the facts (format/manifest.py, format/migrations.py,
# read/steps.py): declared with their class; the site reports them with V1.error.
V1.declare("R-MAN-8", NotACheckpoint)
V1.declare("R-MAN-9", NotACheckpoint)
V1.declare("R-MAN-10", ManifestError)
V1.declare("R-CHK-1", ManifestError)
V1.declare("R-CHK-2", ManifestError)
V1.declare("R-CHK-3", IntegrityError)
V1.declare("R-CMP-6", UnsafePath)
V1.declare("R-CMP-7", UnsafePath)
V1.declare("R-CMP-8", UnsafePath)
V1.declare("R-EXT-7", UnsupportedExtension)
V1.declare("R-VER-2", UnsupportedVersion)
V1.declare("R-VER-3", UnsupportedVersion)
V1.declare("R-VER-4", UnsupportedVersion)
V1.declare("R-CMP-19", UnsupportedVersion)
V1.declare("R-CMP-21", UnknownComponentKind)


def _compiled(pattern: str) -> re.Pattern[str]:
    """A model's ``^...$`` pattern for :meth:`re.Pattern.fullmatch` (ASCII classes only)."""
    return re.compile(pattern.removeprefix("^").removesuffix("$"), re.ASCII)


_ID = _compiled(ID_PATTERN)
_TIMESTAMP = _compiled(TIMESTAMP_PATTERN)
_KIND = _compiled(KIND_PATTERN)
_EXTENSION_NAME = _compiled(EXTENSION_NAME_PATTERN)
_NAME = _compiled(NAME_PATTERN)
_CRC = _compiled(CRC32C_PATTERN)
_SHA = _compiled(SHA256_PATTERN)

#: Files each built-in kind (version 1) has, relative to the component path (R-CMP-16, R-CMP-17).
KIND_FILES: Final[dict[str, frozenset[str] | None]] = {
    "tree": frozenset({"tree.msgpack", "data.bin"}),
    "json": frozenset({"value.json"}),
    "files": None,  # any files
}


# -- shared wording (one helper per shape of rule, one check per ID) ----------------------------
def _missing(obj: dict[str, Any], member: str) -> str | None:
    return f"required member {member!r} is missing" if member not in obj else None


def _unknown(member: str) -> str:
    return f"unknown member {member!r}"


def _integer(value: Any, what: str, minimum: int) -> str | None:
    if type(value) is not int or not minimum <= value <= JSON_MAX_SAFE_INT:
        return f"{what} must be an integer >= {minimum}, got {value!r}"[:200]
    return None


def _string_map(value: Any, what: str) -> str | None:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        return f"{what} must be an object whose member values are strings"
    return None


def _object(value: Any, what: str) -> str | None:
    return None if isinstance(value, dict) else f"{what} must be an object"


def _short_string(value: Any, present: bool, what: str) -> str | None:
    if isinstance(value, str) and 1 <= len(value) <= 128:
        return None
    shown = "is missing" if not present else f"is {value!r}"[:80]
    return f"{what} must be a string of 1 to 128 code points; it {shown}"


# -- §5.1 ------------------------------------------------------------------------------------------
@rule("R-MAN-7", ManifestError)
def integer_token(value: Any, what: str) -> str | None:
    """An integer-typed member is a plain number token (a float here came from ``1.0`` or ``1e0``)."""
    if type(value) is float:
        return f"{what} is written with a fraction or exponent; integers are written as plain number tokens"
    return None


# -- §5.2 top level ------------------------------------------------------------------------------
@rule("R-MAN-11", ManifestError)
def top_level_member(raw: dict[str, Any], member: str) -> str | None:
    return _missing(raw, member)


@rule("R-MAN-12", ManifestError)
def top_level_unknown(member: str) -> str | None:
    return _unknown(member)


@rule("R-MAN-13", ManifestError)
def checkpoint_id(value: Any) -> str | None:
    if isinstance(value, str) and _ID.fullmatch(value):
        return None
    return f"checkpoint_id {value!r} does not match {ID_PATTERN}"[:200]


@rule("R-MAN-14", ManifestError)
def created_at_shape(value: Any) -> str | None:
    if isinstance(value, str) and _TIMESTAMP.fullmatch(value):
        return None
    return f"created_at {value!r} does not match {TIMESTAMP_PATTERN}"[:200]


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


@rule("R-MAN-15", ManifestError)
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
    for value, what, top in ((hour, "hour", 23), (minute, "minute", 59), (second, "second", 59)):
        if value > top:
            return f"{what} {value:02d} is not in 00-{top}"
    return None


@rule("R-MAN-16", ManifestError)
def producer_object(value: Any) -> str | None:
    return _object(value, "producer")


@rule("R-MAN-17", ManifestError)
def producer_name(producer: dict[str, Any]) -> str | None:
    return _short_string(producer.get("name"), "name" in producer, "producer.name")


@rule("R-MAN-18", ManifestError)
def producer_version(producer: dict[str, Any]) -> str | None:
    return _short_string(producer.get("version"), "version" in producer, "producer.version")


@rule("R-MAN-19", ManifestError)
def producer_environment(value: Any) -> str | None:
    return _string_map(value, "producer.environment")


@rule("R-MAN-20", ManifestError)
def producer_unknown(member: str) -> str | None:
    return _unknown(member)


@rule("R-MAN-21", ManifestError)
def metadata_object(value: Any) -> str | None:
    return _object(value, "metadata")


@rule("R-MAN-22", ManifestError)
def extensions_object(value: Any) -> str | None:
    return _object(value, "extensions")


@rule("R-MAN-23", ManifestError)
def components_object(value: Any) -> str | None:
    return _object(value, "components")


# -- §6 components ------------------------------------------------------------------------------
@rule("R-CMP-1", ManifestError)
def component_name(name: str) -> str | None:
    if _NAME.fullmatch(name):
        return None
    return f"component name {name!r} does not match ^[A-Za-z0-9_][A-Za-z0-9._-]{{0,127}}$"[:200]


@rule("R-CMP-2", ManifestError)
def component_record(record: Any, member: str | None = None, typed: bool = False) -> str | None:
    """The record is an object (``member`` None), holding each required member; ``typed``: the string
    member ``member`` (``path``, Table 6-1) is a string."""
    if member is None:
        return None if isinstance(record, dict) else "a component record must be an object"
    if typed:
        value = record[member]
        return None if isinstance(value, str) else f"{member} {value!r} is not a string"[:200]
    return _missing(record, member)


@rule("R-CMP-3", ManifestError)
def component_unknown(member: str) -> str | None:
    return _unknown(member)


@rule("R-CMP-4", ManifestError)
def component_kind(kind: Any) -> str | None:
    if isinstance(kind, str) and _KIND.fullmatch(kind):
        return None
    return f"kind {kind!r} is not 'tree', 'json', 'files' or a namespaced kind"[:200]


@rule("R-CMP-5", ManifestError)
def kind_version(value: Any) -> str | None:
    return _integer(value, "kind_version", 1)


@rule("R-CMP-9", ManifestError)
def files_object(value: Any) -> str | None:
    return _object(value, "files")


@rule("R-CMP-10", ManifestError)
def component_hints(value: Any) -> str | None:
    return _string_map(value, "hints")


@rule("R-CMP-11", ManifestError)
def component_metadata(value: Any) -> str | None:
    return _object(value, "metadata")


@rule("R-CMP-13", ManifestError)
def file_entry(entry: Any, member: str | None = None) -> str | None:
    """The entry is an object (``member`` None), holding ``size`` and ``crc32c``."""
    if member is None:
        return None if isinstance(entry, dict) else "a file entry must be an object"
    return _missing(entry, member)


@rule("R-CMP-14", ManifestError)
def file_entry_unknown(member: str) -> str | None:
    return _unknown(member)


@rule("R-CMP-15", ManifestError)
def file_size(value: Any) -> str | None:
    return _integer(value, "size", 0)


def _fixed_files(kind: str, files: dict[str, Any]) -> str | None:
    expected = KIND_FILES[kind]
    if expected is None or set(files) == expected:
        return None
    return (f"a {kind!r} component of kind_version 1 has exactly the files {sorted(expected)}, "
            f"got {sorted(files)}")[:300]


@rule("R-CMP-16", ManifestError)
def tree_files(files: dict[str, Any]) -> str | None:
    return _fixed_files("tree", files)


@rule("R-CMP-17", ManifestError)
def json_files(files: dict[str, Any]) -> str | None:
    return _fixed_files("json", files)


# -- §11 checksums in the manifest ------------------------------------------------------------
@rule("R-CHK-4", ManifestError)
def crc32c_string(value: Any) -> str | None:
    return None if isinstance(value, str) and _CRC.fullmatch(value) else "crc32c must be 8 lowercase hex digits"


@rule("R-CHK-5", ManifestError)
def sha256_string(value: Any) -> str | None:
    return None if isinstance(value, str) and _SHA.fullmatch(value) else "sha256 must be 64 lowercase hex digits"


# -- §7 extensions ------------------------------------------------------------------------------
@rule("R-EXT-1", ManifestError)
def extension_name(name: str) -> str | None:
    if _EXTENSION_NAME.fullmatch(name):
        return None
    return f"extension name {name!r} does not match {EXTENSION_NAME_PATTERN}"


@rule("R-EXT-2", ManifestError)
def extension_record(record: Any, member: str | None = None) -> str | None:
    """The record is an object (``member`` None), holding ``version``, ``must_understand`` and ``data``."""
    if member is None:
        return None if isinstance(record, dict) else "an extension record must be an object"
    return _missing(record, member)


@rule("R-EXT-3", ManifestError)
def extension_unknown(member: str) -> str | None:
    return _unknown(member)


@rule("R-EXT-4", ManifestError)
def extension_version(value: Any) -> str | None:
    return _integer(value, "version", 1)


@rule("R-EXT-5", ManifestError)
def must_understand(value: Any) -> str | None:
    return None if type(value) is bool else "must_understand must be true or false"


# -- §14 limits on the manifest ------------------------------------------------------------------
@rule("R-LIM-5", LimitExceeded)
def component_count(components: dict[str, Any]) -> str | None:
    count = len(components)
    return f"{count} components, limit {MAX_COMPONENTS}" if count > MAX_COMPONENTS else None


@rule("R-LIM-6", LimitExceeded)
def file_count(total: int) -> str | None:
    return f"more than {MAX_FILES} file entries" if total > MAX_FILES else None

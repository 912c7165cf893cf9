"""Path rules (spec §4 "Paths"): every name read from a file is checked here before use.

Lengths are checked before the grammar (R-LIM-7, R-LIM-8, then R-PATH-n), so a
129-byte segment is a :class:`LimitExceeded`, not an :class:`UnsafePath`.

>>> check_relative_path("components/model/data.bin")
'components/model/data.bin'
>>> check_relative_path("../etc/passwd")
Traceback (most recent call last):
...
opencheckpoint.format.errors.UnsafePath: UnsafePath: path segment '..' does not match ^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$ [R-PATH-1]
>>> check_relative_path("a" * 129)
Traceback (most recent call last):
...
opencheckpoint.format.errors.LimitExceeded: LimitExceeded: a path segment is 129 bytes, limit 128 [R-LIM-8]
"""  # noqa: E501  (doctest: an error message is shown whole, as users see it)

from __future__ import annotations

import re
from collections.abc import Iterable

from ..rules.paths import PATHS
from .errors import CheckpointError
from .limits import PATH_MAX_BYTES, SEGMENT_MAX_BYTES

SEGMENT_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$"
_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}", re.ASCII)
#: Component names follow the same rule as one path segment (R-CMP-1).
NAME_PATTERN = SEGMENT_PATTERN
#: The rules the segment grammar is reported under: a component ``path``, a file of a component's ``files``
#: inventory, a ZIP member name. A component name a writer is given is held to the component path's rule.
COMPONENT_PATH, INVENTORY_PATH, MEMBER_NAME = "R-PATH-1", "R-PATH-2", "R-PATH-5"
_FOLD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_fold(text: str) -> str:
    """ASCII case folding (spec §2.4): A-Z -> a-z, every other character unchanged."""
    return text.translate(_FOLD)


def _byte_length(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def path_limit_error(path: object) -> CheckpointError | None:
    """R-LIM-7 / R-LIM-8 for one path (``None`` when within the limits or not a string)."""
    if not isinstance(path, str):
        return None
    if len(path) * 4 <= SEGMENT_MAX_BYTES:  # even at 4 UTF-8 bytes a character: within both limits
        return None
    size = _byte_length(path)
    if size > PATH_MAX_BYTES:
        return PATHS.error("R-LIM-7", f"path is {size} bytes, limit {PATH_MAX_BYTES}")
    for segment in path.split("/"):
        size = _byte_length(segment)
        if size > SEGMENT_MAX_BYTES:
            return PATHS.error("R-LIM-8", f"a path segment is {size} bytes, limit {SEGMENT_MAX_BYTES}")
    return None


def path_grammar_error(path: object, requirement: str) -> CheckpointError | None:
    """The segment grammar for one path, reported under ``requirement`` (R-PATH-1, -2 or -5)."""
    if not isinstance(path, str):
        return PATHS.error(requirement, f"path {path!r} is not a string")
    for segment in path.split("/"):
        if not _SEGMENT.fullmatch(segment):
            return PATHS.error(requirement, f"path segment {segment!r} does not match {SEGMENT_PATTERN}")
    return None


def check_segment(segment: str) -> str:
    """Raise :class:`UnsafePath` unless ``segment`` is one allowed path segment (or component name)."""
    if isinstance(segment, str) and "/" in segment:  # more than one segment
        raise PATHS.error(COMPONENT_PATH, f"name {segment!r} does not match {SEGMENT_PATTERN}")
    error = path_grammar_error(segment, COMPONENT_PATH)
    if error is not None:
        raise error
    return segment


def check_relative_path(path: str, requirement: str = COMPONENT_PATH) -> str:
    """Check lengths, then the grammar, of one path; return it unchanged."""
    error: CheckpointError | None = path_limit_error(path) or path_grammar_error(path, requirement)
    if error is not None:
        raise error
    return path


def conflict_errors(paths: Iterable[str]) -> list[CheckpointError]:
    """R-PATH-3 (equal after ASCII case folding) and R-PATH-4 (a file is also a directory prefix)."""
    errors: list[CheckpointError] = []
    folded: dict[str, str] = {}
    for path in paths:
        key = ascii_fold(path)
        if key in folded:
            errors.append(PATHS.error("R-PATH-3",
                                      f"paths {folded[key]!r} and {path!r} are equal after ASCII case folding"))
            continue
        folded[key] = path
    for key, path in folded.items():
        parts = key.split("/")
        for depth in range(1, len(parts)):
            prefix = "/".join(parts[:depth])
            if prefix in folded:
                errors.append(PATHS.error("R-PATH-4", f"{folded[prefix]!r} is a file and also a directory of {path!r}"))
                break
    return errors

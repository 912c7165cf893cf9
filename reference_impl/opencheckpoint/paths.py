"""Path rules (spec "Paths"): every name read from a file is checked here before use.

>>> check_relative_path("components/model/data.bin")
'components/model/data.bin'
>>> check_relative_path("../etc/passwd")
Traceback (most recent call last):
...
opencheckpoint.errors.UnsafePath: UnsafePath: path segment '..' is not allowed (segments match ^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$) [R-PATH-2]
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .errors import LimitExceeded, UnsafePath
from .limits import PATH_MAX_BYTES

SEGMENT_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$"
_SEGMENT = re.compile(SEGMENT_PATTERN)
#: Component names follow the same rule as one path segment.
NAME_PATTERN = SEGMENT_PATTERN


def check_segment(segment: str) -> str:
    """Raise :class:`UnsafePath` unless ``segment`` is one allowed path segment."""
    if not isinstance(segment, str) or not _SEGMENT.fullmatch(segment):
        raise UnsafePath(
            f"path segment {segment!r} is not allowed (segments match {SEGMENT_PATTERN})",
            section="R-PATH-2",
        )
    return segment


def check_relative_path(path: str) -> str:
    """Check a relative POSIX path from a manifest or archive and return it unchanged."""
    if not isinstance(path, str) or not path:
        raise UnsafePath(f"path {path!r} is empty or not a string", section="R-PATH-1")
    if len(path.encode("utf-8", "surrogatepass")) > PATH_MAX_BYTES:
        raise LimitExceeded(
            f"path is {len(path.encode('utf-8', 'surrogatepass'))} bytes, limit {PATH_MAX_BYTES}",
            section="R-LIM-6",
        )
    if path.startswith("/") or "\\" in path:
        raise UnsafePath(f"path {path!r} is absolute or uses '\\'", section="R-PATH-1")
    for segment in path.split("/"):
        check_segment(segment)
    return path


def check_no_conflicts(paths: Iterable[str]) -> None:
    """Reject paths equal after ASCII case folding, and a file that is also a directory prefix."""
    folded: dict[str, str] = {}
    for path in paths:
        key = path.lower()
        if key in folded:
            raise UnsafePath(
                f"paths {folded[key]!r} and {path!r} differ only in case", section="R-PATH-3"
            )
        folded[key] = path
    for key, path in folded.items():
        parts = key.split("/")
        for depth in range(1, len(parts)):
            prefix = "/".join(parts[:depth])
            if prefix in folded:
                raise UnsafePath(
                    f"{folded[prefix]!r} is a file and also a directory of {path!r}",
                    section="R-PATH-4",
                )

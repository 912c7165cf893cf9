"""Strict I-JSON (RFC 7493) parsing and canonical writing for every JSON document of the format.

The standard library parser accepts duplicate keys (last wins), ``NaN`` and
``Infinity``, lone surrogates and unbounded nesting; each is a way for two
readers to see different documents, so each is rejected here.

>>> parse_ijson(b'{"a": 1}', file="manifest.json")
{'a': 1}
>>> parse_ijson(b'{"a": 1, "a": 2}', file="manifest.json")
Traceback (most recent call last):
...
opencheckpoint.errors.ManifestError: ManifestError: manifest.json: $: duplicate member name 'a' [R-MAN-2]
"""

from __future__ import annotations

import json
from typing import Any

from .errors import LimitExceeded, ManifestError
from .limits import JSON_MAX_DEPTH, JSON_MAX_SAFE_INT


class _Reject(Exception):
    def __init__(self, message: str, section: str) -> None:
        super().__init__(message)
        self.section = section


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Reject(f"duplicate member name {key!r}", "R-MAN-2")
        result[key] = value
    return result


def _constant(name: str) -> Any:
    raise _Reject(f"{name} is not allowed in I-JSON", "R-MAN-3")


def _integer(text: str) -> int:
    value = int(text)
    if abs(value) > JSON_MAX_SAFE_INT:
        raise _Reject(f"integer {text} is outside +-(2**53-1)", "R-MAN-4")
    return value


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _Reject(f"number {text} overflows binary64", "R-MAN-4")
    return value


def _check_depth_and_strings(value: Any) -> None:
    """Iteratively check nesting depth and that every string is valid Unicode."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            if depth > JSON_MAX_DEPTH:
                raise LimitExceeded(f"JSON nesting deeper than {JSON_MAX_DEPTH}", section="R-LIM-2")
            for key, item in node.items():
                _check_string(key)
                stack.append((item, depth + 1))
        elif isinstance(node, list):
            if depth > JSON_MAX_DEPTH:
                raise LimitExceeded(f"JSON nesting deeper than {JSON_MAX_DEPTH}", section="R-LIM-2")
            stack.extend((item, depth + 1) for item in node)
        elif isinstance(node, str):
            _check_string(node)


def _check_string(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ManifestError("string contains a lone surrogate", section="R-MAN-1") from None


def parse_ijson(data: bytes, *, file: str) -> Any:
    """Parse UTF-8 I-JSON bytes, raising :class:`ManifestError`/:class:`LimitExceeded` with ``file``."""
    try:
        if data.startswith(b"\xef\xbb\xbf"):
            raise ManifestError("starts with a byte order mark", section="R-MAN-1")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ManifestError(f"not UTF-8 ({exc.reason} at byte {exc.start})", section="R-MAN-1") from None
        try:
            value = json.loads(
                text,
                object_pairs_hook=_pairs,
                parse_constant=_constant,
                parse_int=_integer,
                parse_float=_float,
            )
        except _Reject as exc:
            raise ManifestError(str(exc), section=exc.section) from None
        except RecursionError:
            raise LimitExceeded(f"JSON nesting deeper than {JSON_MAX_DEPTH}", section="R-LIM-2") from None
        except json.JSONDecodeError as exc:
            raise ManifestError(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", section="R-MAN-1") from None
        _check_depth_and_strings(value)
        return value
    except (ManifestError, LimitExceeded) as exc:
        raise exc.at(file=file, field="$") from None


def dump_json(value: Any) -> str:
    """Write JSON the way the reference writer does: 2-space indent, UTF-8, no NaN."""
    return json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False)

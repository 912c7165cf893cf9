"""Strict I-JSON (RFC 7493) parsing for every JSON document of the format (spec §5.1).

The standard library parser accepts duplicate keys (last wins), ``NaN`` and
``Infinity``, lone surrogates, numbers that overflow binary64 and unbounded
nesting; each is a way for two readers to see different documents, so each
is rejected here with the requirement it breaks.

The same rules apply to ``value.json`` (R-CMP-18); there the error names
R-CMP-18 and the manifest rule it applies.

>>> parse_ijson(b'{"a": 1}', file="manifest.json")
{'a': 1}
>>> parse_ijson(b'{"a": 1, "a": 2}', file="manifest.json")
Traceback (most recent call last):
...
opencheckpoint.format.errors.ManifestError: ManifestError: manifest.json: $: duplicate member name 'a' [R-MAN-4]
>>> parse_ijson(b'[9007199254740992]', file="manifest.json")
Traceback (most recent call last):
...
opencheckpoint.format.errors.LimitExceeded: LimitExceeded: manifest.json: $: integer 9007199254740992 is outside +-(2**53-1) [R-LIM-4]
"""  # noqa: E501  (doctest: an error message is shown whole, as users see it)

from __future__ import annotations

import json
import math
from typing import Any

from ..rules.ijson import IJSON
from .errors import CheckpointError
from .limits import JSON_MAX_DEPTH, JSON_MAX_SAFE_INT

#: Longest decimal integer token that can be within R-LIM-4 ("-" excluded): 9007199254740991.
_MAX_INT_DIGITS = len(str(JSON_MAX_SAFE_INT))


class _Reject(Exception):
    def __init__(self, error: CheckpointError) -> None:
        super().__init__(error.message)
        self.error = error


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Reject(IJSON.error("R-MAN-4", f"duplicate member name {key!r}"))
        result[key] = value
    return result


def _not_json(why: str) -> CheckpointError:
    """R-MAN-3: the text is not JSON by RFC 8259 (a syntax error, or a token Python's parser would accept)."""
    return IJSON.error("R-MAN-3", why)


def _constant(name: str) -> Any:
    raise _Reject(_not_json(f"{name} is not a JSON token"))


def _integer(text: str) -> int:
    # Length first: int() of a huge token is slow (and Python caps it at 4300 digits).
    if len(text.lstrip("-").lstrip("0")) > _MAX_INT_DIGITS or abs(int(text)) > JSON_MAX_SAFE_INT:
        shown = text if len(text) <= 40 else text[:20] + "..."
        raise _Reject(IJSON.error("R-LIM-4", f"integer {shown} is outside +-(2**53-1)"))
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        shown = text if len(text) <= 40 else text[:20] + "..."
        raise _Reject(IJSON.error("R-MAN-6", f"number {shown} does not round to a finite binary64"))
    return value


def _too_deep() -> CheckpointError:
    return IJSON.error("R-LIM-3", f"JSON nesting deeper than {JSON_MAX_DEPTH}")


def _walk(value: Any) -> None:
    """Check nesting depth (R-LIM-3) and that no string holds a lone surrogate (R-MAN-5)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            if depth > JSON_MAX_DEPTH:
                raise _too_deep()
            for key, item in node.items():
                _check_string(key)
                stack.append((item, depth + 1))
        elif isinstance(node, list):
            if depth > JSON_MAX_DEPTH:
                raise _too_deep()
            stack.extend((item, depth + 1) for item in node)
        elif isinstance(node, str):
            _check_string(node)


def _check_string(text: str) -> None:
    encode_utf8(text)


def encode_utf8(text: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate (no UTF-8 file can hold it) is R-MAN-5, on read and on write."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise IJSON.error("R-MAN-5", "a string holds an escaped surrogate that is not part of a pair") from None


def _parse(data: bytes) -> Any:
    if data[:3] == b"\xef\xbb\xbf":
        raise IJSON.error("R-MAN-2", "starts with a byte order mark")
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IJSON.error("R-MAN-1", f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant, parse_int=_integer,
                           parse_float=_float)
    except _Reject as exc:
        raise exc.error from None
    except RecursionError:
        raise _too_deep() from None
    except json.JSONDecodeError as exc:
        raise _not_json(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    _walk(value)
    return value


def parse_ijson(data: bytes, *, file: str, document: str = "manifest") -> Any:
    """Parse UTF-8 I-JSON bytes; raise :class:`ManifestError`/:class:`LimitExceeded` naming ``file``.

    ``document="value"`` reports encoding errors of a ``value.json`` under R-CMP-18.
    """
    try:
        return _parse(data)
    except CheckpointError as exc:
        if document == "value" and exc.rule and exc.rule.startswith("R-MAN-"):
            exc = IJSON.error("R-CMP-18", f"{exc.message} (value.json must satisfy {exc.rule})")
        raise exc.at(file=file, field="$") from None


def dump_json(value: Any) -> str:
    """Write JSON the way the reference writer does: 2-space indent, UTF-8, no NaN."""
    return json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False)


def is_json_value(value: Any, depth: int = 1) -> bool:
    """True for values that round-trip exactly through I-JSON (str keys, finite floats, safe ints)."""
    if depth > JSON_MAX_DEPTH:
        return False
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return True
    if kind is int:
        return bool(abs(value) <= JSON_MAX_SAFE_INT)  # value is typed Any here: bool() keeps the result a bool
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        return all(type(k) is str and is_json_value(v, depth + 1) for k, v in value.items())
    if kind is list:
        return all(is_json_value(v, depth + 1) for v in value)
    return False

"""Strict I-JSON parsing per spec section 5.1 (R-MAN-1..6, R-LIM-3, R-LIM-4).

Python's json module (C scanner) is used for the grammar, with hooks for the
extra I-JSON rules; a bracket pre-scan bounds the nesting depth before parsing.
"""
from __future__ import annotations

import json
import math
import re

from errors import CheckpointError

MAX_DEPTH = 64
MAX_INT = 2**53 - 1

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)


class JFloat(float):
    """A JSON number token with a fraction or exponent part (not an integer token)."""
    __slots__ = ("token",)
    token: str


def _depth_scan(text: str, file: str):
    depth = 0
    for m in _TOKEN.finditer(text):
        c = m.group()[0]
        if c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise CheckpointError("LimitExceeded", file, f"character offset {m.start()}",
                                      f"JSON nesting depth exceeds {MAX_DEPTH}", "R-LIM-3")
        elif c in "]}":
            depth -= 1


def parse(data: bytes, file: str):
    """Parse bytes as I-JSON.  Returns Python values: dict (ordered), list, str,
    int (integer token), JFloat (other number token), bool, None."""
    if data[:3] == b"\xef\xbb\xbf":
        raise CheckpointError("ManifestError", file, "byte 0", "begins with a UTF-8 byte order mark", "R-MAN-2")
    try:
        text = data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as e:
        raise CheckpointError("ManifestError", file, f"byte {e.start}", "invalid UTF-8", "R-MAN-1") from None
    _depth_scan(text, file)

    def parse_int(tok: str):
        digits = tok[1:] if tok.startswith("-") else tok
        if len(digits) > 16 or int(digits) > MAX_INT:
            raise CheckpointError("LimitExceeded", file, "number " + tok[:40],
                                  "integer token magnitude exceeds 2^53-1", "R-LIM-4")
        return int(tok)

    def parse_float(tok: str):
        v = float(tok)
        if math.isinf(v):
            raise CheckpointError("ManifestError", file, "number " + tok[:40],
                                  "number does not round to a finite binary64 value", "R-MAN-6")
        f = JFloat(v)
        f.token = tok
        return f

    def parse_constant(tok: str):
        raise CheckpointError("ManifestError", file, "token " + tok, "NaN/Infinity are not JSON", "R-MAN-3")

    def pairs_hook(pairs):
        d = {}
        for k, v in pairs:
            if k in d:
                raise CheckpointError("ManifestError", file, "member " + _short(k),
                                      "duplicate member name", "R-MAN-4")
            d[k] = v
        return d

    try:
        value = json.loads(text, parse_int=parse_int, parse_float=parse_float,
                           parse_constant=parse_constant, object_pairs_hook=pairs_hook)
    except CheckpointError:
        raise
    except RecursionError:
        raise CheckpointError("LimitExceeded", file, "", "JSON nesting too deep", "R-LIM-3") from None
    except json.JSONDecodeError as e:
        raise CheckpointError("ManifestError", file, f"character offset {e.pos}",
                              "not a JSON text: " + e.msg, "R-MAN-3") from None
    except ValueError as e:
        raise CheckpointError("ManifestError", file, "", "not a JSON text: " + str(e), "R-MAN-3") from None
    _check_surrogates(value, file, "")
    return value


def _short(s: str) -> str:
    return json.dumps(s[:60])


def _has_surrogate(s: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in s) if not s.isascii() else False


def _check_surrogates(v, file, ptr):
    stack = [(v, ptr)]
    while stack:
        v, p = stack.pop()
        if isinstance(v, str):
            if _has_surrogate(v):
                raise CheckpointError("ManifestError", file, p or "/", "string contains an unpaired surrogate escape",
                                      "R-MAN-5")
        elif isinstance(v, dict):
            for k, x in v.items():
                if _has_surrogate(k):
                    raise CheckpointError("ManifestError", file, p + "/" + pointer_escape(k),
                                          "member name contains an unpaired surrogate escape", "R-MAN-5")
                stack.append((x, p + "/" + pointer_escape(k)))
        elif isinstance(v, list):
            for i, x in enumerate(v):
                stack.append((x, f"{p}/{i}"))


def pointer_escape(k: str) -> str:
    return k.replace("~", "~0").replace("/", "~1")

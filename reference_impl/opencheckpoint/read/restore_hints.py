"""The option that would fix a restore that does not fit: ``rename=``, ``subtree=`` or ``cast=`` (framework-neutral).

Adapters call :func:`suggest` with what did not fit; it returns a sentence to
append to the error, or ``""``. A hint is given only when following it would
make every missing entry found (a common prefix difference) or every
mismatched array convertible (same shapes, other dtypes).

>>> suggest(["weight", "bias"], ["module.weight", "module.bias"], [])
"; the stored keys differ by a prefix: pass rename={'module.': ''}"
>>> suggest(["0.weight"], ["encoder.0.weight", "head.weight"], [])
"; the target is the stored 'encoder' part: pass subtree='encoder'"
>>> suggest(["0.weight"], ["encoder.0.weight", "decoder.0.weight"], [])
"; the target matches the stored 'encoder' or 'decoder' part by name: pass subtree= with the one you mean"
>>> suggest([], [], [("bfloat16", "float32")])
"; same shapes, other dtypes: pass cast='widening' (or cast=True)"
"""

from __future__ import annotations

from collections.abc import Sequence

from .casting import is_widening


def _prefix_pair(stored: str, target: str) -> tuple[str, str] | None:
    """(stored prefix, target prefix) such that both paths share the rest, split on whole segments."""
    s_parts, t_parts = stored.split("."), target.split(".")
    common = 0
    while common < min(len(s_parts), len(t_parts)) and s_parts[-1 - common] == t_parts[-1 - common]:
        common += 1
    if common == 0:
        return None
    return ".".join(s_parts[: len(s_parts) - common]), ".".join(t_parts[: len(t_parts) - common])


def _renamed(path: str, old: str, new: str) -> str | None:
    if old and not path.startswith(old + "."):
        return None
    rest = path[len(old) + 1:] if old else path
    return f"{new}.{rest}" if new else rest


def prefix_fixes(missing: Sequence[str], unexpected: Sequence[str], limit: int = 4) -> list[tuple[str, str]]:
    """Prefix renames (stored prefix, target prefix) under each of which every missing key path is found."""
    if not missing or not unexpected:
        return []
    wanted = set(missing)
    fixes: list[tuple[str, str]] = []
    for stored in unexpected:
        pair = _prefix_pair(stored, missing[0])
        if pair is None or pair == ("", "") or pair in fixes:
            continue
        old, new = pair
        if wanted <= {_renamed(path, old, new) for path in unexpected}:
            fixes.append(pair)
            if len(fixes) == limit:
                break
    return fixes


def suggest(missing: Sequence[str], unexpected: Sequence[str], dtype_only: Sequence[tuple[str, str]]) -> str:
    """A hint naming the option that fixes the mismatch, or ``""``.

    Args:
        missing: target key paths the stored state lacks.
        unexpected: stored key paths the target lacks.
        dtype_only: (stored dtype, target dtype) of every array that differs in dtype only.
    """
    hints = []
    fixes = prefix_fixes(missing, unexpected)
    wanted = set(missing)
    parts = [old for old, new in fixes
             if new == "" and any(_renamed(p, old, new) not in wanted for p in unexpected)]
    if parts:
        hints.append(f"the target is the stored {parts[0]!r} part: pass subtree={parts[0]!r}" if len(parts) == 1
                     else "the target matches the stored " + " or ".join(map(repr, parts))
                     + " part by name: pass subtree= with the one you mean")
    elif fixes:
        old, new = fixes[0]
        hints.append("the stored keys differ by a prefix: pass rename={"
                     f"{(old + '.') if old else ''!r}: {(new + '.') if new else ''!r}}}")
    if dtype_only:
        if all(is_widening(stored, target) for stored, target in dtype_only):
            hints.append("same shapes, other dtypes: pass cast='widening' (or cast=True)")
        else:
            hints.append("same shapes, other dtypes: pass cast=True to convert (lossy conversions are reported)")
    return "".join(f"; {hint}" for hint in hints)


__all__ = ["prefix_fixes", "suggest"]

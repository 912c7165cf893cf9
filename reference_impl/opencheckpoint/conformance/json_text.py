"""The JSON text of a rendering: ``json.dumps(document, indent=2, ensure_ascii=False)``, streamed.

:func:`write_checkpoint_rendering` prints a checkpoint's rendering (``conformance impl read``).
:func:`write_json` writes a rendering document piece by piece; a :class:`LazyTree` in it is a
decoded tree value whose Appendix B.4 nodes are rendered (by :mod:`.canonical`) while they are
written, so memory stays at the decoded tree plus a constant. Work is linear in the output:
the indentation of a level is made once, a leaf node is built as one string and written with
the separator before it, and nothing is rendered twice or re-indented. (A deep tree's output is
mostly indentation, which Appendix B.1 fixes: it grows with nodes x depth, the work per node
does not.)

>>> pieces = []
>>> write_json({"a": LazyTree([None])}, pieces.append, 0)
>>> print("".join(pieces))
{
  "a": {
    "type": "list",
    "items": [
      {
        "type": "none"
      }
    ]
  }
}
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any, Final, TextIO

from ..tree.nodes import NamedTupleValue
from .canonical import render_content, render_key, render_node, rendering_document


# -- whole checkpoints -----------------------------------------------------------------------
def write_checkpoint_rendering(path: str | os.PathLike[str], out: TextIO) -> None:
    """Write ``dumps(render_checkpoint(path))`` to ``out`` (``conformance impl read``), not built in memory.

    Every check runs and every component is decoded before the first character is written
    (R-RDR-5); tree nodes are then rendered and written one at a time, so memory stays at the
    decoded trees plus a constant (the whole rendering is some 20 to 60 times the size of
    ``tree.msgpack``: a tree of 10 million ``nil`` took 5.7 GiB as one document).
    """

    def lazy_trees(reader: Any, name: str, raw: dict[str, Any]) -> Any:
        if raw["kind"] == "tree":
            return {"type": "tree", "root": LazyTree(reader.read(name))}
        return render_content(reader, name, raw)

    write_json(rendering_document(path, lazy_trees), out.write, 0)
    out.write("\n")


class LazyTree:
    """A decoded tree value whose Appendix B rendering is produced while it is written."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


#: JSON string escaping exactly as ``json.dumps(..., ensure_ascii=False)`` does it (the C accelerator).
_json_str: Final = json.encoder.encode_basestring
#: Every other scalar (floats: ``repr``, ``NaN``) as ``json.dumps`` writes it.
_json_other: Final = json.JSONEncoder(ensure_ascii=False).encode
#: ``"\n"`` and the indentation of each level, made once per level, not once per line.
_NEWLINES: list[str] = ["\n"]


def _newline(level: int) -> str:
    while len(_NEWLINES) <= level:
        _NEWLINES.append(_NEWLINES[-1] + "  ")
    return _NEWLINES[level]


def _scalar_text(value: Any) -> str:
    """One JSON scalar, as ``json.dumps(value, ensure_ascii=False)`` writes it."""
    if type(value) is str:
        return _json_str(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return int.__repr__(value)
    return _json_other(value)


def _text(value: Any, level: int) -> str:
    """A small JSON value at ``level`` (a rendered leaf node) as one string: ``json.dumps(indent=2)``."""
    if isinstance(value, dict):
        if not value:
            return "{}"
        inner = _newline(level + 1)
        parts = []
        for key, item in value.items():
            # str and int members (most of a node) inline: one call per node, not one per member
            kind = type(item)
            text = _json_str(item) if kind is str else int.__repr__(item) if kind is int else _text(item, level + 1)
            parts.append(f"{_json_str(key)}: {text}")
        return "{" + inner + ("," + inner).join(parts) + _newline(level) + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        inner = _newline(level + 1)
        return "[" + inner + ("," + inner).join(_text(item, level + 1) for item in value) + _newline(level) + "]"
    return _scalar_text(value)


def write_json(value: Any, write: Any, level: int) -> None:
    """``json.dumps(value, indent=2, ensure_ascii=False)``, written piece by piece.

    Work is linear in the output: indentation is made once per level (:func:`_newline`), a
    tree's containers are streamed by :func:`_write_node` and each of its other nodes is
    built once, as one string, by :func:`_text`; nothing is rendered twice or re-indented.
    """
    if type(value) is LazyTree:
        _write_node(value.value, write, level)
    elif isinstance(value, dict) and value:
        inner = _newline(level + 1)
        separator = "{" + inner
        for key, item in value.items():
            write(separator + _json_str(key) + ": ")
            write_json(item, write, level + 1)
            separator = "," + inner
        write(_newline(level) + "}")
    elif isinstance(value, (list, tuple)) and value:
        inner = _newline(level + 1)
        separator = "[" + inner
        for item in value:
            write(separator)
            write_json(item, write, level + 1)
            separator = "," + inner
        write(_newline(level) + "]")
    else:
        write(_text(value, level))


def _write_node(value: Any, write: Any, level: int, lead: str = "") -> None:
    """``lead`` and ``render_node(value)`` at ``level``: containers streamed, every other node by :func:`_text`.

    ``lead`` (the separator, indentation and key before the node) goes out with the node's first
    piece, one write per leaf; a container writes it with its own head at once, so no lead ever
    carries the heads of the containers above it (which would copy them once per level).
    """
    kind = type(value)
    one, two = _newline(level + 1), _newline(level + 2)
    if (kind is list or kind is tuple) and value:
        write(f'{lead}{{{one}"type": "{kind.__name__}",{one}"items": [')
        separator, cached = two, _LEAF_TEXT.get
        for item in value:
            # looked up inline: a list of ten million nil is what a hostile file holds most of per byte
            text = cached((level + 2, type(item), item)) if item is None or type(item) is bool else None
            if text is not None:
                write(separator + text)
            else:
                _write_node(item, write, level + 2, separator)
            separator = "," + two
    elif isinstance(value, NamedTupleValue) and value:
        head = f'{lead}{{{one}"type": "named_tuple",{one}"type_name": {_json_str(value.type_name)},{one}"fields": ['
        _write_pairs(head, map(_json_str, value._fields), value, write, level + 2)
    elif isinstance(value, dict) and value:
        keys = (_text(render_key(key), level + 3) for key in value)  # made one at a time: each holds its indent
        _write_pairs(f'{lead}{{{one}"type": "dict",{one}"items": [', keys, value.values(), write, level + 2)
    else:
        write(lead + _leaf_text(value, level))
        return
    write(f"{one}]{_newline(level)}}}")


#: (level, type, value) -> the text of a one-byte node (None, a bool, an int in -32..127, an empty list,
#: tuple or dict): what a hostile document can hold most of per byte, made once per level.
_LEAF_TEXT: dict[tuple[int, type, Any], str] = {}


def _leaf_text(value: Any, level: int) -> str:
    kind = type(value)
    if value is None or kind is bool or (kind is int and -32 <= value <= 127) or (
            (kind is list or kind is tuple or kind is dict) and not value):
        key = (level, kind, value if kind is not list and kind is not dict else None)
        text = _LEAF_TEXT.get(key)
        if text is None:
            text = _LEAF_TEXT[key] = _text(render_node(value), level)
        return text
    return _text(render_node(value), level)


def _write_pairs(head: str, keys: Iterable[str], items: Any, write: Any, level: int) -> None:
    """``head``, then the ``[key, node]`` elements of a dict's ``items`` or a named tuple's ``fields``."""
    inner, one = _newline(level), _newline(level + 1)
    write(head)
    separator = inner
    for key, item in zip(keys, items, strict=True):
        _write_node(item, write, level + 1, f"{separator}[{one}{key},{one}")
        separator = f"{inner}]," + inner
    write(inner + "]")


__all__ = ["LazyTree", "write_checkpoint_rendering", "write_json"]

"""A trainer's checkpoint dict as a tree document that comes back exactly, types included.

The tree codec stores dicts (``str`` and ``int`` keys), lists, tuples, ``None``, ``bool``,
``int``, ``float``, ``str``, ``bytes`` and arrays, and refuses at save what it cannot
bring back (R-WTR-3), naming the key path. Three things it keeps only in part are
recorded beside the value here, so that the dict a load returns is the one saved:

- an ``OrderedDict`` (stored as a plain dict, spec §8.3): its path, under ``"ordered"``;
- torch's ``state_dict()._metadata`` (the module versions ``load_state_dict`` reads),
  the one instance attribute of an ``OrderedDict`` kept, in the one shape torch gives
  it (module name to a dict of plain values): ``[path, "_metadata", value]`` under
  ``"attributes"``; any other attribute is refused at save, and at load;
- a NumPy array among torch tensors (a read gives every array in one framework): its
  path, under ``"numpy"``.

A path is the list of keys and indices from the document's root. Named tuples and
``torch.Size`` (they would come back as another tuple type) are refused here, naming
the key; everything else that cannot be stored exactly (a class instance, a dict
subclass, a set, a function) the codec refuses, naming the key. Nothing is pickled.

>>> from collections import OrderedDict
>>> import numpy as np
>>> weights = OrderedDict(w=np.zeros(2))
>>> weights._metadata = OrderedDict({"": {"version": 1}})
>>> document = to_document({"model": weights, "betas": (0.9, 0.99), "step": 3})
>>> sorted(document)
['attributes', 'numpy', 'ordered', 'value']
>>> back = from_document(document)
>>> type(back["model"]).__name__, type(back["model"]._metadata).__name__, back["betas"], back["step"]
('OrderedDict', 'OrderedDict', (0.9, 0.99), 3)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from ..format.errors import IncompatibleComponent, UnsupportedValue
from ..format.limits import TREE_MAX_DEPTH
from ..rules import required
from ..rules.tree import TREE

#: The one ``OrderedDict`` attribute kept: torch's ``state_dict()._metadata``.
METADATA = "_metadata"
_PLAIN = (type(None), bool, int, float, str)

#: The members of a document, in the order :func:`to_document` writes them.
DOCUMENT_KEYS = ("value", "attributes", "ordered", "numpy")

Path = list[Any]


class _Recorder:
    """One walk of a value: its plain copy (containers copied, leaves shared) and what the codec would lose."""

    def __init__(self) -> None:
        self.attributes: list[list[Any]] = []
        self.ordered: list[Path] = []
        self.numpy: list[Path] = []

    def walk(self, node: Any, path: Path) -> Any:
        kind = type(node)
        if kind is dict or kind is OrderedDict:
            if len(path) >= TREE_MAX_DEPTH:  # as the codec would (a value containing itself included)
                raise required(TREE.check("R-LIM-10", render(path), len(path) + 1))
            if kind is OrderedDict:
                self.ordered.append(path)
                for name in sorted(vars(node)):
                    problem = attribute_problem(name, getattr(node, name))
                    if problem:
                        raise UnsupportedValue(f"cannot store this OrderedDict's attribute {name!r}: {problem}",
                                               field=render(path))
                    entry: list[Any] = [path, name, None]
                    index = len(self.attributes)
                    self.attributes.append(entry)
                    entry[2] = self.walk(getattr(node, name), ["attributes", index, 2])
            return {key: self.walk(item, [*path, key]) for key, item in node.items()}
        if kind is list or kind is tuple:
            if len(path) >= TREE_MAX_DEPTH:
                raise required(TREE.check("R-LIM-10", render(path), len(path) + 1))
            return kind(self.walk(item, [*path, index]) for index, item in enumerate(node))
        if isinstance(node, tuple):
            raise UnsupportedValue(
                f"cannot store this {kind.__module__}.{kind.__qualname__} exactly: it would come back as a "
                "tuple of another type (a reader never imports a class a file names); store a plain tuple "
                "or dict instead", field=render(path))
        if kind is np.ndarray:
            self.numpy.append(path)
        return node


def to_document(value: Any) -> dict[str, Any]:
    """``value`` as the tree document ``{"value", "attributes", "ordered", "numpy"}`` (see the module docstring).

    Containers are copied, leaves (tensors, arrays) are not: the caller's value is left as it was.
    """
    recorder = _Recorder()
    plain = recorder.walk(value, ["value"])
    return {"value": plain, "attributes": recorder.attributes, "ordered": recorder.ordered,
            "numpy": recorder.numpy}


def from_document(document: Any, *, file: str | None = None) -> Any:
    """The value :func:`to_document` was given, from its document as a read returned it (torch tensors).

    A document that is not one (a hostile or damaged file) raises :class:`IncompatibleComponent`
    naming ``file``; nothing in it is imported or executed, attributes go to ``OrderedDict`` s only.
    """
    if not (type(document) is dict and tuple(document) == DOCUMENT_KEYS
            and all(type(document[key]) is list for key in DOCUMENT_KEYS[1:])):
        raise IncompatibleComponent(f"not a document of {__name__} (members {list(DOCUMENT_KEYS)})", file=file)
    for path in document["numpy"]:
        document = _replace(document, _checked_path(path, file), _as_numpy, file)
    for path in document["ordered"]:
        document = _replace(document, _checked_path(path, file), _as_ordered, file)
    for index, entry in enumerate(document["attributes"]):
        field = f"$.attributes[{index}]"
        if not (type(entry) is list and len(entry) == 3 and type(entry[1]) is str):
            raise IncompatibleComponent(f"attribute entry is not [path, name, value]: {entry!r:.200}", file=file,
                                        field=field)
        problem = attribute_problem(entry[1], entry[2])
        if problem:
            raise IncompatibleComponent(problem, file=file, field=field)
        owner = _follow(document, _checked_path(entry[0], file), file)
        if type(owner) is not OrderedDict or entry[0][0] != "value" or hasattr(owner, entry[1]):
            raise IncompatibleComponent(f"attribute {entry[1]!r} belongs to {entry[0]!r:.200}, which is not an "
                                        "OrderedDict of the value without one", file=file, field=field)
        setattr(owner, entry[1], entry[2])
    return document["value"]


def attribute_problem(name: str, value: Any) -> str | None:
    """What is wrong with an ``OrderedDict``'s attribute to store or to set back; None for torch's ``_metadata``.

    >>> attribute_problem("_metadata", {"": {"version": 1}, "net.0": {"version": None}}) is None
    True
    >>> attribute_problem("keys", 5)
    "only torch's state_dict()._metadata is kept, not 'keys'"
    """
    if name != METADATA:
        return f"only torch's state_dict()._metadata is kept, not {name!r:.100}"
    if not (type(value) in (dict, OrderedDict) and all(
            type(module) is str and type(entry) is dict
            and all(type(key) is str and type(item) in _PLAIN for key, item in entry.items())
            for module, entry in value.items())):
        return (f"{METADATA} is not torch's mapping of module names to dicts of plain values "
                "(None, bool, int, float, str)")
    return None


def render(path: Path) -> str:
    """A path as the codec's error messages write one: ``$.value.optimizer_states[0].state[3]``."""
    return "$" + "".join(f".{key}" if type(key) is str else f"[{key}]" for key in path)


def _checked_path(path: Any, file: str | None) -> Path:
    if not (type(path) is list and path and path[0] in ("value", "attributes")
            and all(type(key) in (str, int) for key in path)):
        raise IncompatibleComponent(f"not a path of the document: {path!r:.200}", file=file)
    return path


def _follow(node: Any, path: Path, file: str | None) -> Any:
    for key in path:
        try:
            node = node[key] if isinstance(node, (dict, list, tuple)) else None
        except (KeyError, IndexError, TypeError):
            node = None
        if node is None:
            raise IncompatibleComponent(f"the document has nothing at {render(path)}", file=file)
    return node


def _replace(node: Any, path: Path, change: Callable[[Any, str], Any], file: str | None) -> Any:
    """``node`` with the value at ``path`` changed (tuples on the way rebuilt, dicts and lists set in place)."""
    if not path:
        return change(node, file or "")
    key, rest = path[0], path[1:]
    child = _follow(node, [key], file)
    updated = _replace(child, rest, change, file)
    if type(node) is tuple:
        return tuple(updated if index == key else item for index, item in enumerate(node))
    node[key] = updated
    return node


def _as_numpy(leaf: Any, file: str) -> np.ndarray:
    if type(leaf) is np.ndarray:
        return leaf
    if type(leaf).__module__.split(".")[0] != "torch":
        raise IncompatibleComponent(f"the document records a NumPy array where it holds a {type(leaf).__name__}",
                                    file=file or None)
    array: np.ndarray = leaf.cpu().numpy()
    return array


def _as_ordered(mapping: Any, file: str) -> OrderedDict[Any, Any]:
    if type(mapping) is not dict:
        raise IncompatibleComponent(f"the document records an OrderedDict where it holds a "
                                    f"{type(mapping).__name__}", file=file or None)
    return OrderedDict(mapping)

"""Dataclass instances (training configs) as tree components: :class:`DataclassAdapter`.

Split from :mod:`.base`, which re-exports every public name.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Any

from ..format.errors import IncompatibleComponent
from .component_io import ComponentReader, ComponentWriter
from .conform import conform
from .protocol import Adapter, PreparedRestore


class DataclassAdapter(Adapter):
    """A dataclass instance (a training config): its fields as a tree dict, restored into a live instance.

    Nested dataclasses are stored as dicts and rebuilt from the live
    instance's own types; tuples stay tuples, arrays follow the live leaf's
    type (:mod:`.conform`). A mutable instance is restored in place; a frozen
    one cannot be, so the restored copy is returned (``LoadResult.values``).
    Field names must match under ``strict="error"``; otherwise the fields
    the checkpoint lacks keep their live values.
    """

    kind = "tree"

    def save(self, value: Any, writer: ComponentWriter) -> None:
        writer.hints["class"] = f"{type(value).__module__}.{type(value).__qualname__}"
        writer.write_tree(_dataclass_tree(value))

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        problems: list[str] = []
        rebuilt = _rebuild_dataclass(reader.tree("numpy"), value, "$", reader.map_location, problems)
        if problems and strict == "error":
            raise IncompatibleComponent(f"{type(value).__qualname__} does not fit the stored fields: "
                                        + "; ".join(problems))
        if problems and strict == "warn":
            warnings.warn(f"component {reader.name!r}: " + "; ".join(problems), stacklevel=5)
        frozen = type(value).__dataclass_params__.frozen

        def apply() -> Any:
            if frozen:
                return rebuilt
            for item in dataclasses.fields(value):
                setattr(value, item.name, getattr(rebuilt, item.name))
            return None

        return PreparedRestore(apply)


def is_dataclass_instance(value: Any) -> bool:
    """A dataclass instance other than the tree's own value types (a PRNG key, a dtype value)."""
    from ..tree.nodes import DtypeValue, PRNGKeyValue

    return (dataclasses.is_dataclass(value) and not isinstance(value, type)
            and not isinstance(value, (PRNGKeyValue, DtypeValue)))


def _dataclass_tree(value: Any) -> Any:
    if is_dataclass_instance(value):
        return {item.name: _dataclass_tree(getattr(value, item.name)) for item in dataclasses.fields(value)}
    if type(value) is dict:
        return {key: _dataclass_tree(item) for key, item in value.items()}
    if type(value) is list:
        return [_dataclass_tree(item) for item in value]
    if type(value) is tuple:
        return tuple(_dataclass_tree(item) for item in value)
    return value


def _rebuild_dataclass(stored: Any, live: Any, path: str, map_location: Any, problems: list[str]) -> Any:
    if not is_dataclass_instance(live):
        if _holds_dataclass(live):
            return _rebuild_container(stored, live, path, map_location, problems)
        return conform(stored, live, map_location=map_location).value
    if not isinstance(stored, dict):
        problems.append(f"{path}: stored {type(stored).__name__}, the live value is a {type(live).__qualname__}")
        return live
    names = [item.name for item in dataclasses.fields(live)]
    problems += [f"{path}.{name}: missing from the checkpoint" for name in names if name not in stored]
    problems += [f"{path}.{name}: not a field of {type(live).__qualname__}" for name in stored if name not in names]
    rebuilt = copy.copy(live)
    for name in names:
        if name in stored:
            # object.__setattr__: frozen dataclasses and init=False fields are rebuilt the same way
            object.__setattr__(rebuilt, name, _rebuild_dataclass(stored[name], getattr(live, name),
                                                                  f"{path}.{name}", map_location, problems))
    return rebuilt


def _holds_dataclass(live: Any) -> bool:
    """A plain list, tuple or dict with a dataclass instance among its items (at any depth of such containers)."""
    if type(live) in (list, tuple):
        return any(is_dataclass_instance(item) or _holds_dataclass(item) for item in live)
    if type(live) is dict:
        return any(is_dataclass_instance(item) or _holds_dataclass(item) for item in live.values())
    return False


def _rebuild_container(stored: Any, live: Any, path: str, map_location: Any, problems: list[str]) -> Any:
    """Dataclasses inside a list, tuple or dict field come back as the live items' types, item by item.

    The stored tree holds their fields as dicts: only a live dataclass at the same
    place can give the type back, so an item without one is a problem (raised under
    ``strict="error"``) rather than a dict passed off as the dataclass.
    """
    if type(live) is dict:
        if not isinstance(stored, dict):
            problems.append(f"{path}: stored {type(stored).__name__}, the live value is a dict")
            return live
        missing = [key for key in stored if key not in live and isinstance(stored[key], dict)]
        problems += [f"{path}[{key!r}]: no live dataclass to rebuild the stored item into" for key in missing]
        return {key: (_rebuild_dataclass(item, live[key], f"{path}[{key!r}]", map_location, problems)
                      if key in live else conform(item, None, map_location=map_location).value)
                for key, item in stored.items() if key not in missing}
    if not isinstance(stored, (list, tuple)) or len(stored) != len(live):
        count = len(stored) if isinstance(stored, (list, tuple)) else 1
        problems.append(f"{path}: stored {type(stored).__name__} of {count} items, the live "
                        f"{type(live).__name__} of dataclasses has {len(live)}: kept the live value")
        return live
    items = [_rebuild_dataclass(item, live_item, f"{path}[{i}]", map_location, problems)
             for i, (item, live_item) in enumerate(zip(stored, live, strict=True))]
    return items if type(live) is list else tuple(items)

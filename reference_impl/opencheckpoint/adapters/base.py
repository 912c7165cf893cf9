"""The adapter protocol and the framework-free adapters.

An adapter saves one live value as one component and restores it. Built in:

* :class:`StateDictAdapter` — objects with ``state_dict()`` / ``load_state_dict()``
  (torch modules and optimizers, custom classes); a ``tree`` component.
* :class:`DumpLoadAdapter` — objects with ``dump(path)`` / ``load(path)``; a ``files`` component.
* :class:`JsonAdapter` — JSON values (configs); a ``json`` component.
* :class:`TreeAdapter` — arrays and nested dicts/lists/tuples; a ``tree`` component.

Custom adapters subclass :class:`Adapter` and are registered per type
(:func:`register_adapter`) or per checkpoint instance. :func:`resolve_adapter`
picks the adapter of a value (the order is decision record 0010's).

The protocol lives in :mod:`.protocol`, the component I/O in
:mod:`.component_io`, the state-dict and dataclass adapters in
:mod:`.state_dict` and :mod:`.dataclass_adapter`; this module re-exports
them, so ``from opencheckpoint.adapters.base import ...`` keeps working.

Restoring is two-phase so that :meth:`Checkpoint.load
<opencheckpoint.Checkpoint.load>` is atomic across components:
:meth:`Adapter.prepare` reads, verifies and checks everything (checksums,
shapes, dtypes, structure) without touching the live object and returns a
:class:`PreparedRestore`; only when every component has been prepared is
each one's :meth:`PreparedRestore.apply` run. An adapter that defines only
the one-phase :meth:`Adapter.load` still works: its component's bytes are
verified in phase 1 and its ``load`` runs in phase 2 (``checked=False``:
it may still raise there).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..format import frameworks as registry
from ..format.errors import IncompatibleComponent
from ..format.strict_json import is_json_value
from ..read.restore_plan import fit_structure
from . import numpy_rng
from .component_io import ComponentReader, ComponentWriter
from .conform import conform
from .dataclass_adapter import DataclassAdapter, is_dataclass_instance
from .numpy_rng import is_random_state
from .protocol import (
    Adapter,
    PreparedRestore,
    container_framework,
    framework_of,
    module_framework,
    prepare_restore,
)
from .state_dict import ATTRIBUTES_KEY, StateDictAdapter, lift_attributes, read_state, write_state

__all__ = [
    "ATTRIBUTES_KEY",
    "Adapter",
    "ComponentReader",
    "ComponentWriter",
    "DataclassAdapter",
    "DumpLoadAdapter",
    "JsonAdapter",
    "PreparedRestore",
    "StateDictAdapter",
    "TreeAdapter",
    "container_framework",
    "framework_of",
    "is_dataclass_instance",
    "is_json_value",
    "is_random_state",
    "lift_attributes",
    "module_framework",
    "prepare_restore",
    "read_state",
    "register_adapter",
    "resolve_adapter",
    "stored_kind_adapter",
    "write_state",
]


class DumpLoadAdapter(Adapter):
    """``dump(path)`` writes any files into the component directory; ``load(path)`` reads them back.

    ``CheckpointOptions``' ``save_args``/``save_kwargs`` go to ``dump(path, ...)``
    and ``load_args``/``load_kwargs`` to ``load(path, ...)``.
    """

    kind = "files"
    takes_method_args = True

    def save(self, value: Any, writer: ComponentWriter) -> None:
        writer.hints["class"] = f"{type(value).__module__}.{type(value).__qualname__}"
        writer.directory.mkdir(parents=True, exist_ok=True)
        value.dump(writer.directory, *writer.method_args, **writer.method_kwargs)
        writer.inventory_directory()

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        reader.verify_bytes()

        def apply() -> None:
            with reader.directory() as directory:
                value.load(directory, *reader.method_args, **reader.method_kwargs)

        # The object's own load() reads the files: nothing can check beforehand that it accepts them.
        return PreparedRestore(apply, checked=False)


class JsonAdapter(Adapter):
    """A JSON value stored as ``value.json``; loading returns it (and refreshes a dict/list in place)."""

    kind = "json"

    def save(self, value: Any, writer: ComponentWriter) -> None:
        if not is_json_value(value):
            raise IncompatibleComponent("value is not I-JSON (str keys, finite floats, ints within 2**53)")
        writer.write_json(value)

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        loaded = reader.json()

        def apply() -> Any:
            _refresh_in_place(value, loaded)
            return loaded

        return PreparedRestore(apply)


class TreeAdapter(Adapter):
    """Arrays and nested containers stored as a tree; arrays are restored into existing ones in place.

    A NumPy restore is verify-first (all or nothing): every array of the
    component is checked before any existing array is written, so a corrupt
    checkpoint raises :class:`~opencheckpoint.format.errors.IntegrityError` and
    leaves the live arrays as they were. ``verify=False`` (the caller's
    explicit opt-out) fills them in one pass without checks.
    """

    kind = "tree"

    def save(self, value: Any, writer: ComponentWriter) -> None:
        writer.write_tree(value)

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        if not reader.plan.selects and (isinstance(value, np.ndarray) or (
                isinstance(value, (dict, list)) and container_framework(value) == "numpy")):
            if isinstance(value, np.ndarray):
                _check_bare_array(value, reader)
            # Arrays that fit are filled where they are (no intermediate copy), after every array
            # of the component passed its checks (CheckpointReader.prepare_into).
            reader.per_rank(reader.reader.decoded_layout(reader.name)[0].root, value)  # refused now, not later
            fill = reader.prepare_into(value)

            def apply_numpy() -> Any:
                loaded = reader.per_rank(fill(), value)
                if isinstance(value, np.ndarray) and isinstance(loaded, np.ndarray):
                    if value.flags.writeable and loaded is not value:
                        np.copyto(value, loaded)
                    return loaded
                # The live value decides each leaf and container, whatever the walk above saw: a
                # tensor or named tuple past its budget, a strided view or memmap the reader could
                # not fill in place (copied into now), an OrderedDict or torch.Size.
                conformed = conform(loaded, value, in_place=True)
                conformed.copy_into_live()
                _refresh_in_place(value, conformed.value)
                return conformed.value

            return PreparedRestore(apply_numpy)
        # Framework leaves (torch tensors in a plain dict): the live leaf's type decides what
        # each stored array becomes; exact fits are copied into the live tensors in phase 2.
        stored = reader.tree("numpy")
        if reader.plan.selects:  # renamed key paths: flat for a flat target, nested for a nested one
            stored = fit_structure(stored, value)
        conformed = conform(reader.per_rank(stored, value), value, map_location=reader.map_location, in_place=True)

        def apply() -> Any:
            conformed.copy_into_live()
            _refresh_in_place(value, conformed.value)
            return conformed.value

        return PreparedRestore(apply)


def _check_bare_array(value: np.ndarray, reader: ComponentReader) -> None:
    """A bare live array takes only an array of its exact shape and dtype (R-ERR-4)."""
    decoded, _, _ = reader.reader.decoded_layout(reader.name)
    from ..tree.nodes import ArrayRef

    root = decoded.root
    if not isinstance(root, ArrayRef):
        raise IncompatibleComponent(f"stored value is not an array; the target is {value.dtype}{list(value.shape)}")
    if tuple(root.shape) != value.shape or np.dtype(_numpy_dtype_name(root.dtype)) != value.dtype:
        raise IncompatibleComponent(
            f"stored {root.dtype}{list(root.shape)} does not fit {value.dtype}{list(value.shape)}")


def _numpy_dtype_name(name: str) -> Any:
    from ..format.dtypes import numpy_dtype

    return numpy_dtype(name)


def _refresh_in_place(value: Any, loaded: Any) -> None:
    if isinstance(value, dict) and isinstance(loaded, dict):
        value.clear()
        value.update(loaded)
    elif isinstance(value, list) and isinstance(loaded, list):
        value[:] = loaded


_TYPE_ADAPTERS: list[tuple[type, Adapter]] = []


def register_adapter(component_type: type, adapter: Adapter) -> None:
    """Use ``adapter`` for every value of ``component_type`` (most recent registration wins)."""
    _TYPE_ADAPTERS.insert(0, (component_type, adapter))


def _lookup(registry: list[tuple[type, Adapter]], value: Any) -> Adapter | None:
    for component_type, adapter in registry:
        if isinstance(value, component_type):
            return adapter
    return None


def stored_kind_adapter(value: Any, chosen: Adapter, stored_kind: str) -> Adapter:
    """The adapter for loading a plain dict or list: :class:`TreeAdapter` or :class:`JsonAdapter` as the
    component was stored, whichever of the two :func:`resolve_adapter` picked from the live value.

    >>> type(stored_kind_adapter({}, JsonAdapter(), "tree")).__name__
    'TreeAdapter'
    """
    if type(value) not in (dict, list) or type(chosen) not in (JsonAdapter, TreeAdapter):
        return chosen
    if stored_kind == "tree" and type(chosen) is JsonAdapter:
        return TreeAdapter()
    if stored_kind == "json" and type(chosen) is TreeAdapter:
        return JsonAdapter()
    return chosen


def resolve_adapter(value: Any, instance_registry: list[tuple[type, Adapter]] | None = None) -> Adapter:
    """Pick the adapter for a value: instance registry, type registry, framework, then protocol."""
    adapter = _lookup(instance_registry or [], value) or _lookup(_TYPE_ADAPTERS, value)
    if adapter is not None:
        return adapter
    import importlib

    framework = framework_of(value)
    if framework == "numpy" and isinstance(value, (dict, list, tuple)):
        framework = container_framework(value)
    entry = registry.by_name(framework)
    if entry is not None:
        module = importlib.import_module(entry.module)
        special: Adapter | None = getattr(module, "adapter_for", lambda v: None)(value)
        if special is not None:
            return special
    if is_random_state(value):
        special = numpy_rng.adapter_for(value)
        if special is not None:
            return special
    if callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None)):
        return StateDictAdapter()
    if is_dataclass_instance(value):
        if "jax" in sys.modules:  # a registered pytree (flax.struct.dataclass): the JAX adapter keeps its type
            special = importlib.import_module("opencheckpoint.adapters.jax").adapter_for(value)
            if special is not None:
                return special
        return DataclassAdapter()
    if callable(getattr(value, "dump", None)) and callable(getattr(value, "load", None)):
        return DumpLoadAdapter()
    if is_json_value(value) and isinstance(value, (dict, list)):
        return JsonAdapter()
    return TreeAdapter()


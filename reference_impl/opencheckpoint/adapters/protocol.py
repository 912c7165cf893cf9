"""The adapter protocol: :class:`Adapter`, :class:`PreparedRestore`, and which framework a value belongs to.

Restoring is two-phase so that :meth:`Checkpoint.load
<opencheckpoint.Checkpoint.load>` is atomic across components:
:meth:`Adapter.prepare` reads, verifies and checks everything without
touching the live object and returns a :class:`PreparedRestore`; only when
every component has been prepared is each one's :meth:`PreparedRestore.apply`
run. Split from :mod:`.base`, which re-exports every name.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..format import frameworks as registry

if TYPE_CHECKING:  # annotations only: component_io imports the framework hooks, which reach this module
    from .component_io import ComponentReader, ComponentWriter


@dataclass
class PreparedRestore:
    """A component restore that passed every check and has not touched its live object yet.

    Attributes:
        apply: phase 2: modifies the live object; returns the loaded value (or None).
        checked: True when phase 1 checked everything ``apply`` depends on, so ``apply``
            is not expected to raise; False for one-phase adapters and for objects whose
            own ``load_state_dict`` cannot be checked beforehand. :meth:`Checkpoint.load
            <opencheckpoint.Checkpoint.load>` applies unchecked restores first.
    """

    apply: Callable[[], Any]
    checked: bool = True


class Adapter(abc.ABC):
    """Saves one value as one component and restores it.

    Subclasses define :meth:`save` and either :meth:`prepare` (two-phase,
    preferred: the restore is atomic across components) or :meth:`load`
    (one-phase).
    """

    #: the component kind this adapter writes
    kind: str = "tree"
    kind_version: int = 1
    #: restore after every other component (global RNG state)
    restore_last: bool = False
    #: whether the adapter forwards ``CheckpointOptions.save_args``/``save_kwargs``/``load_args``/``load_kwargs``
    #: (the writer's and reader's ``method_args``/``method_kwargs``) to the object's own methods; a load or
    #: save that gives them to another adapter raises instead of dropping them
    takes_method_args: bool = False

    @abc.abstractmethod
    def save(self, value: Any, writer: ComponentWriter) -> None:
        """Write ``value`` through ``writer``."""

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        """Phase 1: read and check everything; MUST NOT modify ``value``.

        Raise :class:`~opencheckpoint.format.errors.IncompatibleComponent` for a
        stored state that does not fit ``value`` under ``strict="error"``
        (under ``"warn"``/``"ignore"`` prepare the part that fits). The
        default, for adapters that define only :meth:`load`, verifies the
        component's bytes and defers ``load`` to phase 2.
        """
        if type(self).load is Adapter.load:
            raise TypeError(f"{type(self).__qualname__} must define prepare() (two-phase) or load() (one-phase)")
        reader.verify_bytes()
        return PreparedRestore(functools.partial(self.load, value, reader, strict=strict), checked=False)

    def load(self, value: Any, reader: ComponentReader, *, strict: str) -> Any:
        """Restore into ``value`` (in place where possible) in one step; return the loaded value."""
        if type(self).prepare is Adapter.prepare:
            raise TypeError(f"{type(self).__qualname__} must define prepare() (two-phase) or load() (one-phase)")
        return self.prepare(value, reader, strict=strict).apply()


def prepare_restore(adapter: Adapter, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
    """Phase 1 for ``adapter``, honouring a subclass that overrides only the one-phase :meth:`Adapter.load`.

    A subclass of a built-in two-phase adapter that redefines ``load`` (and
    not ``prepare``) gets its own ``load`` run in phase 2, after the
    component's bytes are verified, exactly as a one-phase adapter.
    """
    kind = type(adapter)
    load_owner = next(c for c in kind.__mro__ if "load" in vars(c))
    prepare_owner = next(c for c in kind.__mro__ if "prepare" in vars(c))
    if load_owner is not prepare_owner and issubclass(load_owner, prepare_owner) and load_owner is not Adapter:
        return Adapter.prepare(adapter, value, reader, strict=strict)
    return adapter.prepare(value, reader, strict=strict)


def framework_of(value: Any) -> str:
    """'torch', 'jax' or 'numpy', by the top-level module of the object's type or a base class.

    Walking the MRO matters: user models subclass ``torch.nn.Module`` or
    ``flax.nnx.Module`` from their own modules.
    """
    return module_framework(type(value))


def module_framework(kind: type) -> str:
    """The framework name of a type (its row in :mod:`.registry`), 'numpy' if none."""
    entry = registry.for_type(kind)
    return registry.DEFAULT if entry is None else entry.name


#: type -> framework of its objects (a type's MRO does not change); bounded.
_FRAMEWORK_OF_TYPE: dict[type, str] = {}


def container_framework(value: Any, budget: int = 10_000) -> str:
    """The framework of the first framework leaf of a plain dict/list/tuple tree ('numpy' if none).

    A dict whose values are all NumPy-framework leaves (a state dict of 20,000 arrays) costs one
    check per distinct value type, not one step per value.
    """
    stack = [value]
    while stack and budget > 0:
        budget -= 1
        item = stack.pop()
        if isinstance(item, dict):
            values = item.values()
            kinds = set(map(type, values)) if len(values) > 16 else None
            if kinds is not None and len(kinds) < 8 and all(_framework_of(kind) == "numpy" for kind in kinds):
                continue  # NumPy-framework leaves only: nothing below this dict names another framework
            stack.extend(values)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        else:
            framework = _framework_of(type(item))
            if framework != "numpy":
                return framework
    return "numpy"


def _framework_of(kind: type) -> str:
    """:func:`module_framework` of a leaf type, cached; :data:`_CONTAINER` for a dict, list or tuple type."""
    framework = _FRAMEWORK_OF_TYPE.get(kind)
    if framework is None:
        framework = _CONTAINER if issubclass(kind, (dict, list, tuple)) else module_framework(kind)
        if len(_FRAMEWORK_OF_TYPE) < 4096:
            _FRAMEWORK_OF_TYPE[kind] = framework
    return framework


#: What :func:`_framework_of` says of a container type: not a leaf (its values are walked).
_CONTAINER = "container"

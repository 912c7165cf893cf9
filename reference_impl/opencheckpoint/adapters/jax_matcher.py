"""Restoring a stored tree into the structure of a live JAX target: every leaf checked before anything changes.

:class:`TreeMatcher` pairs the stored leaves with the target's (pytrees, NNX
objects, abstract ``ShapeDtypeStruct`` leaves), applies the load's ``cast=``
policy, and builds sharded targets device block by device block
(:mod:`.jax_sharding`); :func:`settle` turns what did not fit into an error, a
warning or nothing, according to ``strict``.
"""

from __future__ import annotations

import ast
import contextlib
import re
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import numpy as np

from ..format.dtypes import dtype_name, numpy_dtype
from ..format.errors import CheckpointError, IncompatibleComponent
from ..read.casting import Caster, CastRefused
from ..read.restore_hints import suggest
from ..tree.nodes import NamedTupleValue, PRNGKeyValue
from ..tree.treepath import segment
from . import jax_sharding
from .base import ComponentReader
from .jax_values import FRAMEWORK, _check_x64, _nnx, is_key, key_impl_name, placement


# -- matching a stored tree against a live target --------------------------------------------
def _key(key: Any) -> str:
    """One key of a path in the notation of every tree path the package shows (``$.a['b c'][0]``,
    :func:`opencheckpoint.tree.treepath.segment`), whatever the key's type."""
    return segment(key) if isinstance(key, (str, int)) else f"[{key!r}]"


def _key_str(entry: Any) -> str:
    tu = jax.tree_util
    if isinstance(entry, tu.DictKey):
        return _key(entry.key)
    if isinstance(entry, tu.SequenceKey):
        return f"[{entry.idx}]"
    if isinstance(entry, tu.GetAttrKey):
        return f".{entry.name}"
    if isinstance(entry, tu.FlattenedIndexKey):
        return f"[{entry.key}]"
    return f"[{entry!s}]"


def _stored_index(stored: Any, path: str, leaves: dict[str, Any], nodes: dict[str, Any]) -> None:
    """Index every leaf and every inner node of a decoded tree by its path string."""
    nodes[path] = stored
    if isinstance(stored, NamedTupleValue):
        for name, item in stored._asdict().items():
            _stored_index(item, f"{path}.{name}", leaves, nodes)
    elif isinstance(stored, dict):
        for key, item in stored.items():
            _stored_index(item, path + _key(key), leaves, nodes)
    elif isinstance(stored, (list, tuple)):
        for index, item in enumerate(stored):
            _stored_index(item, f"{path}[{index}]", leaves, nodes)
    elif stored is not None:
        leaves[path] = stored


def _describe(value: Any) -> str:
    if isinstance(value, PRNGKeyValue):
        return f"key<{value.impl}>{list(value.data.shape)}"
    if isinstance(value, (np.ndarray, np.generic, jax.Array, jax.ShapeDtypeStruct)):
        dtype = value.dtype
        name = f"key<{key_impl_name(dtype)}>" if is_key(value) else str(dtype)
        return f"{name}{list(value.shape)}"
    return type(value).__name__


def _weak(array: jax.Array) -> jax.Array:
    """Keep JAX's weak type (it changes type promotion, so it changes results)."""
    from jax._src.lax.lax import _convert_element_type  # no public way to set weak_type

    weak: jax.Array = _convert_element_type(array, array.dtype, weak_type=True)  # untyped private helper
    return weak


class _Mismatch(Exception):
    pass


class TreeMatcher:
    """Restores a stored tree into the structure of a live target, checking every leaf first.

    :meth:`match` computes the restored value without touching the target;
    in-place updates of NNX objects inside it are queued and run by
    :meth:`apply`, after the caller decided the problems are acceptable.
    """

    def __init__(self, map_location: Any = None, caster: Caster | None = None, component: str = "",
                 verify: bool = True) -> None:
        self.map_location = map_location
        self.verify = verify  # for stored leaves that are lazy handles (a sharded target reads regions)
        self.caster = caster or Caster()  # cast= of the load: dtype conversions allowed and recorded
        self.component = component
        self.dtype_only: list[tuple[str, str]] = []  # (stored, target) dtypes of same-shape mismatches (hints)
        self.missing: list[str] = []
        self.unexpected: list[str] = []
        self.wrong: list[str] = []
        self.unfilled: list[str] = []
        self._updates: list[Callable[[], None]] = []
        self._dotted_for: dict[str, Any] | None = None
        self._dotted: dict[str, str] = {}

    @property
    def problems(self) -> list[str]:
        out = [f"missing from the checkpoint: {', '.join(self.missing)}"] if self.missing else []
        if self.unexpected:
            out.append(f"not in the target: {', '.join(self.unexpected)}")
        out += self.wrong
        return out

    def match(self, target: Any, stored: Any, prefix: str = "$") -> Any:
        leaves: dict[str, Any] = {}
        nodes: dict[str, Any] = {}
        _stored_index(stored, prefix, leaves, nodes)
        used: set[str] = set()
        nnx = _nnx()
        special = (nnx.Pytree, nnx.Variable) if nnx is not None else ()

        flat, treedef = jax.tree_util.tree_flatten_with_path(
            target, is_leaf=lambda x: bool(special) and isinstance(x, special))
        restored: list[Any] = []
        for key_path, leaf in flat:
            path = prefix + "".join(_key_str(entry) for entry in key_path)
            if special and isinstance(leaf, nnx.Pytree):
                restored.append(self._graph_node(leaf, nodes.get(path), path, leaves, used))
                continue
            if special and isinstance(leaf, nnx.Variable):
                current = leaf.get_value()
                new = self._leaf(current, leaves, used, path)
                if new is not current:
                    self._updates.append(partial(leaf.set_value, new))  # this variable and value, bound now
                restored.append(leaf)
                continue
            restored.append(self._leaf(leaf, leaves, used, path))
        self.unexpected += [p for p in leaves if p not in used]
        return jax.tree_util.tree_unflatten(treedef, restored)

    def _graph_node(self, node: Any, stored: Any, path: str, leaves: dict[str, Any], used: set[str]) -> Any:
        nnx = _nnx()
        state = nnx.state(node)
        sub = TreeMatcher(self.map_location, self.caster, self.component, self.verify)
        pure = sub.match(nnx.to_pure_dict(state), stored if stored is not None else {}, path)
        self.missing += sub.missing
        self.wrong += sub.wrong
        self.unfilled += sub.unfilled
        self.dtype_only += sub.dtype_only
        used.update(p for p in leaves if p == path or p.startswith((path + "[", path + ".")))
        self.unexpected += sub.unexpected

        def update() -> None:
            nnx.replace_by_pure_dict(state, pure)
            nnx.update(node, state)

        self._updates.append(update)
        return node

    def _leaf(self, target: Any, leaves: dict[str, Any], used: set[str], path: str) -> Any:
        if path not in leaves:
            path_found = self._by_key_path(leaves).get(_dotted(path))
            if path_found is None or path_found in used:
                self.missing.append(path)
                return self._keep(target, path)
            path, leaves = path_found, {path_found: leaves[path_found]}  # a flat key path of a nested leaf
        used.add(path)
        try:
            return self._convert(target, leaves[path], path)
        except _Mismatch as exc:
            self.wrong.append(f"{path}: {exc}")
            return self._keep(target, path)

    def _by_key_path(self, leaves: dict[str, Any]) -> dict[str, str]:
        """The stored leaves by dotted key path (``encoder.layers.0.kernel``), so that a flat stored tree (a
        torch state dict, or one ``rename=`` gave dotted keys) fills a nested target (NNX state) and back."""
        if self._dotted_for is not leaves:
            self._dotted_for, self._dotted = leaves, {}
            for stored in leaves:
                self._dotted.setdefault(_dotted(stored), stored)
        return self._dotted

    def _keep(self, target: Any, path: str) -> Any:
        if isinstance(target, jax.ShapeDtypeStruct):
            self.unfilled.append(path)
        return target

    def _convert(self, target: Any, stored: Any, path: str) -> Any:
        if jax_sharding.is_handle(stored):
            placed = self._assemble(target, stored)
            if placed is not None:
                return placed
            stored = jax_sharding.host_copy(stored.read(verify=self.verify))  # then as an eager read
        if isinstance(target, (jax.Array, jax.ShapeDtypeStruct)) and is_key(target):
            impl = key_impl_name(target.dtype)
            if not isinstance(stored, PRNGKeyValue):
                raise _Mismatch(f"stored {_describe(stored)} is not a PRNG key; target is {_describe(target)}")
            if stored.impl != impl or tuple(stored.data.shape[: len(target.shape)]) != tuple(target.shape):
                raise _Mismatch(f"stored {_describe(stored)} does not fit {_describe(target)}")
            try:
                key = FRAMEWORK.prng_key(stored.impl, jax_sharding.host_copy(np.asarray(stored.data)),
                                        map_location=self._where(target))
            except IncompatibleComponent as exc:  # e.g. an uneven target sharding
                raise _Mismatch(exc.message) from None
            if key.shape != target.shape:
                raise _Mismatch(f"stored {_describe(stored)} does not fit {_describe(target)}")
            return key
        if isinstance(target, (jax.Array, jax.ShapeDtypeStruct, np.ndarray, np.generic)):
            if not isinstance(stored, (np.ndarray, np.generic)) or isinstance(stored, PRNGKeyValue):
                raise _Mismatch(f"stored {_describe(stored)} does not fit {_describe(target)}")
            if stored.shape != target.shape:
                raise _Mismatch(f"stored {_describe(stored)} does not fit {_describe(target)}")
            if stored.dtype != target.dtype:
                stored = self._cast(stored, target, path)
            if isinstance(target, np.generic):
                return stored if isinstance(stored, np.generic) else stored[()]
            if isinstance(target, np.ndarray):
                return np.array(stored)
            try:
                array = FRAMEWORK.array(np.asarray(stored), map_location=self._where(target))
            except IncompatibleComponent as exc:
                raise _Mismatch(exc.message) from None
            return _weak(array) if getattr(target, "weak_type", False) else array
        if type(stored) is not type(target):
            raise _Mismatch(f"stored {_describe(stored)} does not fit {_describe(target)}")
        return stored

    def _cast(self, stored: Any, target: Any, path: str) -> Any:
        """``stored`` converted to the target's dtype under the load's ``cast=`` policy (recorded), or a mismatch."""
        refusal = ""
        if self.caster.enabled:
            try:
                return self.caster.cast(stored, np.dtype(target.dtype), _dotted(path), self.component)
            except CastRefused as exc:
                refusal = f": {exc}"
            except CheckpointError as exc:  # a dtype outside the format's table
                refusal = f": {exc.message}"
        with contextlib.suppress(CheckpointError):  # a dtype outside the table: no cast= hint for it
            self.dtype_only.append((dtype_name(np.dtype(stored.dtype)), dtype_name(np.dtype(target.dtype))))
        raise _Mismatch(f"stored {_describe(stored)} does not fit {_describe(target)}{refusal}")

    def _assemble(self, target: Any, handle: Any) -> jax.Array | None:
        """``target``'s sharding built block by block from a stored handle, when it fits as stored (else None:
        a mismatch, a cast or a single-device target go through the full read)."""
        sharding = jax_sharding.target_sharding(target) if self.map_location is None else None
        if sharding is None or is_key(target) or not isinstance(target, (jax.Array, jax.ShapeDtypeStruct)):
            return None
        if tuple(handle.shape) != tuple(target.shape) or numpy_dtype(handle.dtype) != np.dtype(target.dtype):
            return None
        _check_x64(handle.dtype)
        try:
            jax_sharding.check_layout(tuple(target.shape), sharding)
        except IncompatibleComponent as exc:  # JAX cannot build this target (an uneven sharding): named by path
            raise _Mismatch(exc.message) from None
        array = jax_sharding.assemble(handle, sharding, verify=self.verify)
        return _weak(array) if getattr(target, "weak_type", False) else array

    def _where(self, target: Any) -> Any:
        if self.map_location is not None:
            return placement(self.map_location)
        return getattr(target, "sharding", None)

    def apply(self) -> None:
        """Run the queued in-place updates of NNX objects."""
        for update in self._updates:
            update()
        self._updates.clear()


def _settle(matcher: TreeMatcher, strict: str, what: str, not_restored: list[str] | None = None) -> None:
    """Raise or warn about problems according to ``strict`` (before anything is touched); under ``"warn"`` and
    ``"ignore"`` the problems go to ``not_restored`` (:attr:`ComponentReader.not_restored`)."""
    problems = matcher.problems
    hint = suggest([_dotted(p) for p in matcher.missing], [_dotted(p) for p in matcher.unexpected],
                   matcher.dtype_only)
    if matcher.unfilled:
        raise IncompatibleComponent(f"{what}: abstract target leaves left without a value: "
                                    f"{', '.join(matcher.unfilled)}; " + "; ".join(problems) + hint)
    if not problems:
        return
    message = f"{what}: " + "; ".join(problems) + hint
    if strict == "error":
        raise IncompatibleComponent(message)
    if not_restored is not None:
        not_restored.extend(problems)
    if strict == "warn":
        warnings.warn(f"loaded the matching part only; {message}", stacklevel=4)


_PATH_STEP = re.compile(r"\[('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\]]*)\]|\.([^.\[]+)")


def _dotted(path: str) -> str:
    """A matcher path (``['encoder'][0].mu``) as the dotted key path ``rename=`` sees (``encoder.0.mu``)."""
    parts = []
    for match in _PATH_STEP.finditer(path):
        item, name = match.groups()
        if name is not None:
            parts.append(name)
        elif item[:1] in ("'", '"'):
            parts.append(str(ast.literal_eval(item)))
        else:
            parts.append(item)
    return ".".join(parts)


def _holds_optimizer_state(value: Any, depth: int = 4) -> bool:
    """An optax state or NNX optimizer (somewhere near the top): its parameter trees lie below its own fields,
    so ``rename=`` prefixes also match there (``opt_state.0.mu.<params>``)."""
    nnx = _nnx()
    if nnx is not None and isinstance(value, getattr(nnx, "Optimizer", ())):
        return True
    if type(value).__module__.split(".", 1)[0] == "optax":
        return True
    if depth and isinstance(value, (list, tuple, dict)):
        items = value.values() if isinstance(value, dict) else value
        return any(_holds_optimizer_state(item, depth - 1) for item in items)
    return False


def _matcher(reader: ComponentReader, value: Any) -> tuple[TreeMatcher, Any]:
    """A matcher with the load's ``cast=`` policy, and the stored tree with its ``rename=``/``subtree=`` applied.

    A target holding sharded arrays gets the stored tree as lazy handles: each device then reads only its block.
    """
    embedded = _holds_optimizer_state(value)
    if reader.map_location is None and jax_sharding.wants_regions(value):
        stored = reader.plan.apply(jax_sharding.lazy_tree(reader.reader, reader.name), reader.name, embedded=embedded)
    else:
        stored = reader.tree("numpy", embedded=embedded)
    stored = reader.per_rank(stored, value)  # per-rank values: this process's own
    return TreeMatcher(reader.map_location, reader.plan.caster, reader.name, reader.verify), stored



__all__ = ["TreeMatcher"]

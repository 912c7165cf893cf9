"""Restoring into a model that changed: key-path renaming and subtree selection (framework-neutral).

A stored component is seen as a map from *key paths* to values:

* a flat state dict (a dict with a dotted ``str`` key, as torch's
  ``state_dict()``): each key is a key path (``"module.encoder.weight"``);
* any other tree (JAX pytrees, NNX state, optimizer states): the keys,
  indices and named-tuple fields leading to each leaf, joined with ``"."``
  (``"encoder.layers.0.kernel"``, ``"opt_state.0.mu.encoder.kernel"``).

:class:`RestorePlan` selects a subtree (``subtree="encoder"``: the entries
under ``encoder.``, with that prefix removed) and renames key paths
(``rename={"module.": ""}`` or a callable) *before* the stored state is
matched against the live target; entries outside the subtree or dropped by
the rename (a callable returning ``None``) are reported as unused, never
restored. Nothing is renamed unless asked: an empty plan returns the tree
unchanged. Dtype conversions are :mod:`opencheckpoint.read.casting`'s job.

>>> plan = RestorePlan(rename={"module.": ""})
>>> plan.apply({"module.weight": 1, "module.bias": 2}, "model")
{'weight': 1, 'bias': 2}
>>> plan = RestorePlan(subtree="encoder")
>>> plan.apply({"encoder": {"kernel": 1}, "decoder": {"kernel": 2}}, "model"), plan.unused
({'kernel': 1}, ['decoder.kernel'])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..format.errors import IncompatibleComponent
from ..tree.nodes import NamedTupleValue
from .casting import Caster, CastPolicy, Conversion
from .restore_layout import axes_of, permute_value

#: ``rename=``: key-path prefixes (``{"module.": ""}``) or a callable from a stored key path to the target's
#: key path (``None`` drops the entry).
Rename = Mapping[str, str] | Callable[[str], "str | None"]


#: How many stored key paths a plan keeps to name in an error.
_SEEN = 256


def _strip(prefix: str) -> str:
    return prefix[:-1] if prefix.endswith(".") else prefix


def _rename_at(path: str, rules: list[tuple[str, str, str]], matched: set[str] | None = None) -> str | None:
    """``path`` renamed by the first (longest) matching prefix rule; None when no rule matches. The rule that
    matched is added to ``matched`` (by its key as the caller spelled it)."""
    for old, new, given in rules:
        if old == "":
            if matched is not None:
                matched.add(given)
            return f"{new}.{path}" if new else path
        if path == old or path.startswith(old + "."):
            if matched is not None:
                matched.add(given)
            rest = path[len(old):].lstrip(".")
            return f"{new}.{rest}" if new and rest else (new or rest)
    return None


class Renamer:
    """A stored key path -> the target's key path (``None``: drop the entry).

    A mapping holds key-path prefixes, matched on whole segments
    (``"module"`` and ``"module."`` both match ``module.weight``, never
    ``modules.weight``); the longest matching prefix wins and paths no rule
    matches are kept as they are. With ``embedded=True`` (optimizer states,
    which hold copies of the parameter tree below their own fields, e.g.
    ``opt_state.0.mu.module.kernel``) a rule also matches after any segment
    boundary. A callable receives the full stored key path.
    """

    def __init__(self, rename: Rename, *, embedded: bool = False, matched: set[str] | None = None) -> None:
        self.embedded = embedded
        #: the mapping's keys that matched a path so far (when given: :meth:`RestorePlan.unmatched`)
        self.matched = matched
        self._call: Callable[[str], str | None] | None = None
        self._rules: list[tuple[str, str, str]] = []
        if isinstance(rename, Mapping):
            for old, new in rename.items():
                if type(old) is not str or type(new) is not str:
                    raise TypeError(f"rename mapping entries must be str -> str, got {old!r}: {new!r}")
            self._rules = sorted(((_strip(o), _strip(n), o) for o, n in rename.items()), key=lambda r: -len(r[0]))
        elif callable(rename):
            self._call = rename
        else:
            raise TypeError(f"rename must be a mapping of key-path prefixes or a callable, got {type(rename).__name__}")

    def __call__(self, path: str) -> str | None:
        if self._call is not None:
            result = self._call(path)
            if result is not None and not isinstance(result, str):
                raise TypeError(f"rename callable returned {type(result).__name__} for {path!r}; expected str or None")
            return result
        renamed = _rename_at(path, self._rules, self.matched)
        if renamed is not None or not self.embedded:
            return path if renamed is None else renamed
        parts = path.split(".")
        for index in range(1, len(parts)):
            tail = _rename_at(".".join(parts[index:]), [r for r in self._rules if r[0]], self.matched)
            if tail is not None:
                head = ".".join(parts[:index])
                return f"{head}.{tail}" if tail else head
        return path


@dataclass
class RestorePlan:
    """What to do to a stored component before it is matched against its target.

    Attributes:
        rename: key-path renaming (:data:`Rename`), or None.
        subtree: restore only the stored entries under this key path (after ``rename``; prefix removed), or None.
        cast: dtype conversions allowed (:data:`opencheckpoint.read.casting.CastPolicy`); None/False: none.
        unused: stored key paths left out by ``subtree`` or dropped by ``rename`` (filled by :meth:`apply`).
        caster: records the conversions adapters made (:attr:`conversions`).
    """

    rename: Rename | None = None
    subtree: str | None = None
    cast: CastPolicy = None
    unused: list[str] = field(default_factory=list)
    caster: Caster = field(init=False)
    #: the keys of a ``rename`` mapping that matched a stored key path (filled by :meth:`apply`)
    matched: set[str] = field(default_factory=set)
    #: whether :meth:`apply` (or :meth:`apply_flat`) ran: only then does :attr:`matched` say anything
    applied: bool = False
    #: the first stored key paths :meth:`apply` saw (named by the error of a key that matched none)
    seen: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.subtree is not None and (type(self.subtree) is not str or not _strip(self.subtree)):
            raise TypeError(f"subtree must be a non-empty key path such as 'encoder', got {self.subtree!r}")
        self.caster = Caster(self.cast)
        if self.rename is not None:
            Renamer(self.rename)  # refuse a bad rename= before anything is read

    @property
    def selects(self) -> bool:
        """True when the stored keys are changed (rename or subtree); casting alone changes no key."""
        return self.rename is not None or self.subtree is not None

    @property
    def conversions(self) -> list[Conversion]:
        return self.caster.conversions

    def unmatched(self) -> list[str]:
        """The keys of a ``rename`` mapping that matched no stored key path (a callable decides for itself)."""
        if not isinstance(self.rename, Mapping) or not self.applied:
            return []
        return [old for old in self.rename if old not in self.matched]

    def renamer(self, *, embedded: bool = False, track: bool = False) -> Callable[[str], str | None]:
        """The key-path map: ``rename`` first, then the subtree selection (a key path after renaming);
        ``track``: record the mapping's keys that match in :attr:`matched`."""
        rename = (Renamer(self.rename, embedded=embedded, matched=self.matched if track else None)
                  if self.rename is not None else None)
        prefix = _strip(self.subtree) if self.subtree is not None else None

        def apply(path: str) -> str | None:
            renamed = rename(path) if rename is not None else path
            if prefix is None or renamed is None:
                return renamed
            return renamed[len(prefix) + 1:] if renamed.startswith(prefix + ".") else None

        return apply

    def apply(self, tree: Any, component: str, *, embedded: bool = False) -> Any:
        """``tree`` with its key paths selected and renamed (the tree itself when nothing was asked)."""
        if not self.selects:
            return tree
        self.applied = True
        mapper = self.renamer(embedded=embedded, track=True)
        if isinstance(tree, dict) and any(type(k) is str and "." in k for k in tree):
            out = self._flat(tree, mapper, component)
        else:
            out = self._nested(tree, mapper, component)
        return out

    def apply_flat(self, state: Mapping[str, Any], component: str) -> dict[str, Any]:
        """A flat state dict (torch ``state_dict()``) with its keys selected and renamed; a nested stored tree
        (an NNX state: no dotted key, a container value) is flattened to its dotted key paths first."""
        if not self.selects:
            return dict(state)
        self.applied = True
        if not any(type(k) is str and "." in k for k in state) and any(
                isinstance(v, (dict, list, tuple)) and v for v in state.values()):
            state = flatten(state)
        return self._flat(state, self.renamer(track=True), component)

    def _flat(self, state: Mapping[Any, Any], mapper: Callable[[str], str | None], component: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        origin: dict[str, str] = {}
        for key, value in state.items():
            path = str(key)
            if len(self.seen) < _SEEN:
                self.seen.append(path)
            target = mapper(path)
            if target is None:
                self.unused.append(path)
                continue
            _check_target(target, path)
            if target in out:
                raise IncompatibleComponent(f"rename maps both {origin[target]!r} and {path!r} to {target!r}")
            key = str(target)
            out[key], origin[key] = _laid_out(value, target, path), path
        self._check_selected(out, component)
        return out

    def _nested(self, tree: Any, mapper: Callable[[str], str | None], component: str) -> Any:
        leaves: list[tuple[tuple[_Step, ...], Any]] = []
        _flatten(tree, (), leaves)
        if not leaves or leaves[0][0] == ():
            if self.subtree is not None:
                raise IncompatibleComponent(f"component {component!r} stores a {type(tree).__name__}, which has no "
                                            f"key path {self.subtree!r}")
            return tree
        root = _Build()
        origin: dict[str, str] = {}
        for steps, value in leaves:
            path = ".".join(str(step.key) for step in steps)
            if len(self.seen) < _SEEN:
                self.seen.append(path)
            target = mapper(path)
            if target is None:
                self.unused.append(path)
                continue
            _check_target(target, path)
            if target in origin:
                raise IncompatibleComponent(f"rename maps both {origin[target]!r} and {path!r} to {target!r}")
            origin[target] = path
            root.place(_align(steps, target.split(".")), _laid_out(value, target, path), str(target))
        self._check_selected(origin, component)
        return root.finish()

    def _check_selected(self, selected: Mapping[str, Any], component: str) -> None:
        if self.subtree is not None and not selected:
            raise IncompatibleComponent(f"component {component!r} has no entry under {self.subtree!r} "
                                        f"(stored key paths begin with: {_heads(self.unused)}; "
                                        "subtree= is a key path after rename=)")


def check_renames(plans: Iterable[tuple[str, RestorePlan]]) -> None:
    """Refuse a ``rename=`` mapping key that matched no stored key path of any component it applied to.

    The components of one load share the load's ``rename`` (one object): a key is refused only when it matched
    in none of them (``{"module.": ""}`` need not match the optimizer's or a config's paths); a component's own
    ``rename`` is checked alone.

    >>> plan = RestorePlan(rename={"module.": "", "inner.": ""})
    >>> _ = plan.apply({"module.w": 1}, "model")
    >>> try:
    ...     check_renames([("model", plan)])
    ... except IncompatibleComponent as exc:
    ...     print(exc.message.split(' (')[0])
    rename= key 'inner.' matches no stored key path of component 'model'
    """
    groups: dict[int, list[tuple[str, RestorePlan]]] = {}
    for name, plan in plans:
        if isinstance(plan.rename, Mapping) and plan.applied:
            groups.setdefault(id(plan.rename), []).append((name, plan))
    for group in groups.values():
        matched = set().union(*(plan.matched for _, plan in group))
        rename = group[0][1].rename
        assert isinstance(rename, Mapping)  # grouped above
        missed = [old for old in rename if old not in matched]
        if missed:
            names = ", ".join(repr(name) for name, _ in group)
            heads = _heads(path for _, plan in group for path in plan.seen)
            raise IncompatibleComponent(
                f"rename= key{'s' if len(missed) > 1 else ''} {', '.join(repr(m) for m in missed)} "
                f"match{'' if len(missed) > 1 else 'es'} no stored key path of component"
                f"{'s' if len(group) > 1 else ''} {names} (stored key paths begin with: {heads}); "
                "nothing was restored")


def fit_structure(stored: Any, live: Any) -> Any:
    """A renamed stored tree in the live target's form: dotted keys (``{"encoder.kernel": ...}``, a renamed
    torch state dict) nested for a nested live dict, a nested tree flattened for a flat live state dict.

    >>> fit_structure({"encoder.kernel": 1}, {"encoder": {"kernel": 0}})
    {'encoder': {'kernel': 1}}
    >>> fit_structure({"encoder": {"kernel": 1}}, {"encoder.kernel": 0})
    {'encoder.kernel': 1}
    """
    if not isinstance(stored, dict) or not isinstance(live, dict) or not stored or not live:
        return stored
    stored_flat = any(type(k) is str and "." in k for k in stored)
    live_flat = any(type(k) is str and "." in k for k in live)
    if stored_flat and not live_flat and any(isinstance(v, dict) for v in live.values()):
        return unflatten(stored)
    if live_flat and not stored_flat and any(isinstance(v, dict) for v in stored.values()):
        return flatten(stored)
    return stored


def flatten(tree: Any) -> dict[str, Any]:
    """Every leaf of a nested tree by its dotted key path (the paths ``rename=`` sees).

    >>> flatten({"encoder": {"layers": [{"kernel": 1}]}, "step": 3})
    {'encoder.layers.0.kernel': 1, 'step': 3}
    """
    leaves: list[tuple[tuple[_Step, ...], Any]] = []
    _flatten(tree, (), leaves)
    return {".".join(str(step.key) for step in steps): value for steps, value in leaves}


def unflatten(flat: Mapping[str, Any]) -> dict[Any, Any]:
    """Nested dicts from dotted key paths; all-digit segments become int keys (NNX state numbers list items).

    >>> unflatten({"encoder.layers.0.kernel": 1, "step": 3})
    {'encoder': {'layers': {0: {'kernel': 1}}}, 'step': 3}
    """
    root = _Build()
    for path, value in flat.items():
        _check_target(path, path)
        root.place([_Step(int(p) if p.isdigit() else p, "dict") for p in path.split(".")], value, path)
    out: dict[Any, Any] = root.finish() if flat else {}
    return out


def _laid_out(value: Any, target: str, path: str) -> Any:
    """``value`` permuted as a :class:`~opencheckpoint.read.restore_layout.Permuted` target key asks (else as it is)."""
    axes = axes_of(target)
    if axes is None:
        return value
    try:
        return permute_value(value, axes)
    except IncompatibleComponent as exc:
        raise exc.at(field=path) from None


def _check_target(target: str, path: str) -> None:
    if not target or "" in target.split("."):
        raise IncompatibleComponent(f"rename maps {path!r} to {target!r}, which is not a key path")


def _heads(paths: Iterable[str], limit: int = 8) -> str:
    heads = list(dict.fromkeys(p.split(".", 1)[0] for p in paths))
    return ", ".join(heads[:limit]) + (", ..." if len(heads) > limit else "")


@dataclass(frozen=True)
class _Step:
    """One step of a key path: the key and the kind of container it indexes ('dict', 'list', 'tuple', or
    a named tuple's type name), and the dict type to rebuild (``OrderedDict`` stays one)."""

    key: Any
    kind: str
    mapping: type = dict


def _flatten(node: Any, steps: tuple[_Step, ...], out: list[tuple[tuple[_Step, ...], Any]]) -> None:
    if isinstance(node, NamedTupleValue) and len(node):
        for name, item in node._asdict().items():
            _flatten(item, (*steps, _Step(name, "namedtuple:" + node.type_name)), out)
    elif isinstance(node, dict) and node:
        for key, item in node.items():
            _flatten(item, (*steps, _Step(key, "dict", type(node))), out)
    elif type(node) in (list, tuple) and node:
        for index, item in enumerate(node):
            _flatten(item, (*steps, _Step(index, type(node).__name__)), out)
    else:  # a leaf, or an empty container (kept as a value)
        out.append((steps, node))


def _align(steps: tuple[_Step, ...], parts: list[str]) -> list[_Step]:
    """The renamed path as steps: the unchanged head and tail keep the stored keys and containers (an int key
    stays an int, a list stays a list); renamed segments in between become str dict keys."""
    limit = min(len(steps), len(parts))
    head = 0
    while head < limit and str(steps[head].key) == parts[head]:
        head += 1
    tail = 0
    while tail < limit - head and str(steps[-1 - tail].key) == parts[-1 - tail]:
        tail += 1
    middle = [_Step(part, "dict") for part in parts[head: len(parts) - tail]]
    return [*steps[:head], *middle, *steps[len(steps) - tail:]]


_ABSENT: Any = object()


class _Build:
    """A node of the renamed tree under construction."""

    def __init__(self) -> None:
        self.kinds: set[tuple[str, type]] = set()
        self.children: dict[Any, Any] = {}

    def place(self, steps: list[_Step], value: Any, target: str) -> None:
        node = self
        for index, step in enumerate(steps):
            node.kinds.add((step.kind, step.mapping))
            last = index == len(steps) - 1
            existing = node.children.get(step.key, _ABSENT)
            if last:
                if existing is not _ABSENT:
                    raise IncompatibleComponent(f"rename makes {target!r} both a value and a container")
                node.children[step.key] = value
            else:
                if existing is _ABSENT:
                    existing = node.children[step.key] = _Build()
                elif not isinstance(existing, _Build):
                    raise IncompatibleComponent(f"rename makes {target!r} both a value and a container")
                node = existing

    def finish(self) -> Any:
        items = {key: child.finish() if isinstance(child, _Build) else child for key, child in self.children.items()}
        kind, mapping = next(iter(self.kinds)) if len(self.kinds) == 1 else ("dict", dict)
        if kind in ("list", "tuple") and list(items) == list(range(len(items))):
            return list(items.values()) if kind == "list" else tuple(items.values())
        if kind.startswith("namedtuple:") and all(type(k) is str for k in items):
            return NamedTupleValue(kind.split(":", 1)[1], items)
        return mapping(items) if kind == "dict" else items


__all__ = ["Rename", "Renamer", "RestorePlan", "check_renames", "fit_structure", "flatten", "unflatten"]

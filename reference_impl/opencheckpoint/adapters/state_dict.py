"""Objects with ``state_dict()`` / ``load_state_dict()``: :class:`StateDictAdapter`, and the state codec
(:func:`write_state` / :func:`read_state`) that keeps mappings' attributes (``_metadata``) beside the state.

Split from :mod:`.base`, which re-exports every public name.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import warnings
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from ..format.errors import IncompatibleComponent
from .component_io import ComponentReader, ComponentWriter
from .conform import conform
from .protocol import Adapter, PreparedRestore, container_framework

if TYPE_CHECKING:
    from ..read.lent_views import LentTree


class StateDictAdapter(Adapter):
    """``state_dict()`` is stored as a tree; ``load_state_dict(tree)`` restores it.

    Arrays come back as the framework objects the live ``state_dict()`` holds
    at the same place (a torch tensor where the object has one), NumPy arrays
    elsewhere. From a local checkpoint, NumPy arrays are verified views of a
    private map of the data file, lent to ``load_state_dict`` and taken back
    after it (:class:`LentRestore`): an object that copies them restores in
    one copy, one that keeps them gets owned arrays instead. The object's own ``load_state_dict`` cannot be checked
    beforehand: its restore is ``checked=False``. ``CheckpointOptions``'
    ``save_args``/``save_kwargs`` go to ``state_dict(...)`` and
    ``load_args``/``load_kwargs`` to ``load_state_dict(state, ...)``.
    """

    kind = "tree"
    takes_method_args = True

    def save(self, value: Any, writer: ComponentWriter) -> None:
        writer.hints["class"] = f"{type(value).__module__}.{type(value).__qualname__}"
        state = value.state_dict(*writer.method_args, **writer.method_kwargs)
        framework = container_framework(state)
        if framework != "numpy":
            # A fresh live object (an empty torchrl ReplayBuffer) has no leaf to say what its
            # stored arrays were: the framework is recorded for them (see read_state).
            writer.hints["framework"] = framework
        write_state(writer, state)

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        live = value.state_dict()
        lent = reader.reader.lend(reader.name, verify=reader.verify)
        if lent is not None:
            # Views of the file's pages, verified now: load_state_dict copies from them in one pass
            # (no fresh array, no page fault); phase 2 takes them back (lent_views).
            state = shape_state(reader, lent.take(), "numpy", live)
            return PreparedRestore(LentRestore(value, reader, live, lent, state), checked=False)
        state = read_state(reader, "numpy", live)

        def apply() -> None:
            load_state(value, state, reader)

        return PreparedRestore(apply, checked=False)


def load_state(value: Any, state: Any, reader: ComponentReader) -> None:
    """``value.load_state_dict(state, ...)``, its refusal (``KeyError``, ``ValueError``, ...) as
    :class:`IncompatibleComponent`."""
    try:
        value.load_state_dict(state, *reader.method_args, **reader.method_kwargs)
    except (KeyError, ValueError, TypeError, RuntimeError) as exc:
        raise IncompatibleComponent(f"load_state_dict failed: {exc}") from exc


class LentRestore:
    """Phase 2 of a state-dict restore from lent views: ``load_state_dict`` with them, then take them back.

    Most objects copy what ``load_state_dict`` gives them; then every view is
    gone when it returns and the map closes. An object that kept an array
    (stored it, or a view of it) gets the whole state again as fresh, owned
    arrays in a second call, so it never holds an array that lives in a
    map of the checkpoint's file. The owned arrays are read from the file
    again (and verified again unless ``verify=False``), never copied from the
    map: the object may have converted the views in place before keeping
    them, and the second call must see what a fresh-array restore would.
    The same happens when ``load_state_dict`` raises (any exception, a
    ``KeyboardInterrupt`` too) after keeping some (the original error is
    raised): the object ends as it would after one call with owned arrays.
    The frames of the object's exception lose their local variables, which
    held views.
    """

    __slots__ = ("value", "reader", "live", "lent", "state")

    def __init__(self, value: Any, reader: ComponentReader, live: Any, lent: LentTree, state: Any) -> None:
        self.value = value
        self.reader = reader
        self.live = live
        self.lent = lent
        #: the state of lent views: the lender's only reference to them, dropped when the call starts
        self.state = state

    def __call__(self) -> None:
        state, self.state = self.state, None
        try:
            load_state(self.value, state, self.reader)
        except BaseException as exc:  # a KeyboardInterrupt too: the object must not stay on the map
            del state
            _forget_locals(exc)
            if not self.lent.returned():
                self._replace_kept(failed=True)
            raise
        del state
        if not self.lent.returned():
            self._replace_kept(failed=False)

    def _replace_kept(self, *, failed: bool) -> None:
        """The object kept lent arrays: give it the state again, every array a fresh one read from the file
        (verified like any read), never copied from the map: the object may have written into its pages."""
        owned = read_state(self.reader, "numpy", self.live)
        try:
            load_state(self.value, owned, self.reader)
        except Exception as exc:
            if failed:
                pass  # the caller raises the first call's error; this one repeats it or differs by chance
            elif isinstance(exc, IncompatibleComponent):
                raise IncompatibleComponent(f"{type(self.value).__name__}.load_state_dict kept arrays it was given; "
                                            f"given owned copies of them, it failed: {exc.message}") from exc
            else:
                raise
        del owned
        if not self.lent.returned():
            warnings.warn(f"component {self.reader.name!r}: {type(self.value).__name__} still holds arrays of the "
                          "first load_state_dict call after a second one with owned copies: they stay views of "
                          "a private map of the checkpoint's data file until it drops them",
                          RuntimeWarning, stacklevel=4)


def _forget_locals(exc: BaseException) -> None:
    """Clear the local variables of the finished frames of ``exc``'s traceback and the exceptions it chains
    (they hold the lent views); the traceback itself (files, lines) stays (as ``traceback.clear_frames``,
    which would also finalize a suspended generator)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        tb = item.__traceback__
        while tb is not None:
            # A generator's frame is left alone: clearing a suspended one would finalize the generator.
            if not tb.tb_frame.f_code.co_flags & _SUSPENDABLE:
                with contextlib.suppress(RuntimeError):  # a frame still executing (this call's own) stays
                    tb.tb_frame.clear()
            tb = tb.tb_next
        todo += [item.__cause__, item.__context__]


#: code flags of frames that can be suspended (generators, coroutines, async generators)
_SUSPENDABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


#: Component metadata key of a state saved with its mappings' attributes kept beside it (:func:`write_state`).
ATTRIBUTES_KEY = "opencheckpoint.mapping_attributes"


def lift_attributes(state: Any) -> tuple[Any, list[list[Any]]]:
    """``state`` with every ``dict``/``OrderedDict`` carrying instance attributes as a plain dict, and the
    attributes as ``[path, name, value]`` entries (``path``: the keys and indices leading to the mapping).

    torch and torchrl state dicts carry ``OrderedDict._metadata`` (module
    versions, a TensorDict's batch size and device); the tree stores a dict's
    entries only, so the attributes travel next to the state instead of being
    lost. Other mapping types are left as they are (the encoder refuses them).
    """
    lifted: list[list[Any]] = []

    def walk(node: Any, path: list[Any]) -> Any:
        kind = type(node)
        if kind is dict or kind is OrderedDict:
            for name in sorted(vars(node)) if hasattr(node, "__dict__") else ():
                lifted.append([list(path), name, getattr(node, name)])
            return {key: walk(item, [*path, key]) for key, item in node.items()}
        if kind is list or kind is tuple:
            return kind(walk(item, [*path, index]) for index, item in enumerate(node))
        return node

    plain = walk(state, [])
    return (plain, lifted) if lifted else (state, [])


def write_state(writer: ComponentWriter, state: Any) -> None:
    """Write a state dict as a tree; mapping attributes (``_metadata``) are kept, never dropped.

    Without attributes the tree is the state itself. With them it is
    ``{"state": ..., "attributes": [[path, name, value], ...]}`` and the
    component's metadata holds ``{ATTRIBUTES_KEY: 1}`` (:func:`read_state`
    puts them back).
    """
    plain, lifted = lift_attributes(state)
    if not lifted:
        writer.write_tree(state)
        return
    writer.metadata = {**(writer.metadata or {}), ATTRIBUTES_KEY: 1}
    writer.write_tree({"state": plain, "attributes": lifted})


def read_state(reader: ComponentReader, framework: str, live: Any = None) -> Any:
    """The state written by :func:`write_state`, with its arrays shaped like ``live``'s leaves (NumPy reads)
    and its mappings' attributes re-attached (as ``OrderedDict`` attributes)."""
    stored = reader.reader.read(reader.name, framework=framework, verify=reader.verify,
                                map_location=reader.map_location)
    return shape_state(reader, stored, framework, live)


def shape_state(reader: ComponentReader, stored: Any, framework: str, live: Any = None) -> Any:
    """:func:`read_state` of a tree read already (``stored``, as the reader returned it)."""
    metadata = reader.record.metadata
    lifted: Any = []
    if isinstance(metadata, dict) and metadata.get(ATTRIBUTES_KEY) is not None:
        if not (isinstance(stored, dict) and set(stored) == {"state", "attributes"}
                and isinstance(stored["attributes"], list)):
            raise IncompatibleComponent("component metadata says the state has attributes, but the stored tree "
                                        "is not {'state': ..., 'attributes': [...]}")
        stored, lifted = stored["state"], stored["attributes"]
    if reader.plan.selects:  # rename/subtree act on the state's key paths; attributes of moved mappings stay behind
        stored = reader.plan.apply(stored, reader.name)
        lifted = [e for e in lifted if isinstance(e, list) and e and isinstance(e[0], list)
                  and _follow(stored, e[0]) is not None]
    # Stored arrays with no live counterpart (a fresh object holds no array at all) take the
    # framework the writer recorded, one of a fixed set and only one the process has already
    # imported (nothing is imported because a file names it, R-CMP-12); live leaves still decide
    # where they exist.
    hints = reader.record.hints or {}
    default = hints.get("framework")
    if default not in ("torch", "jax") or default not in sys.modules:
        default = None
    if framework == "numpy" and live is not None:
        stored = conform(stored, live, map_location=reader.map_location, default=default).value
    for entry in lifted:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], list)
                and type(entry[1]) is str):
            raise IncompatibleComponent(f"stored attribute entry is not [path, name, value]: {entry!r:.200}")
        path, name, value = entry
        if framework == "numpy" and live is not None:
            live_owner = _follow(live, path)
            live_value = getattr(live_owner, name, None) if live_owner is not None else None
            if live_value is not None:
                value = conform(value, live_value, map_location=reader.map_location, default=default).value
        stored = _attach(stored, path, name, value)
    return stored


def _follow(node: Any, path: list[Any]) -> Any:
    for key in path:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return None
    return node


def _attach(node: Any, path: list[Any], name: str, value: Any) -> Any:
    """``node`` with the mapping at ``path`` an ``OrderedDict`` carrying attribute ``name``."""
    if not path:
        if not isinstance(node, dict):
            raise IncompatibleComponent(f"stored attribute {name!r} belongs to a mapping, found a "
                                        f"{type(node).__name__}")
        owner = node if type(node) is OrderedDict else OrderedDict(node)
        setattr(owner, name, value)
        return owner
    key, rest = path[0], path[1:]
    try:
        child = node[key]
    except (KeyError, IndexError, TypeError):
        raise IncompatibleComponent(f"stored attribute {name!r} belongs to {path!r}, which the state lacks") from None
    updated = _attach(child, rest, name, value)
    if isinstance(node, tuple):
        return type(node)(updated if i == key else item for i, item in enumerate(node))
    node[key] = updated
    return node

"""The adapter protocol and the framework-free adapters.

An adapter saves one live value as one component and restores it. Built in:

* :class:`StateDictAdapter` — objects with ``state_dict()`` / ``load_state_dict()``
  (torch modules and optimizers, custom classes); a ``tree`` component.
* :class:`DumpLoadAdapter` — objects with ``dump(path)`` / ``load(path)``; a ``files`` component.
* :class:`JsonAdapter` — JSON values (configs); a ``json`` component.
* :class:`TreeAdapter` — arrays and nested dicts/lists/tuples; a ``tree`` component.

Custom adapters subclass :class:`Adapter` and are registered per type
(:func:`register_adapter`) or per checkpoint instance.

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

import abc
import contextlib
import copy
import dataclasses
import functools
import math
import os
import sys
import tempfile
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CheckpointError, IncompatibleComponent, UnsupportedValue
from ..integrity import crc32c_of, file_entry, new_sha256
from ..limits import JSON_MAX_DEPTH, JSON_MAX_SAFE_INT
from ..manifest_builder import component_record
from ..restore_plan import RestorePlan
from ..strict_json import dump_json, encode_utf8
from ..tree.encode import small_file_entry, write_small_file, write_tree
from . import registry
from .conform import conform
from .frameworks import convert_leaf

if TYPE_CHECKING:
    from ..container.archive_writer import ArchiveWriter
    from ..reader import CheckpointReader


@dataclass
class ComponentWriter:
    """Where an adapter writes one component, and what it wrote."""

    directory: Path
    durable: bool = True
    sha256: bool = False
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    hints: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] | None = None
    #: Archive form: files written through :meth:`write_tree`/:meth:`write_json` go straight into the
    #: archive as ``<member_prefix>/<file>``; only files an adapter writes itself use :attr:`directory`.
    archive: ArchiveWriter | None = None
    member_prefix: str = ""

    def write_tree(self, value: Any) -> None:
        if self.archive is None:
            self.directory.mkdir(parents=True, exist_ok=True)
        self.files.update(write_tree(value, self.directory, converter=convert_leaf, durable=self.durable,
                                     sha256=self.sha256, archive=self.archive, member_prefix=self.member_prefix))

    def write_json(self, value: Any) -> None:
        try:
            data = encode_utf8(dump_json(value) + "\n")
        except CheckpointError as exc:  # a lone surrogate: no UTF-8 file can hold it (the rule a reader checks)
            raise UnsupportedValue(f"a string is not valid Unicode ({exc.message}): a json component holds "
                                   "Unicode text only; fix the string, or store bytes in a tree component",
                                   rule=exc.rule) from None
        if self.archive is not None:
            self.archive.add_bytes(f"{self.member_prefix}/value.json", data)
            self.files["value.json"] = small_file_entry(data, sha256=self.sha256)
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self.files["value.json"] = write_small_file(self.directory / "value.json", data, durable=self.durable,
                                                    sha256=self.sha256)

    def write_file(self, rel: str, data: bytes, *, sha256: bool | None = None) -> None:
        """Store ``data`` as the component file ``rel`` (``sha256`` overrides the writer's setting for it)."""
        target = self.directory / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        self.files[rel] = write_small_file(target, data, durable=self.durable,
                                           sha256=self.sha256 if sha256 is None else sha256)

    def record(self, kind: str, kind_version: int, path: str) -> dict[str, Any]:
        """The manifest record of what was written (hints and metadata only when set)."""
        return component_record(kind=kind, kind_version=kind_version, path=path, files=self.files,
                                hints=self.hints or None, metadata=self.metadata)

    def inventory_directory(self) -> None:
        """Record every file an adapter wrote into :attr:`directory` by itself."""
        for root, _, names in os.walk(self.directory):
            for file_name in sorted(names):
                full = Path(root) / file_name
                rel = full.relative_to(self.directory).as_posix()
                if full.is_symlink():
                    raise IncompatibleComponent("dump() created a symlink; checkpoints hold regular files only",
                                                file=rel)
                self.files[rel] = _file_entry(full, durable=self.durable, sha256=self.sha256)


def _file_entry(path: Path, *, durable: bool, sha256: bool) -> dict[str, Any]:
    crc = 0
    digest = new_sha256() if sha256 else None
    size = 0
    with open(path, "rb", buffering=0) as handle:
        while chunk := handle.read(1 << 20):
            crc = crc32c_of(chunk, crc)
            size += len(chunk)
            if digest is not None:
                digest.update(chunk)
        if durable:
            os.fsync(handle.fileno())
    return file_entry(size, crc, digest)


@dataclass
class ComponentReader:
    """What an adapter reads one component through."""

    reader: CheckpointReader
    name: str
    map_location: Any = None
    verify: bool = True
    #: ``rename=`` / ``subtree=`` / ``cast=`` of the load (:mod:`opencheckpoint.restore_plan`); empty by default
    plan: RestorePlan = field(default_factory=RestorePlan)

    @property
    def record(self) -> Any:
        return self.reader.record(self.name)

    def tree(self, framework: str = "numpy", *, embedded: bool = False) -> Any:
        """The stored tree, its key paths selected and renamed by :attr:`plan` (``embedded``: optimizer
        states, whose parameter trees lie below their own fields; see :class:`~opencheckpoint.restore_plan.Renamer`)."""
        value = self.reader.read(self.name, framework=framework, verify=self.verify, map_location=self.map_location)
        return self.plan.apply(value, self.name, embedded=embedded)

    def tree_into(self, target: Any) -> Any:
        """The tree (NumPy), with arrays that fit ``target``'s arrays read into them in place.

        Verify-first unless ``verify`` is False: see :meth:`CheckpointReader.read_into`.
        """
        return self.reader.read_into(self.name, target, verify=self.verify)

    def prepare_into(self, target: Any) -> Callable[[], Any]:
        """Phase 1 of :meth:`tree_into`: every array verified now, ``target`` untouched; the returned
        callable fills ``target``'s arrays and returns the tree."""
        return self.reader.prepare_into(self.name, target, verify=self.verify)

    def json(self) -> Any:
        return self.reader.json(self.name)  # a config, not model state: rename=/subtree= leave it as stored

    def verify_bytes(self) -> None:
        """Check every byte of the component against its checksums, holding nothing in memory.

        Tree components: the document (step 13-15) and every array (CRC-32C,
        bool bytes) through one small scratch buffer; other kinds: every file
        (CRC-32C). A no-op when the caller opted out (``verify=False``).
        """
        if not self.verify:
            return
        from ..arrays import ScratchVerifier

        record = self.record
        if record.kind == "tree":
            decoded, data_file, size = self.reader.decoded_layout(self.name)
            if any(ref.nbytes for ref in decoded.arrays):
                with self.reader.open_region(data_file, size) as region:
                    verifier = ScratchVerifier(region, data_file)
                    for ref in decoded.arrays:
                        if ref.nbytes:
                            verifier.verify(ref)
            return
        for rel in record.files:
            self.reader.read_small(self.name, rel)

    @contextlib.contextmanager
    def directory(self) -> Iterator[Path]:
        """A local directory holding the component's verified files (a copy for archives)."""
        with tempfile.TemporaryDirectory(prefix="opencheckpoint-") as tmp:
            root = Path(tmp)
            for rel, data in self.reader.iter_files(self.name):
                target = root / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            yield root


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

    @abc.abstractmethod
    def save(self, value: Any, writer: ComponentWriter) -> None:
        """Write ``value`` through ``writer``."""

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        """Phase 1: read and check everything; MUST NOT modify ``value``.

        Raise :class:`~opencheckpoint.errors.IncompatibleComponent` for a
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
    """The framework of the first framework leaf of a plain dict/list/tuple tree ('numpy' if none)."""
    stack = [value]
    cache = _FRAMEWORK_OF_TYPE
    while stack and budget > 0:
        budget -= 1
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        else:
            kind = type(item)
            framework = cache.get(kind)
            if framework is None:
                framework = module_framework(kind)
                if len(cache) < 4096:
                    cache[kind] = framework
            if framework != "numpy":
                return framework
    return "numpy"


class StateDictAdapter(Adapter):
    """``state_dict()`` is stored as a tree; ``load_state_dict(tree)`` restores it.

    Arrays come back as the framework objects the live ``state_dict()`` holds
    at the same place (a torch tensor where the object has one), NumPy arrays
    elsewhere. The object's own ``load_state_dict`` cannot be checked
    beforehand: its restore is ``checked=False``.
    """

    kind = "tree"

    def save(self, value: Any, writer: ComponentWriter) -> None:
        writer.hints["class"] = f"{type(value).__module__}.{type(value).__qualname__}"
        state = value.state_dict()
        framework = container_framework(state)
        if framework != "numpy":
            # A fresh live object (an empty torchrl ReplayBuffer) has no leaf to say what its
            # stored arrays were: the framework is recorded for them (see read_state).
            writer.hints["framework"] = framework
        write_state(writer, state)

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        live = value.state_dict()
        state = read_state(reader, "numpy", live)

        def apply() -> None:
            try:
                value.load_state_dict(state)
            except (KeyError, ValueError, TypeError, RuntimeError) as exc:
                raise IncompatibleComponent(f"load_state_dict failed: {exc}") from exc

        return PreparedRestore(apply, checked=False)


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


class DumpLoadAdapter(Adapter):
    """``dump(path)`` writes any files into the component directory; ``load(path)`` reads them back."""

    kind = "files"

    def save(self, value: Any, writer: ComponentWriter) -> None:
        writer.hints["class"] = f"{type(value).__module__}.{type(value).__qualname__}"
        writer.directory.mkdir(parents=True, exist_ok=True)
        value.dump(writer.directory)
        writer.inventory_directory()

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        reader.verify_bytes()

        def apply() -> None:
            with reader.directory() as directory:
                value.load(directory)

        # The object's own load() reads the files: nothing can check beforehand that it accepts them.
        return PreparedRestore(apply, checked=False)


def is_json_value(value: Any, depth: int = 1) -> bool:
    """True for values that round-trip exactly through I-JSON (str keys, finite floats, safe ints)."""
    if depth > JSON_MAX_DEPTH:
        return False
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return True
    if kind is int:
        return bool(abs(value) <= JSON_MAX_SAFE_INT)  # value is typed Any here: bool() keeps the result a bool
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        return all(type(k) is str and is_json_value(v, depth + 1) for k, v in value.items())
    if kind is list:
        return all(is_json_value(v, depth + 1) for v in value)
    return False


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
    checkpoint raises :class:`~opencheckpoint.errors.IntegrityError` and
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
            fill = reader.prepare_into(value)

            def apply_numpy() -> Any:
                loaded = fill()
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
        conformed = conform(reader.tree("numpy"), value, map_location=reader.map_location, in_place=True)

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
    from ..dtypes import numpy_dtype

    return numpy_dtype(name)


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


def _refresh_in_place(value: Any, loaded: Any) -> None:
    if isinstance(value, dict) and isinstance(loaded, dict):
        value.clear()
        value.update(loaded)
    elif isinstance(value, list) and isinstance(loaded, list):
        value[:] = loaded


def is_random_state(value: Any) -> bool:
    """NumPy Generator / RandomState / BitGenerator or a Python ``random.Random``."""
    import random

    return isinstance(value, (np.random.Generator, np.random.RandomState, np.random.BitGenerator,
                              random.Random))


_TYPE_ADAPTERS: list[tuple[type, Adapter]] = []


def register_adapter(component_type: type, adapter: Adapter) -> None:
    """Use ``adapter`` for every value of ``component_type`` (most recent registration wins)."""
    _TYPE_ADAPTERS.insert(0, (component_type, adapter))


def _lookup(registry: list[tuple[type, Adapter]], value: Any) -> Adapter | None:
    for component_type, adapter in registry:
        if isinstance(value, component_type):
            return adapter
    return None


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
        from . import numpy_rng

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


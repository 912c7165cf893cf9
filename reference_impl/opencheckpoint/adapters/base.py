"""The adapter protocol and the framework-free adapters.

An adapter saves one live value as one component and restores it. Built in:

* :class:`StateDictAdapter` — objects with ``state_dict()`` / ``load_state_dict()``
  (torch modules and optimizers, custom classes); a ``tree`` component.
* :class:`DumpLoadAdapter` — objects with ``dump(path)`` / ``load(path)``; a ``files`` component.
* :class:`JsonAdapter` — JSON values (configs); a ``json`` component.
* :class:`TreeAdapter` — arrays and nested dicts/lists/tuples; a ``tree`` component.

Custom adapters subclass :class:`Adapter` and are registered per type
(:func:`register_adapter`) or per checkpoint instance.
"""

from __future__ import annotations

import abc
import contextlib
import math
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import IncompatibleComponent
from ..integrity import crc32c_of, file_entry, new_sha256
from ..limits import JSON_MAX_DEPTH, JSON_MAX_SAFE_INT
from ..strict_json import dump_json
from ..tree.encode import small_file_entry, write_small_file, write_tree
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
        data = (dump_json(value) + "\n").encode("utf-8")
        if self.archive is not None:
            self.archive.add_bytes(f"{self.member_prefix}/value.json", data)
            self.files["value.json"] = small_file_entry(data, sha256=self.sha256)
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self.files["value.json"] = write_small_file(self.directory / "value.json", data, durable=self.durable,
                                                    sha256=self.sha256)

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

    @property
    def record(self) -> Any:
        return self.reader.record(self.name)

    def tree(self, framework: str = "numpy") -> Any:
        return self.reader.read(self.name, framework=framework, verify=self.verify, map_location=self.map_location)

    def tree_into(self, target: Any) -> Any:
        """The tree (NumPy), with arrays that fit ``target``'s arrays read into them in place.

        Verify-first unless ``verify`` is False: see :meth:`CheckpointReader.read_into`.
        """
        return self.reader.read_into(self.name, target, verify=self.verify)

    def json(self) -> Any:
        return self.reader.json(self.name)

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


class Adapter(abc.ABC):
    """Saves one value as one component and restores it."""

    #: the component kind this adapter writes
    kind: str = "tree"
    kind_version: int = 1
    #: restore after every other component (global RNG state)
    restore_last: bool = False

    @abc.abstractmethod
    def save(self, value: Any, writer: ComponentWriter) -> None:
        """Write ``value`` through ``writer``."""

    @abc.abstractmethod
    def load(self, value: Any, reader: ComponentReader, *, strict: str) -> Any:
        """Restore into ``value`` (in place where possible); return the loaded value."""


def framework_of(value: Any) -> str:
    """'torch', 'jax' or 'numpy', by the top-level module of the object's type or a base class.

    Walking the MRO matters: user models subclass ``torch.nn.Module`` or
    ``flax.nnx.Module`` from their own modules.
    """
    return module_framework(type(value))


def module_framework(kind: type) -> str:
    for cls in kind.__mro__:
        root = cls.__module__.split(".", 1)[0]
        if root == "torch":
            return "torch"
        if root in ("jax", "jaxlib", "flax", "optax"):
            return "jax"
    return "numpy"


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
    """``state_dict()`` is stored as a tree; ``load_state_dict(tree)`` restores it."""

    kind = "tree"

    def save(self, value: Any, writer: ComponentWriter) -> None:
        writer.hints["class"] = f"{type(value).__module__}.{type(value).__qualname__}"
        writer.write_tree(value.state_dict())

    def load(self, value: Any, reader: ComponentReader, *, strict: str) -> Any:
        state = reader.tree(framework_of(value))
        try:
            value.load_state_dict(state)
        except (KeyError, ValueError, TypeError, RuntimeError) as exc:
            raise IncompatibleComponent(f"load_state_dict failed: {exc}") from exc
        return None


class DumpLoadAdapter(Adapter):
    """``dump(path)`` writes any files into the component directory; ``load(path)`` reads them back."""

    kind = "files"

    def save(self, value: Any, writer: ComponentWriter) -> None:
        writer.hints["class"] = f"{type(value).__module__}.{type(value).__qualname__}"
        writer.directory.mkdir(parents=True, exist_ok=True)
        value.dump(writer.directory)
        writer.inventory_directory()

    def load(self, value: Any, reader: ComponentReader, *, strict: str) -> Any:
        with reader.directory() as directory:
            value.load(directory)
        return None


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

    def load(self, value: Any, reader: ComponentReader, *, strict: str) -> Any:
        loaded = reader.json()
        _refresh_in_place(value, loaded)
        return loaded


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

    def load(self, value: Any, reader: ComponentReader, *, strict: str) -> Any:
        framework = framework_of(value)
        if framework == "numpy" and isinstance(value, (np.ndarray, dict, list)):
            # Arrays that fit are filled where they are (no intermediate copy), after every array
            # of the component passed its checks (CheckpointReader.read_into).
            loaded = reader.tree_into(value)
        else:
            loaded = reader.tree(framework)
        if isinstance(value, np.ndarray) and isinstance(loaded, np.ndarray):
            if value.shape != loaded.shape or value.dtype != loaded.dtype:
                raise IncompatibleComponent(
                    f"stored {loaded.dtype}{list(loaded.shape)} does not fit {value.dtype}{list(value.shape)}")
            if value.flags.writeable and loaded is not value:
                np.copyto(value, loaded)
        else:
            _refresh_in_place(value, loaded)
        return loaded


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
    if framework != "numpy":
        module = importlib.import_module(f"opencheckpoint.adapters.{framework}")
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
    if callable(getattr(value, "dump", None)) and callable(getattr(value, "load", None)):
        return DumpLoadAdapter()
    if is_json_value(value) and isinstance(value, (dict, list)):
        return JsonAdapter()
    return TreeAdapter()


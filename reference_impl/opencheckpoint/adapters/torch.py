"""PyTorch adapter: tensors and torch objects to tree values, and stored arrays back to tensors.

Imported lazily (by the tree encoder when it meets a torch object, or when a
component is read with ``framework="torch"``); ``import opencheckpoint``
never imports it.

Writing: :func:`to_tree_value` turns a tensor into a NumPy array that shares
its memory (CPU tensors), so the encoder's data-pointer aliasing check sees
tied weights as one extent. bfloat16 and float8 tensors have no NumPy dtype
in torch; they are viewed as same-width integers, then as the ml_dtypes type.

Reading: :data:`FRAMEWORK` turns verified arrays into tensors with exactly the
stored bits, honouring ``map_location`` like :func:`torch.load`.

Live objects: :func:`adapter_for` picks :class:`ModuleAdapter` (``nn.Module``:
checks names, shapes and dtypes before touching the module, then copies into
the existing parameters), :class:`GeneratorAdapter` (``torch.Generator``) or
:class:`TorchStateDictAdapter` (optimizers, LR schedulers, ``GradScaler``, any
object with ``state_dict``/``load_state_dict``).

>>> import torch, numpy as np
>>> to_tree_value(torch.arange(3, dtype=torch.bfloat16)).dtype.name
'bfloat16'
>>> FRAMEWORK.array(np.arange(3, dtype=np.uint16)).dtype
torch.uint16
>>> to_tree_value(torch.float8_e4m3fn)
DtypeValue(name='float8_e4m3fn')
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch

from ..format.dtypes import numpy_dtype
from ..format.errors import IncompatibleComponent, UnsupportedValue
from ..read.casting import CastRefused
from ..read.restore_hints import suggest
from ..read.restore_plan import RestorePlan
from ..tree.encode import NOT_HANDLED
from ..tree.nodes import DtypeValue
from .component_io import ComponentReader, ComponentWriter
from .protocol import Adapter, PreparedRestore
from .state_dict import ATTRIBUTES_KEY, StateDictAdapter, read_state, write_state
from .torch_kept import MapRanges, load_owning
from .torch_optimizer_fit import check_optimizer_state
from .torch_tensors import (
    _VIEWS,
    FRAMEWORK,
    TORCH_DTYPE_NAMES,
    TORCH_DTYPES,
    TorchFramework,
    dtype_name_of,
    numpy_to_tensor,
    place,
    plain_tensors_to_numpy,
    target_device,
    tensor_to_numpy,
)


def to_tree_value(value: Any) -> Any:
    """Replacement tree value for a torch object, or ``NOT_HANDLED``."""
    if isinstance(value, torch.Tensor):
        if _is_dtensor(value):  # a sharded tensor: this rank's shards (torch.distributed), in a collective save
            from .torch_dtensor import to_sharded

            return to_sharded(value)
        return tensor_to_numpy(value)  # every other tensor: its bytes only if the allowlist proves them its values
    if isinstance(value, torch.dtype):
        return DtypeValue(dtype_name_of(value))
    if isinstance(value, torch.Size):
        return tuple(int(d) for d in value)
    if isinstance(value, torch.device):
        return str(value)
    if isinstance(value, torch.Generator):
        return tensor_to_numpy(value.get_state())
    return NOT_HANDLED



def _is_dtensor(value: torch.Tensor) -> bool:
    """Exactly a ``DTensor`` (a subclass of it is refused by the allowlist); torch.distributed is not imported
    here: a DTensor exists only once ``torch.distributed.tensor`` is."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and type(value) is module.DTensor


# -- live objects ----------------------------------------------------------------------------

def _class_hint(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


class TorchStateDictAdapter(Adapter):
    """Optimizers, LR schedulers, ``GradScaler`` and any torch object with ``state_dict``.

    Restored tensors are fresh, writable CPU tensors (or placed by
    ``map_location``); optimizers move their state next to their parameters.
    """

    kind = "tree"

    def save(self, value: Any, writer: ComponentWriter) -> None:
        writer.hints.update(framework="torch", **{"class": _class_hint(value)})
        state = value.state_dict()
        # An optimizer's state (a plain dict): its tensors converted in one pass, as a module's. Any other
        # mapping may carry attributes write_state keeps: left to the encoder as it is.
        arrays = plain_tensors_to_numpy(state) if type(state) is dict else None
        write_state(writer, state if arrays is None else arrays)

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        if isinstance(value, torch.optim.Optimizer) and reader.plan.selects:
            # An optimizer keys its state by parameter order, not by name: it follows renamed parameters as it
            # is, and a rename/subtree meant for the module's key paths must not touch its "state.0.exp_avg".
            reader = dataclasses.replace(reader, plan=RestorePlan(cast=reader.plan.cast))
        checked = False
        if isinstance(value, torch.optim.Optimizer) and _holds_dtensors(
                {str(i): p for i, p in enumerate(p for g in value.param_groups for p in g["params"])}):
            from .torch_dtensor import read_optimizer_state

            state = read_optimizer_state(reader, value)  # each rank reads only its parameters' blocks
        else:
            state = read_state(reader, "torch")
        if isinstance(value, torch.optim.Optimizer):
            check_optimizer_state(value, state)
            checked = True  # what Optimizer.load_state_dict rejects was checked just above

        def apply() -> None:
            try:
                value.load_state_dict(state)
            except (KeyError, ValueError, TypeError, RuntimeError, IndexError) as exc:
                raise IncompatibleComponent(f"{type(value).__name__}.load_state_dict failed: {exc}") from exc

        return PreparedRestore(apply, checked=checked)


class GeneratorAdapter(Adapter):
    """``torch.Generator``: its state bytes (``get_state``/``set_state``) and device."""

    kind = "tree"

    def save(self, value: torch.Generator, writer: ComponentWriter) -> None:
        writer.hints.update(framework="torch", **{"class": "torch.Generator"})
        writer.write_tree({"device": str(value.device), "state": value.get_state()})

    def prepare(self, value: torch.Generator, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        stored = reader.tree("numpy")
        state = stored.get("state") if isinstance(stored, dict) else None
        if not isinstance(state, np.ndarray) or state.dtype != np.uint8 or state.ndim != 1:
            raise IncompatibleComponent("generator component needs a 1-d uint8 'state' array")
        tensor = torch.from_numpy(np.array(state))
        try:  # on a scratch generator of the same device: the live one is touched only in phase 2
            torch.Generator(value.device).set_state(tensor)
        except RuntimeError as exc:
            raise IncompatibleComponent(f"torch.Generator.set_state failed: {exc}") from exc

        def apply() -> None:
            value.set_state(tensor)

        return PreparedRestore(apply)


class ModuleAdapter(Adapter):
    """``nn.Module``: the ``state_dict`` (parameters and persistent buffers) as a tree.

    Loading compares names, shapes and dtypes with the module's own state dict
    *before* anything is modified. ``strict="error"`` raises
    :class:`IncompatibleComponent` listing missing, unexpected and mismatched
    names; ``"warn"`` loads the matching entries and warns; ``"ignore"`` loads
    them silently. Matching entries are copied by ``load_state_dict`` straight
    from verified, memory-mapped views (no intermediate copy), on one intra-op
    thread whatever ``torch.get_num_threads()`` says (see :func:`_one_intra_op_thread`).
    Every array is checksummed before the first copy, in one pass shared by a
    small thread pool that never holds the restore up (decision 0011). A module
    whose ``load_state_dict`` keeps the tensors it is given (``assign=True``)
    is given fresh, owned ones in a second call (:mod:`.torch_kept`).
    """

    kind = "tree"

    def save(self, value: torch.nn.Module, writer: ComponentWriter) -> None:
        writer.hints.update(framework="torch", **{"class": _class_hint(value)})
        state = value.state_dict()
        versions = _version_metadata(state)
        if versions is not None:
            # torch's per-submodule versions (OrderedDict._metadata) are not tree data: they are kept
            # in the component record and re-attached on load, never dropped.
            writer.metadata = {VERSION_METADATA_KEY: versions}
        arrays = plain_tensors_to_numpy(state)  # converted in one pass; None: the encoder names the refused one
        writer.write_tree(dict(state) if arrays is None else arrays)

    def prepare(self, value: torch.nn.Module, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        if _saved_by_state_dict_adapter(reader):
            return StateDictAdapter().prepare(value, reader, strict=strict)
        return self._prepare_module(value, reader, strict=strict)

    def _prepare_module(self, value: torch.nn.Module, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        own = value.state_dict()
        if _holds_dtensors(own):  # a sharded module: each rank reads only the regions it holds (renamed there)
            from .torch_dtensor import read_module_state

            stored = read_module_state(reader, own)
            skipped: list[str] = []
        else:
            stored, skipped = _stored_state(reader, own)
        if not isinstance(stored, dict):
            raise IncompatibleComponent(f"stored value is a {type(stored).__name__}, not a state dict")
        if not _holds_dtensors(own) and reader.plan.selects:  # rename= / subtree= (a copy; as stored without)
            stored = reader.plan.apply_flat(stored, reader.name)
        ranges = MapRanges(() if _holds_dtensors(own) else stored.values())  # where the map's views live
        missing = [k for k in own if k not in stored]
        unexpected = [k for k in stored if k not in own] + skipped
        mismatched, dtype_only = _mismatches(reader, own, stored)
        problems = []
        for label, names in (("missing", missing), ("unexpected", unexpected), ("mismatched", mismatched)):
            if names:
                problems.append(f"{label}: {', '.join(names)}")
        if problems and strict == "error":
            raise IncompatibleComponent(f"{type(value).__name__} does not fit the stored state dict; "
                                        + "; ".join(problems) + suggest(missing, unexpected, dtype_only))
        if problems:
            reader.not_restored.extend(problems)  # strict="warn"/"ignore": LoadResult.partial says what was left
        bad = {name.split(" ", 1)[0] for name in mismatched}
        matching = OrderedDict((k, v) for k, v in stored.items() if k in own and k not in bad)
        _check_writable(value, own, matching)
        matching._metadata = _stored_version_metadata(reader, own)  # type: ignore[attr-defined]  # torch's convention
        name = reader.name

        load = _loader(value, strict=not problems)

        def fresh() -> dict[str, Any]:  # owned tensors for a module that kept views (assign=True)
            return reader.plan.apply_flat(reader.reader.read(name, framework="torch", verify=reader.verify), name)

        def apply() -> None:
            load_owning(value, matching, ranges, load, fresh, name)
            if problems and strict == "warn":
                warnings.warn(f"component {name!r}: loaded {len(matching)} of {len(own)} entries; "
                              + "; ".join(problems), stacklevel=5)

        return PreparedRestore(apply)


def _stored_state(reader: ComponentReader, own: Mapping[str, Any]) -> tuple[Any, list[str]]:
    """The stored state dict (views of the map), and the stored entries left unread: on an object store
    (each read a request) a module that lacks some stored entries reads only the ones it has, each verified,
    so a partial load fetches what it restores (issue 22); the others are reported as unexpected all the same."""
    source = reader.reader.source
    names = reader.reader.entry_names(reader.name) if source.reads_by_request and not reader.plan.selects else None
    if names is None or set(names) <= set(own):
        return reader.reader.read(reader.name, framework=_VIEWS, copy=False, verify=reader.verify), []
    wanted = [name for name in names if name in own]
    stored = reader.reader.read_entries(reader.name, wanted, framework="torch", verify=reader.verify)
    return stored, [name for name in names if name not in own]


def _saved_by_state_dict_adapter(reader: ComponentReader) -> bool:
    """Whether the module was saved with an explicit ``StateDictAdapter()``: its layout (``{"state",
    "attributes"}``, the state dict's ``_metadata`` kept), read back by that adapter through the module's
    own ``load_state_dict``."""
    metadata = reader.record.metadata
    return isinstance(metadata, dict) and metadata.get(ATTRIBUTES_KEY) is not None


def _loader(module: torch.nn.Module, *, strict: bool) -> Callable[[Any], None]:
    """``module.load_state_dict(state, strict=strict)`` copying on one intra-op thread, its refusal as
    :class:`IncompatibleComponent`."""

    def load(state: Any) -> None:
        try:
            with torch.no_grad(), _one_intra_op_thread():
                module.load_state_dict(state, strict=strict)
        except (KeyError, ValueError, TypeError, RuntimeError) as exc:
            raise IncompatibleComponent(f"load_state_dict failed: {exc}") from exc

    return load


def _check_writable(module: torch.nn.Module, own: Any, matching: Any) -> None:
    """Refuse, in phase 1, live tensors ``load_state_dict`` cannot copy into (it would fail in phase 2).

    An inference tensor (a module built under ``torch.inference_mode()``) cannot be written
    outside that mode, and ``copy_`` refuses a tensor whose elements share memory (an
    expanded buffer, stride 0).
    """
    for key in matching:
        tensor = own[key]
        if not isinstance(tensor, torch.Tensor) or not tensor.numel():
            continue
        if tensor.is_inference():
            reason = "is an inference tensor (built under torch.inference_mode()): build the module outside it"
        elif torch._debug_has_internal_overlap(tensor) == 1:  # MemOverlap::Yes
            reason = "has elements sharing memory (an expanded view): register a real tensor (.clone())"
        else:
            continue
        raise IncompatibleComponent(f"{type(module).__name__}.{key} cannot be written in place: it {reason}; "
                                    "nothing was restored")


#: Component metadata key holding a module state dict's ``_metadata`` (per-submodule versions).
VERSION_METADATA_KEY = "torch_module_versions"


#: What ``nn.Module.state_dict`` records for a submodule that does not set ``_version`` itself.
_DEFAULT_VERSION = {"version": 1}


def _version_metadata(state: Any) -> dict[str, Any] | None:
    """The entries of a module state dict's ``_metadata`` (submodule prefix -> {"version": int}) that differ
    from the default ``{"version": 1}``, as JSON; None when every entry is the default.

    Only non-default entries are recorded, so a component of ordinary modules
    is written exactly as before versions were kept; loading restores the
    default for every prefix not recorded.
    """
    from ..format.strict_json import is_json_value

    metadata = getattr(state, "_metadata", None)
    if metadata is None:
        return None
    plain = {str(prefix): dict(entry) for prefix, entry in metadata.items() if dict(entry) != _DEFAULT_VERSION}
    if not plain:
        return None
    if not is_json_value(plain):
        raise UnsupportedValue("the state dict's _metadata (module versions) is not JSON; it would be lost",
                               field="$._metadata")
    return plain


def _stored_version_metadata(reader: ComponentReader, live: Any) -> Any:
    """``_metadata`` for ``load_state_dict``: the recorded entries, the default for every other prefix of the
    live module's own state dict."""
    metadata = reader.record.metadata
    stored = metadata.get(VERSION_METADATA_KEY, {}) if isinstance(metadata, dict) else {}
    if not isinstance(stored, dict) or not all(isinstance(v, dict) for v in stored.values()):
        raise IncompatibleComponent(f"component metadata {VERSION_METADATA_KEY!r} is not a map of module versions")
    if reader.plan.selects:  # a submodule's version follows its entries through rename= / subtree=
        stored = _renamed_prefixes(stored, reader.plan.renamer())
    prefixes = list(getattr(live, "_metadata", {}) or {})
    prefixes += [prefix for prefix in stored if prefix not in prefixes]
    return OrderedDict((prefix, dict(stored.get(prefix, _DEFAULT_VERSION))) for prefix in prefixes)


def _cast(reader: ComponentReader, key: str, stored: torch.Tensor, live: torch.Tensor) -> torch.Tensor | str:
    """``stored`` converted to ``live``'s dtype under the load's ``cast=`` policy (recorded in its report), or
    ``""`` / ``": <why not>"`` when it is not converted (the caller reports the mismatch)."""
    caster = reader.plan.caster
    if not caster.enabled:
        return ""
    target = TORCH_DTYPE_NAMES.get(live.dtype)
    if target is None:
        return ": this torch dtype has no OpenCheckpoint name"
    try:
        converted = caster.cast(tensor_to_numpy(stored), numpy_dtype(target), key, reader.name)
    except CastRefused as exc:
        return f": {exc}"
    return numpy_to_tensor(converted)


def _renamed_prefixes(versions: dict[str, Any], renamer: Callable[[str], str | None]) -> dict[str, Any]:
    """Module-version entries keyed by the renamed submodule prefixes (a prefix renamed as its entries are)."""
    out: dict[str, Any] = {}
    for prefix, entry in versions.items():
        probe = renamer(f"{prefix}.{_PROBE}" if prefix else _PROBE)
        if probe is not None and probe.endswith(_PROBE):
            out[probe[: -len(_PROBE)].rstrip(".")] = entry
    return out


#: A key-path segment no state dict uses: renaming ``<prefix>.<_PROBE>`` tells where ``<prefix>`` goes.
_PROBE = "\x00version"


@contextlib.contextmanager
def _one_intra_op_thread() -> Iterator[None]:
    """Run the copies into the parameters on one intra-op thread, then restore torch's setting.

    ``Tensor.copy_`` splits a big copy over torch's intra-op threads; when other processes keep the
    CPUs busy (env workers, data loaders: the usual RL setting), those threads wait for each other
    and the copy collapses (measured, 2 cores: 2.2 GiB/s with one busy neighbour, ~0.5 GiB/s with
    several, against 3.9 GiB/s single-threaded). A copy is bound by memory bandwidth, which one
    thread nearly saturates, so one thread is never much slower on a quiet machine either.
    """
    previous = torch.get_num_threads()
    if previous == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _holds_dtensors(state: Mapping[str, Any]) -> bool:
    """Whether a live state holds DTensors (checked by type name: torch.distributed is imported only then)."""
    return any(type(value).__name__ == "DTensor" for value in state.values())


def _describe(tensor: torch.Tensor) -> str:
    return f"{TORCH_DTYPE_NAMES.get(tensor.dtype, str(tensor.dtype))}{list(tensor.shape)}"


_MODULE = ModuleAdapter()
_GENERATOR = GeneratorAdapter()
_STATE_DICT = TorchStateDictAdapter()


def adapter_for(value: Any) -> Adapter | None:
    """The adapter for a live torch object, or None (tensors and plain values use the tree adapter)."""
    if isinstance(value, torch.nn.Module):
        return _MODULE
    if isinstance(value, torch.Generator):
        return _GENERATOR
    if callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None)):
        return _STATE_DICT
    return None


__all__ = [
    "FRAMEWORK",
    "TORCH_DTYPES",
    "TORCH_DTYPE_NAMES",
    "GeneratorAdapter",
    "ModuleAdapter",
    "TorchFramework",
    "TorchStateDictAdapter",
    "adapter_for",
    "numpy_to_tensor",
    "place",
    "target_device",
    "tensor_to_numpy",
    "to_tree_value",
]


def _mismatches(reader: ComponentReader, own: Mapping[str, Any],
                stored: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    """The module's tensors the stored entries do not fit (described), and the dtype pairs among them.

    A stored tensor whose dtype differs is cast where the load's ``cast`` option allows it (``stored`` then
    holds the cast tensor) and counts as fitting.
    """
    mismatched: list[str] = []
    dtype_only: list[tuple[str, str]] = []
    for key in own:
        if key in stored and isinstance(own[key], torch.Tensor):
            theirs = stored[key]
            if not isinstance(theirs, torch.Tensor):
                mismatched.append(f"{key} (stored {type(theirs).__name__}, module has a tensor)")
            elif theirs.shape != own[key].shape:
                mismatched.append(f"{key} (stored {_describe(theirs)}, module {_describe(own[key])})")
            elif theirs.dtype != own[key].dtype:
                converted = _cast(reader, key, theirs, own[key])
                if isinstance(converted, torch.Tensor):
                    stored[key] = converted
                    continue
                dtype_only.append((TORCH_DTYPE_NAMES.get(theirs.dtype, str(theirs.dtype)),
                                   TORCH_DTYPE_NAMES.get(own[key].dtype, str(own[key].dtype))))
                mismatched.append(f"{key} (stored {_describe(theirs)}, module {_describe(own[key])}{converted})")
    return mismatched, dtype_only

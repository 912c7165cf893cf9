"""Torch tensors and NumPy arrays, bit for bit: the dtype table, tensors to arrays and back, ``map_location``.

Split from :mod:`opencheckpoint.adapters.torch` (which re-exports every name):
the array-level half of the torch adapter, used by the live-object adapters, the
sharded-tensor conversions (:mod:`.torch_dtensor`) and the converters.

>>> import torch, numpy as np
>>> tensor_to_numpy(torch.arange(3, dtype=torch.bfloat16)).dtype.name
'bfloat16'
>>> FRAMEWORK.array(np.arange(3, dtype=np.uint16)).dtype
torch.uint16
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any, Final

import numpy as np
import torch

from ..format.dtypes import dtype_name, numpy_dtype
from ..format.errors import CheckpointError, IncompatibleComponent, UnsupportedValue
from ..format.limits import TREE_MAX_DEPTH
from ..rules import required
from ..rules.tree import TREE
from ..tree.decode import empty_array
from ..tree.nodes import PRNGKeyValue
from .torch_dense import dense_host_tensor, outside_dispatch_modes

#: torch dtype -> spec dtype name (spec Table 10-1). Types missing from this torch build are skipped.
TORCH_DTYPE_NAMES: dict[torch.dtype, str] = {
    getattr(torch, name): name
    for name in (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
        "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
    )
    if isinstance(getattr(torch, name, None), torch.dtype)
}
TORCH_DTYPES: dict[str, torch.dtype] = {name: dtype for dtype, name in TORCH_DTYPE_NAMES.items()}

#: dtypes torch cannot hand to NumPy directly: reinterpret through a same-width integer type.
_BIT_CARRIERS: dict[str, tuple[torch.dtype, type]] = {
    name: (torch.int16, np.int16) if TORCH_DTYPES[name].itemsize == 2 else (torch.uint8, np.uint8)
    for name in TORCH_DTYPES
    if name == "bfloat16" or name.startswith("float8")
}


def dtype_name_of(dtype: torch.dtype) -> str:
    """The spec name of a torch dtype; :class:`UnsupportedValue` for dtypes outside the table."""
    name = TORCH_DTYPE_NAMES.get(dtype)
    if name is None:
        raise required(TREE.check("R-DT-1", None, None, dtype, framework="torch", reported_as=UnsupportedValue))
    return name


def tensor_to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A NumPy array with the tensor's exact bits; shares memory with CPU tensors (no copy).

    >>> t = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    >>> a = tensor_to_numpy(t)
    >>> a.dtype.name, a.ctypes.data == t.data_ptr()
    ('bfloat16', True)
    """
    with outside_dispatch_modes():  # a save under FakeTensorMode still reads the real tensor's bytes
        return _host_array(tensor)


#: The tensor types :func:`plain_tensors_to_numpy` converts (the allowlist then checks each one).
_PLAIN_TENSOR_TYPES: Final = frozenset({torch.Tensor, torch.nn.Parameter})


def plain_tensors_to_numpy(values: Mapping[Any, Any]) -> dict[Any, Any] | None:
    """``values`` as a dict with every plain tensor (exactly ``torch.Tensor`` or ``nn.Parameter``) replaced
    by :func:`tensor_to_numpy`'s array, in one pass, also inside nested exact ``dict`` and ``list`` values
    (an optimizer's per-parameter state); every other value (a DTensor, a subclass, extra state, a tuple,
    an ``OrderedDict`` with what it holds) as it is.

    A state dict is converted here before it reaches the tree encoder, which would otherwise try each
    tensor as every kind of value it knows, then find this adapter through the framework table, per
    tensor: about 4 ms of CPU for a module of 256 tensors, time ``save_async`` blocks the training loop.
    Every tensor passes the same allowlist (:func:`~.torch_dense.dense_host_tensor`), and the arrays
    share the tensors' memory (the encoder still finds tied weights by address). Only exact ``dict``
    and ``list`` containers are rebuilt: they carry no attributes and come back as they were, so what
    the encoder checks of the others is unchanged. None when a tensor is refused: the encoder then
    converts them one by one and raises naming the refused entry's path.

    >>> arrays = plain_tensors_to_numpy({"w": torch.ones(2), "state": {0: {"m": torch.zeros(1)}}, "step": 3})
    >>> type(arrays["w"]).__name__, type(arrays["state"][0]["m"]).__name__, arrays["step"]
    ('ndarray', 'ndarray', 3)
    >>> plain_tensors_to_numpy({"w": torch.empty(2, device="meta")}) is None
    True
    """
    with outside_dispatch_modes():  # entered once for the whole mapping
        try:
            return {key: _host_array(value) if type(value) in _PLAIN_TENSOR_TYPES else _in_plain(value, 1)
                    for key, value in values.items()}
        except CheckpointError:
            return None


def _in_plain(value: Any, depth: int) -> Any:
    """``value`` with the plain tensors inside exact dicts and lists converted (below the tree's depth limit,
    where the encoder refuses the value anyway, e.g. a dict that holds itself, nothing is converted)."""
    kind = type(value)
    if kind in _PLAIN_TENSOR_TYPES:
        return _host_array(value)
    if depth >= TREE_MAX_DEPTH:
        return value
    if kind is dict:
        return {key: _in_plain(item, depth + 1) for key, item in value.items()}
    if kind is list:
        return [_in_plain(item, depth + 1) for item in value]
    return value


def _host_array(tensor: torch.Tensor) -> np.ndarray:
    """:func:`tensor_to_numpy` inside an :func:`outside_dispatch_modes` block its caller entered."""
    tensor = dense_host_tensor(tensor)  # the allowlist: raises unless its bytes are proven to be its values
    name = dtype_name_of(tensor.dtype)
    if tensor.numel() == 0:  # no byte to share; NumPy may refuse .numpy() of e.g. shape [2**61, 3, 0]
        return empty_array(tuple(tensor.shape), numpy_dtype(name).newbyteorder("="))
    carrier = _BIT_CARRIERS.get(name)
    if carrier is None:
        return tensor.numpy()
    return tensor.view(carrier[0]).numpy().view(numpy_dtype(name).newbyteorder("="))


# -- reading -------------------------------------------------------------------------------

#: ``map_location`` forms accepted, as with :func:`torch.load`.
MapLocation = str | torch.device | Mapping[str, Any] | Callable[[torch.Tensor, str], Any] | None

#: Stored bytes live on the host: the "source location" seen by a dict or callable map_location.
SOURCE_LOCATION = "cpu"


def target_device(map_location: MapLocation) -> torch.device | None:
    """The device a str/device/dict ``map_location`` sends stored (host) tensors to; None keeps them on CPU.

    A dict maps source location strings to targets; stored bytes come from the
    host, so the ``"cpu"`` entry applies (as for CPU tensors in ``torch.load``).

    >>> target_device({"cuda:0": "cuda:1", "cpu": "meta"})
    device(type='meta')
    >>> target_device(None) is None
    True
    """
    if map_location is None or (callable(map_location) and not isinstance(map_location, Mapping)):
        return None
    if isinstance(map_location, Mapping):
        target = map_location.get(SOURCE_LOCATION)
        return None if target is None else torch.device(target)
    return torch.device(map_location)


def numpy_to_tensor(data: np.ndarray, *, share: bool = True) -> torch.Tensor:
    """A CPU tensor with the array's exact bits; shares memory when ``share`` and the array is writable."""
    if not (share and data.flags.writeable and data.flags.c_contiguous):
        data = np.array(data, order="C")  # torch tensors are writable: never hand out a read-only map
    return _wrap(data)


def _wrap(data: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy`` for every table dtype (bfloat16/float8 through a same-width integer view)."""
    dtype = _torch_dtype_for(data)
    if data.size == 0:  # no byte to share; NumPy may refuse views of e.g. shape [2**61, 3, 0]
        return torch.empty(data.shape, dtype=dtype)
    if not data.flags.c_contiguous:
        data = np.ascontiguousarray(data)
    carrier = _BIT_CARRIERS.get(TORCH_DTYPE_NAMES[dtype])
    if carrier is None:
        return torch.from_numpy(data)
    return torch.from_numpy(data.view(carrier[1])).view(dtype)


def _torch_dtype_for(data: np.ndarray) -> torch.dtype:
    name = dtype_name(data.dtype)
    return _torch_dtype(name)


def _torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a dtype name; R-DT-1 the other way round: this torch build may lack one."""
    dtype = TORCH_DTYPES.get(name)
    if dtype is None:
        raise required(TREE.check("R-DT-1", None, None, name, framework=f"torch build ({torch.__version__})",
                                  to_name=False, reported_as=IncompatibleComponent))
    return dtype


def place(tensor: torch.Tensor, map_location: MapLocation) -> torch.Tensor:
    """Move a freshly read CPU tensor where ``map_location`` says."""
    if map_location is None:
        return tensor
    if callable(map_location) and not isinstance(map_location, Mapping):
        moved = map_location(tensor, SOURCE_LOCATION)
        if moved is None:  # torch.load convention: None means "leave it where it is"
            return tensor
        if not isinstance(moved, torch.Tensor):
            raise TypeError(f"map_location callable returned {type(moved).__name__}, expected a tensor")
        return moved
    device = target_device(map_location)
    return tensor if device is None or device.type == "cpu" else tensor.to(device)


class TorchFramework:
    """Stored arrays as torch tensors (exact dtype and bits); keys as :class:`PRNGKeyValue`."""

    name = "torch"

    def array(self, data: np.ndarray, *, map_location: MapLocation = None) -> torch.Tensor:
        return place(numpy_to_tensor(data), map_location)

    def prng_key(self, impl: str, data: np.ndarray, *, map_location: MapLocation = None) -> Any:
        # torch has no typed keys: keep the implementation name next to the key bits.
        return PRNGKeyValue(impl, data)

    def dtype(self, name: str) -> torch.dtype:
        return _torch_dtype(name)


FRAMEWORK = TorchFramework()


class _TransientViews(TorchFramework):
    """Read-only map views as tensors that are only copied from (load_state_dict), never written.

    Skips the copy out of the map: ``load_state_dict`` copies each verified
    view straight into the existing parameter.
    """

    def array(self, data: np.ndarray, *, map_location: MapLocation = None) -> torch.Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "non-writable array": it is only read from
            return _wrap(data)


_VIEWS = _TransientViews()

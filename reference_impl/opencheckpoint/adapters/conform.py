"""The live target decides: a stored tree (NumPy leaves) shaped like the live value it is loaded into.

A tree component is decoded with NumPy leaves; when it is loaded into a live
value, each stored array becomes the kind of array the live value holds at
the same place (a torch tensor, on the live tensor's device, where the live
value has a tensor; a JAX array where it has one; NumPy elsewhere), and
containers take the live container's type where the stored node is the same
kind of container (an ``OrderedDict`` stays one, a named tuple comes back as
the live named tuple type, a tuple as a ``torch.Size`` and a str as a
``torch.device`` where the live value is one). Stored values with no live counterpart become the
framework of the live container's first framework leaf. Nothing read from a
file decides a type: only the live object does.

With ``in_place=True``, a stored array that fits its live counterpart exactly
(same shape, dtype and device) is not returned as a new object: the live
object stays in the tree, and :meth:`Conformed.copy_into_live` copies the
stored bytes into it (phase 2 of a restore).

>>> import numpy as np
>>> from collections import OrderedDict
>>> live = OrderedDict(w=np.zeros(2), meta=(1, 2))
>>> out = conform({"w": np.ones(2), "meta": (3, 4)}, live, in_place=True)
>>> type(out.value).__name__, out.value["w"] is live["w"], live["w"].tolist()
('OrderedDict', True, [0.0, 0.0])
>>> out.copy_into_live(); live["w"].tolist()
[1.0, 1.0]
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..format.dtypes import dtype_name
from ..tree.nodes import NamedTupleValue, PRNGKeyValue
from ..tree.per_rank import PerRank

_ABSENT: Any = object()


def leaf_framework(live: Any) -> str | None:
    """'numpy', 'torch' or 'jax' for a live array-like leaf; None for anything else."""
    if isinstance(live, (np.ndarray, np.generic)):
        return "numpy"
    from .protocol import module_framework

    framework = module_framework(type(live))
    if framework == "numpy":
        return None
    if framework == "torch":
        import torch

        return "torch" if isinstance(live, (torch.Tensor, torch.dtype)) else None
    import jax

    return "jax" if isinstance(live, jax.Array) else None


@dataclass
class Conformed:
    """The conformed tree and the (live, stored) pairs to copy in phase 2."""

    value: Any
    copies: list[tuple[Any, Any]] = field(default_factory=list)

    def copy_into_live(self) -> None:
        """Copy each stored array into the live array it fits (phase 2)."""
        for live, stored in self.copies:
            if isinstance(live, np.ndarray):
                np.copyto(live, stored)
            else:  # a torch tensor (the only other kind paired, see _fits)
                import torch

                from .torch_tensors import numpy_to_tensor

                with torch.no_grad():
                    live.copy_(numpy_to_tensor(stored))
        self.copies.clear()


def conform(stored: Any, live: Any, *, map_location: Any = None, in_place: bool = False,
            default: str | None = None) -> Conformed:
    """``stored`` (a tree read with NumPy leaves) with each leaf and container shaped like ``live``.

    ``default`` ('torch' or 'jax') is the framework of stored arrays with no live
    counterpart where the live value holds no framework leaf at all (an empty buffer).
    """
    from .protocol import container_framework

    found = leaf_framework(live) or container_framework(live)
    default = default if found == "numpy" and default is not None else found
    out = Conformed(None)
    converted: dict[int, Any] = {}  # id(stored array) -> framework array: shared extents stay shared
    out.value = _conform(stored, live, default, map_location, in_place, out, converted)
    return out


def _conform(stored: Any, live: Any, default: str, map_location: Any, in_place: bool, out: Conformed,
             converted: dict[int, Any]) -> Any:
    if isinstance(live, PerRank):  # this rank's value (resolved by the reader) comes back wrapped as it was
        inner = live.value if live.resize != "all" else _ABSENT
        return PerRank(_conform(stored, inner, default, map_location, in_place, out, converted), live.resize)
    if isinstance(stored, (np.ndarray, np.dtype)):
        return _leaf(stored, live, default, map_location, in_place, out, converted)
    if isinstance(stored, PRNGKeyValue):
        return stored
    if isinstance(stored, dict):
        live_map = live if isinstance(live, Mapping) else None
        items = {key: _conform(item, live_map.get(key, _ABSENT) if live_map is not None else _ABSENT, default,
                               map_location, in_place, out, converted)
                 for key, item in stored.items()}
        return OrderedDict(items) if type(live) is OrderedDict else items
    if isinstance(stored, NamedTupleValue):
        fields = getattr(type(live), "_fields", None) if isinstance(live, tuple) else None
        if isinstance(fields, tuple) and fields == stored._fields:
            return type(live)(*(_conform(item, live_item, default, map_location, in_place, out, converted)
                                for item, live_item in zip(stored, live, strict=True)))
        return NamedTupleValue(stored.type_name, {
            name: _conform(item, _ABSENT, default, map_location, in_place, out, converted)
            for name, item in stored._asdict().items()})
    if isinstance(stored, (list, tuple)):
        same = isinstance(live, (list, tuple)) and len(live) == len(stored)
        elements = [_conform(item, live[i] if same else _ABSENT, default, map_location, in_place, out, converted)
                    for i, item in enumerate(stored)]
        if isinstance(stored, list):
            return elements
        return _torch_value(live, tuple(elements)) if live is not _ABSENT else tuple(elements)
    if type(stored) is str and live is not _ABSENT:
        return _torch_value(live, stored)
    return stored


def _torch_value(live: Any, stored: Any) -> Any:
    """A ``torch.Size`` (stored as a tuple) or ``torch.device`` (stored as a str) where the live value is one."""
    kind = type(live)
    if kind.__module__ != "torch" or kind.__name__ not in ("Size", "device"):
        return stored
    try:
        return kind(stored)
    except (TypeError, RuntimeError, ValueError):
        return stored


def _leaf(stored: Any, live: Any, default: str, map_location: Any, in_place: bool, out: Conformed,
          converted: dict[int, Any]) -> Any:
    framework = leaf_framework(live) if live is not _ABSENT else None
    framework = framework or default
    if isinstance(stored, np.dtype):
        if framework == "numpy":
            return stored
        from .frameworks import get_framework

        return get_framework(framework).dtype(dtype_name(stored))
    if in_place and _fits(live, stored, framework):
        out.copies.append((live, stored))
        return live
    if framework == "numpy":
        return stored
    value = converted.get(id(stored))
    if value is None:
        from .frameworks import get_framework

        where = map_location
        if where is None and framework == "torch" and leaf_framework(live) == "torch":
            # Only a live tensor has a device to follow (a None or float placeholder has none).
            device = getattr(live, "device", None)
            where = device if device is not None and device.type != "cpu" else None
        value = converted[id(stored)] = get_framework(framework).array(stored, map_location=where)
    if framework == "torch" and leaf_framework(live) == "torch":
        value = _autograd_like(value, live)
    return value


def _autograd_like(value: Any, live: Any) -> Any:
    """A new tensor replacing a live ``nn.Parameter`` is one, and keeps the live ``requires_grad``.

    The format stores values, not autograd state: only the live leaf can say a tensor
    is a parameter or requires grad (integer tensors cannot, and are left as they are).
    """
    import torch

    if not isinstance(live, torch.Tensor) or (not live.requires_grad and type(live) is not torch.nn.Parameter):
        return value
    grad = live.requires_grad and (value.is_floating_point() or value.is_complex())
    if type(live) is torch.nn.Parameter:
        return torch.nn.Parameter(value, requires_grad=grad)
    return value.detach().requires_grad_(grad)


def _fits(live: Any, stored: np.ndarray, framework: str) -> bool:
    """Whether ``stored`` can be copied into ``live`` as it is (exact shape and dtype, writable)."""
    if framework == "numpy":
        # A strided view or an np.memmap is written into like any array (np.copyto takes any layout);
        # other subclasses (masked arrays, matrices) are replaced: their extra state is not stored.
        return (type(live) in (np.ndarray, np.memmap) and live is not stored and live.shape == stored.shape
                and live.dtype == stored.dtype and live.flags.writeable and stored.size > 0)
    if framework != "torch" or live is _ABSENT:
        return False
    import torch

    from .torch_tensors import TORCH_DTYPE_NAMES

    # copy_ refuses a tensor whose elements share memory (an expanded view, stride 0): checked here, in
    # phase 1, so phase 2 cannot fail after another component was written. Such a tensor is replaced.
    return (type(live) in (torch.Tensor, torch.nn.Parameter) and tuple(live.shape) == stored.shape
            and TORCH_DTYPE_NAMES.get(live.dtype) == dtype_name(stored.dtype)
            and not live.is_inference() and stored.size > 0
            and torch._debug_has_internal_overlap(live) != 1)  # 1: MemOverlap::Yes (copy_ raises)

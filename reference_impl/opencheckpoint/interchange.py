"""Moving weights between PyTorch state dicts and Flax NNX state, bit for bit.

PyTorch and Flax name and lay out the same layers differently:

========================  ==============================  ==============================
layer (``kind``)          PyTorch (``state_dict``)        Flax NNX (``nnx.to_pure_dict``)
========================  ==============================  ==============================
``"linear"``              ``weight`` [out, in], ``bias``  ``kernel`` [in, out], ``bias``
``"conv"``                ``weight`` [out, in, *k]        ``kernel`` [*k, in, out]
``"layernorm"``           ``weight``, ``bias``            ``scale``, ``bias``
``"embedding"``           ``weight`` [n, d]               ``embedding`` [n, d]
========================  ==============================  ==============================

Module paths differ too (``nn.Sequential`` numbers its children, an NNX
module names its attributes), so the caller passes an explicit mapping from
PyTorch module prefixes to NNX attribute paths. Values are only ever
transposed, never cast: every element keeps its exact bits. The helpers
accept NumPy arrays, torch tensors or JAX arrays (whatever
:func:`~opencheckpoint.read_component` returned for ``framework=``) and
import no framework themselves.

Examples:
    >>> import numpy as np
    >>> torch_state = {"0.weight": np.arange(6, dtype=np.float32).reshape(3, 2), "0.bias": np.zeros(3, np.float32)}
    >>> params = torch_state_to_nnx(torch_state, {"0": "encoder"})
    >>> params["encoder"]["kernel"].shape
    (2, 3)
    >>> back = nnx_to_torch_state(params, {"0": "encoder"})
    >>> bool((back["0.weight"] == torch_state["0.weight"]).all()), list(back)
    (True, ['0.weight', '0.bias'])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .errors import IncompatibleComponent

LayerKind = Literal["linear", "conv", "layernorm", "embedding"]

#: torch parameter name -> NNX parameter name, per layer kind.
_NAMES: dict[str, dict[str, str]] = {
    "linear": {"weight": "kernel", "bias": "bias"},
    "conv": {"weight": "kernel", "bias": "bias"},
    "layernorm": {"weight": "scale", "bias": "bias"},
    "embedding": {"weight": "embedding"},
}


@dataclass(frozen=True)
class Layer:
    """Where one PyTorch module's parameters go in the NNX state, and how they are laid out.

    ``nnx_path`` is dotted (``"actor.layers.0"``); all-digit parts are list
    indices (int keys in NNX state dicts).
    """

    nnx_path: str
    kind: LayerKind = "linear"

    def __post_init__(self) -> None:
        if self.kind not in _NAMES:
            raise ValueError(f"layer kind must be one of {sorted(_NAMES)}, got {self.kind!r}")


LayerMapping = Mapping[str, "str | Layer"]


def _layer(spec: str | Layer) -> Layer:
    return spec if isinstance(spec, Layer) else Layer(spec)


def _nnx_keys(path: str) -> tuple[str | int, ...]:
    return tuple(int(part) if part.isdigit() else part for part in path.split(".") if part)


def _permute(array: Any, axes: tuple[int, ...]) -> Any:
    """Transpose a NumPy array, torch tensor or JAX array; the result owns C-ordered data."""
    if axes == tuple(range(len(axes))):
        return array
    if hasattr(array, "permute"):  # torch
        return array.permute(*axes).contiguous()
    if isinstance(array, np.ndarray):
        return np.ascontiguousarray(array.transpose(axes))
    return array.transpose(axes)  # JAX


def _to_nnx_axes(kind: str, name: str, ndim: int) -> tuple[int, ...]:
    if name == "weight" and kind == "linear":
        if ndim != 2:
            raise IncompatibleComponent(f"a linear weight must be 2-D, got {ndim}-D")
        return (1, 0)
    if name == "weight" and kind == "conv":
        if ndim < 3:
            raise IncompatibleComponent(f"a conv weight must be at least 3-D, got {ndim}-D")
        return (*range(2, ndim), 1, 0)  # [out, in, *k] -> [*k, in, out]
    return tuple(range(ndim))


def _to_torch_axes(kind: str, name: str, ndim: int) -> tuple[int, ...]:
    if name == "weight" and kind == "linear":
        return (1, 0)
    if name == "weight" and kind == "conv":
        return (ndim - 1, ndim - 2, *range(ndim - 2))  # [*k, in, out] -> [out, in, *k]
    return tuple(range(ndim))


def torch_state_to_nnx(state_dict: Mapping[str, Any], mapping: LayerMapping, *, strict: bool = True) -> dict[Any, Any]:
    """A nested NNX state dict (for ``nnx.replace_by_pure_dict``) from a flat PyTorch state dict.

    ``mapping`` maps PyTorch module prefixes (``"actor.0"``) to NNX paths
    (``"actor.hidden"``) or :class:`Layer` values. With ``strict`` every
    state-dict entry must be mapped; otherwise unmapped entries are skipped.
    """
    out: dict[Any, Any] = {}
    unmapped: list[str] = []
    for key, value in state_dict.items():
        prefix, _, name = key.rpartition(".")
        spec = mapping.get(prefix)
        if spec is None:
            unmapped.append(key)
            continue
        layer = _layer(spec)
        nnx_name = _NAMES[layer.kind].get(name)
        if nnx_name is None:
            raise IncompatibleComponent(f"{key}: a {layer.kind} layer has no parameter {name!r}", field=key)
        try:
            axes = _to_nnx_axes(layer.kind, name, len(value.shape))
        except IncompatibleComponent as exc:
            raise exc.at(field=key) from None
        node = out
        for part in _nnx_keys(layer.nnx_path):
            node = node.setdefault(part, {})
        node[nnx_name] = _permute(value, axes)
    if strict and unmapped:
        raise IncompatibleComponent(f"state dict entries without a mapping: {', '.join(unmapped)}")
    return out


def nnx_to_torch_state(params: Mapping[Any, Any], mapping: LayerMapping) -> dict[str, Any]:
    """A flat PyTorch state dict (for ``load_state_dict``) from a nested NNX state dict.

    Only the layers named in ``mapping`` are taken (an NNX state also holds
    RNG keys and counters that have no PyTorch counterpart); each must be
    present with every parameter of its kind (``bias`` may be absent).
    """
    out: dict[str, Any] = {}
    for prefix, spec in mapping.items():
        layer = _layer(spec)
        node: Any = params
        for part in _nnx_keys(layer.nnx_path):
            if not isinstance(node, Mapping) or part not in node:
                raise IncompatibleComponent(f"NNX state has no {layer.nnx_path!r} (for torch {prefix!r})",
                                            field=layer.nnx_path)
            node = node[part]
        for torch_name, nnx_name in _NAMES[layer.kind].items():
            if nnx_name not in node:
                if torch_name == "bias":
                    continue
                raise IncompatibleComponent(f"NNX layer {layer.nnx_path!r} has no {nnx_name!r}",
                                            field=f"{layer.nnx_path}.{nnx_name}")
            value = node[nnx_name]
            out[f"{prefix}.{torch_name}" if prefix else torch_name] = _permute(
                value, _to_torch_axes(layer.kind, torch_name, len(value.shape)))
    return out


__all__ = ["Layer", "LayerKind", "LayerMapping", "nnx_to_torch_state", "torch_state_to_nnx"]

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

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..format.errors import CheckpointError, IncompatibleComponent
from ..read.restore_layout import Permuted
from ..read.restore_plan import RestorePlan, flatten, unflatten

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


def _checked(value: Any, key: str) -> Any:
    """``value``, once a torch tensor passed the save's allowlist
    (:func:`~opencheckpoint.adapters.torch_dense.check_dense`): a DTensor, a fake, meta or sparse tensor,
    or a parameter whose ``.data`` was replaced, is refused rather than copied from memory that does not
    hold its values."""
    torch = sys.modules.get("torch")  # a torch tensor exists only once torch is imported
    if torch is not None and isinstance(value, torch.Tensor):
        from ..adapters.torch_dense import check_dense

        try:
            check_dense(value)
        except CheckpointError as exc:
            raise exc.at(field=key) from None
    return value


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


def torch_to_nnx_rename(mapping: LayerMapping, *, transpose: bool = False) -> Callable[[str], str | None]:
    """A ``rename=`` callable: PyTorch state-dict key -> dotted NNX key path (``"0.weight"`` -> ``"encoder.kernel"``).

    Keys of modules the mapping does not name map to ``None`` (dropped). With
    ``transpose`` each key whose layout differs carries the axis permutation
    (:class:`~opencheckpoint.read.restore_layout.Permuted`): ``Checkpoint.load`` and
    ``read_component`` then transpose the values, a sharded restore inside its
    region reads (each rank or device reads only the shards its block needs).

    >>> rename = torch_to_nnx_rename({"0": "encoder"}, transpose=True)
    >>> rename("0.weight"), rename("0.weight").axes, rename("1.weight")
    ('encoder.kernel', (1, 0), None)
    """
    layers = {prefix: _layer(spec) for prefix, spec in mapping.items()}

    def rename(key: str) -> str | None:
        prefix, _, name = key.rpartition(".")
        layer = layers.get(prefix)
        if layer is None:
            return None
        nnx_name = _NAMES[layer.kind].get(name)
        if nnx_name is None:
            raise IncompatibleComponent(f"{key}: a {layer.kind} layer has no parameter {name!r}", field=key)
        target = f"{layer.nnx_path}.{nnx_name}" if layer.nnx_path else nnx_name
        if transpose and name == "weight" and layer.kind in ("linear", "conv"):
            return Permuted(target, _TO_NNX[layer.kind])
        return target

    return rename


def nnx_to_torch_rename(mapping: LayerMapping, *, transpose: bool = False) -> Callable[[str], str | None]:
    """A ``rename=`` callable: dotted NNX key path -> PyTorch state-dict key (the inverse of
    :func:`torch_to_nnx_rename`); paths outside the mapped layers (RNG keys, counters) map to ``None``.
    ``transpose``: as for :func:`torch_to_nnx_rename`, the other way.

    >>> nnx_to_torch_rename({"0": "encoder"})("encoder.kernel")
    '0.weight'
    """
    inverse: dict[str, str] = {}
    for prefix, spec in mapping.items():
        layer = _layer(spec)
        for torch_name, nnx_name in _NAMES[layer.kind].items():
            nnx_key = f"{layer.nnx_path}.{nnx_name}" if layer.nnx_path else nnx_name
            target = f"{prefix}.{torch_name}" if prefix else torch_name
            if transpose and torch_name == "weight" and layer.kind in ("linear", "conv"):
                target = Permuted(target, _TO_TORCH[layer.kind])
            inverse[nnx_key] = target
    return inverse.get


#: The axis permutations of weights whose layout differs (a conv weight's is fixed by its number of axes:
#: marked here for 2-D kernels; :func:`_conv_axes` gives the rest).
_TO_NNX = {"linear": (1, 0), "conv": (2, 3, 1, 0)}
_TO_TORCH = {"linear": (1, 0), "conv": (3, 2, 0, 1)}


def _layout(key: str, mapping: LayerMapping) -> tuple[str, str]:
    """(layer kind, torch parameter name) of a PyTorch state-dict key named by ``mapping``."""
    prefix, _, name = key.rpartition(".")
    return _layer(mapping[prefix]).kind, name


def torch_state_to_nnx(state_dict: Mapping[str, Any], mapping: LayerMapping, *, strict: bool = True) -> dict[Any, Any]:
    """A nested NNX state dict (for ``nnx.replace_by_pure_dict``) from a flat PyTorch state dict.

    ``mapping`` maps PyTorch module prefixes (``"actor.0"``) to NNX paths
    (``"actor.hidden"``) or :class:`Layer` values. With ``strict`` every
    state-dict entry must be mapped; otherwise unmapped entries are skipped.
    Names and layouts are mapped by ``torch_to_nnx_rename(mapping, transpose=True)``
    through the restore plan of ``Checkpoint.load(rename=...)``.
    """
    for key, value in state_dict.items():
        prefix, _, name = key.rpartition(".")
        if prefix in mapping:
            _checked(value, key)  # the save's tensor allowlist, before any byte is copied
            _check_ndim(_layer(mapping[prefix]).kind, name, len(value.shape), key)
    plan = RestorePlan(rename=_with_conv_axes(torch_to_nnx_rename(mapping, transpose=True), state_dict, True))
    renamed = plan.apply_flat(state_dict, "state dict")
    if strict and plan.unused:
        raise IncompatibleComponent(f"state dict entries without a mapping: {', '.join(plan.unused)}")
    return unflatten(renamed)


def nnx_to_torch_state(params: Mapping[Any, Any], mapping: LayerMapping) -> dict[str, Any]:
    """A flat PyTorch state dict (for ``load_state_dict``) from a nested NNX state dict.

    Only the layers named in ``mapping`` are taken (an NNX state also holds
    RNG keys and counters that have no PyTorch counterpart); each must be
    present with every parameter of its kind (``bias`` may be absent).
    Names and layouts are mapped by ``nnx_to_torch_rename(mapping, transpose=True)``.
    """
    flat = flatten(params)
    for prefix, spec in mapping.items():
        layer = _layer(spec)
        node: Any = params
        for part in _nnx_keys(layer.nnx_path):
            if not isinstance(node, Mapping) or part not in node:
                raise IncompatibleComponent(f"NNX state has no {layer.nnx_path!r} (for torch {prefix!r})",
                                            field=layer.nnx_path)
            node = node[part]
        for torch_name, nnx_name in _NAMES[layer.kind].items():
            if torch_name != "bias" and (not isinstance(node, Mapping) or nnx_name not in node):
                raise IncompatibleComponent(f"NNX layer {layer.nnx_path!r} has no {nnx_name!r}",
                                            field=f"{layer.nnx_path}.{nnx_name}")
    rename = _with_conv_axes(nnx_to_torch_rename(mapping, transpose=True), flat, False)
    return RestorePlan(rename=rename).apply_flat(flat, "NNX state")


def _check_ndim(kind: str, name: str, ndim: int, key: str) -> None:
    try:
        _to_nnx_axes(kind, name, ndim)
    except IncompatibleComponent as exc:
        raise exc.at(field=key) from None


def _with_conv_axes(rename: Callable[[str], str | None], state: Mapping[str, Any],
                    to_nnx: bool) -> Callable[[str], str | None]:
    """``rename`` with each conv weight's permutation fitted to its number of axes (1-D, 2-D, 3-D kernels)."""

    def renamed(key: str) -> str | None:
        target = rename(key)
        axes = getattr(target, "axes", None)
        value = state.get(key)
        if target is None or axes is None or value is None or len(value.shape) == len(axes):
            return target
        ndim = len(value.shape)
        return Permuted(str(target), (*range(2, ndim), 1, 0) if to_nnx else (ndim - 1, ndim - 2, *range(ndim - 2)))

    return renamed


__all__ = [
    "Layer",
    "LayerKind",
    "LayerMapping",
    "nnx_to_torch_rename",
    "nnx_to_torch_state",
    "torch_state_to_nnx",
    "torch_to_nnx_rename",
]

"""Whether a stored optimizer state fits a live optimizer, checked before anything is restored.

``Optimizer.load_state_dict`` accepts states it cannot use: another number of
parameter groups or parameters fails inside it, but a state saved from another
optimizer class (Adam into SGD) or for parameters of other shapes loads, and the
next ``step()`` raises or broadcasts silently. The torch adapter's prepare phase
calls :func:`check_optimizer_state` so such a state is refused with
:class:`IncompatibleComponent` while the model and the optimizer are untouched;
integrations that restore in stages (``transformers.Trainer``) call
:func:`check_group_keys` before the weights.

>>> import torch
>>> sgd = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1, momentum=0.9)
>>> adam_group = {"lr": 0.1, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0, "amsgrad": False, "params": [0]}
>>> try:
...     check_group_keys(adam_group, sgd.param_groups[0], "")
... except IncompatibleComponent as exc:
...     print("refused:", "momentum" in str(exc))
refused: True
"""

from __future__ import annotations

from typing import Any

import torch

from ..format.errors import IncompatibleComponent

__all__ = ["TORCH_DEFAULTED_GROUP_KEYS", "check_group_keys", "check_optimizer_state"]


def check_optimizer_state(optimizer: torch.optim.Optimizer, state: Any) -> None:
    """What ``Optimizer.load_state_dict`` checks, checked before anything is applied (same messages)."""
    prefix = f"{type(optimizer).__name__}.load_state_dict failed (checked before restoring anything): "
    groups = state.get("param_groups") if isinstance(state, dict) else None
    if not isinstance(groups, list) or not isinstance(state.get("state"), dict):
        raise IncompatibleComponent(prefix + "stored value is not an optimizer state dict ('state' and 'param_groups')")
    own = optimizer.param_groups
    if len(groups) != len(own):
        raise IncompatibleComponent(prefix + "loaded state dict has a different number of parameter groups "
                                    f"({len(groups)} stored, {len(own)} in the optimizer)")
    for index, (stored, live) in enumerate(zip(groups, own, strict=True)):
        params = stored.get("params") if isinstance(stored, dict) else None
        if not isinstance(params, list) or len(params) != len(live["params"]):
            raise IncompatibleComponent(prefix + f"parameter group {index}: the stored group does not match the "
                                        "size of the optimizer's group")
        check_group_keys(stored, live, prefix + f"parameter group {index}: ")
        for stored_id, param in zip(params, live["params"], strict=True):
            _check_param_state(optimizer, state["state"].get(stored_id), param, prefix + f"group {index}: ")


#: Parameter-group keys a stored group may lack: torch's optimizers fill them with defaults on
#: ``load_state_dict`` (``__setstate__``'s ``setdefault``) because newer torch versions added them, and
#: LR schedulers add ``initial_lr`` to the live groups. docs/guarantees-in-detail.md lists them.
TORCH_DEFAULTED_GROUP_KEYS = frozenset({"foreach", "fused", "differentiable", "capturable", "maximize",
                                        "decoupled_weight_decay", "initial_lr"})


def check_group_keys(stored: dict[str, Any], live: dict[str, Any], prefix: str) -> None:
    """A stored group carries every hyper-parameter key the live group has (torch's defaulted keys aside).

    ``Optimizer.load_state_dict`` replaces the live groups with the stored ones whatever their keys: a
    state saved from another optimizer class (Adam into SGD) loads, and the next ``step()`` raises
    ``KeyError('momentum')``. A missing key is that mismatch, refused before anything is restored.
    """
    missing = sorted(set(live) - set(stored) - TORCH_DEFAULTED_GROUP_KEYS)
    if missing:
        raise IncompatibleComponent(prefix + f"the stored group lacks the hyper-parameter key(s) {missing} the "
                                    "optimizer needs (a state saved from another optimizer class?)")


#: Optimizer state entries shaped like their parameter in torch's built-in optimizers (Adam, AdamW, SGD,
#: RMSprop, Adagrad, Adadelta, NAdam, RAdam, Adamax): checked even before the live optimizer has state.
_PARAM_SHAPED = frozenset({"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "square_avg", "acc_delta",
                           "sum", "exp_inf", "grad_avg"})


def _check_param_state(optimizer: torch.optim.Optimizer, stored: Any, param: torch.Tensor, prefix: str) -> None:
    """A parameter's stored state tensors have the shapes its live state (or the parameter) gives them.

    ``Optimizer.load_state_dict`` accepts any shapes and the next ``step()`` fails (or
    broadcasts silently): a state saved for other parameters is refused before anything
    is restored. Where the live optimizer has state for the parameter, each entry's shape
    is compared with it; otherwise the entries known to be shaped like the parameter are.
    """
    if not isinstance(stored, dict):
        return
    live_state = optimizer.state.get(param, {})
    for key, value in stored.items():
        if not isinstance(value, torch.Tensor):
            continue
        theirs = live_state.get(key)
        expected = theirs.shape if isinstance(theirs, torch.Tensor) else param.shape if key in _PARAM_SHAPED else None
        if expected is not None and value.shape != expected:
            raise IncompatibleComponent(prefix + f"state {key!r} has shape {list(value.shape)}, the parameter "
                                        f"{list(param.shape)} needs {list(expected)} (a state saved for other "
                                        "parameters)")

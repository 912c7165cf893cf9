"""An optimizer's stored param groups must carry the live optimizer's hyper-parameter keys (verify-first).

``Optimizer.load_state_dict`` accepts a state saved from another optimizer class (Adam into SGD) and the next
``step()`` raises ``KeyError('momentum')``; the load refuses it before anything changes. Keys newer torch
versions added (which torch fills with defaults on load) may be absent.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from opencheckpoint import Checkpoint, IncompatibleComponent  # noqa: E402
from opencheckpoint.adapters.torch_optimizer_fit import TORCH_DEFAULTED_GROUP_KEYS  # noqa: E402


def _trained(optimizer_cls, **kwargs):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = optimizer_cls(model.parameters(), **kwargs)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_adam_state_into_sgd_is_refused_before_anything_changes(tmp_path):
    model, adam = _trained(torch.optim.Adam, lr=0.1)
    Checkpoint(model=model, optimizer=adam).save(tmp_path / "c")
    live_model, sgd = _trained(torch.optim.SGD, lr=0.5, momentum=0.9)
    torch.nn.init.zeros_(live_model.weight)
    before = {k: v.clone() for k, v in live_model.state_dict().items()}
    sgd_before = sgd.state_dict()
    with pytest.raises(IncompatibleComponent, match=r"optimizer.*'momentum'"):
        Checkpoint(model=live_model, optimizer=sgd).load(tmp_path / "c")
    assert all(torch.equal(before[k], v) for k, v in live_model.state_dict().items())
    assert sgd.param_groups[0]["momentum"] == 0.9 and sgd.param_groups[0]["lr"] == 0.5
    assert set(sgd.state_dict()["state"][0]) == set(sgd_before["state"][0]) == {"momentum_buffer"}


def test_adam_state_of_an_older_torch_without_newer_group_keys_loads(tmp_path):
    _, adam = _trained(torch.optim.Adam, lr=0.1)
    full = adam.state_dict()
    newer = {"foreach", "fused", "decoupled_weight_decay", "differentiable", "capturable"}
    assert newer <= TORCH_DEFAULTED_GROUP_KEYS
    adam.state_dict = lambda: {"state": full["state"],  # as an older torch wrote it
                               "param_groups": [{k: v for k, v in g.items() if k not in newer}
                                                for g in full["param_groups"]]}
    Checkpoint(optimizer=adam).save(tmp_path / "c")
    _, live = _trained(torch.optim.Adam, lr=0.5)
    Checkpoint(optimizer=live).load(tmp_path / "c")
    assert live.param_groups[0]["lr"] == 0.1
    live.step()  # torch filled the absent keys with its defaults
    assert live.param_groups[0]["foreach"] is None

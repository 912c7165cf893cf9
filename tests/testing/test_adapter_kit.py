"""The adapter test kit run on the built-in adapters: each class inherits every AdapterTests test.

NumPy trees and arrays (TreeAdapter), a JSON config (JsonAdapter), a
dump/load object (DumpLoadAdapter), a NumPy Generator, a torch module and
optimizer, a Flax NNX module. Framework classes skip when the framework is
not installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opencheckpoint.adapters.base import DumpLoadAdapter, JsonAdapter, StateDictAdapter, TreeAdapter
from opencheckpoint.testing.adapter_tests import AdapterTests
from opencheckpoint.testing.compare import assert_tree_equal


class TestNumpyTree(AdapterTests):
    """A dict of arrays and scalars, the TreeAdapter restoring into it."""

    adapter = TreeAdapter()

    def make_value(self, seed: int) -> Any:
        rng = np.random.default_rng(seed)
        return {
            "w": rng.standard_normal((3, 4)).astype(np.float32),
            "b": np.arange(seed, seed + 3, dtype=np.int64),
            "step": seed,
            "extra": [np.float16(seed / 3), (1, "two"), None],
        }

    def make_empty(self) -> Any:
        return {}

    def assert_restored(self, original: Any, restored: Any) -> None:
        assert_tree_equal(original, restored)

    def make_value_with(self, leaf: Any) -> Any:
        return {"step": 1, "leaf": leaf}



class TestNumpyArray(AdapterTests):
    """A bare array: restored in place, and a target of another shape is a mismatch."""

    def make_value(self, seed: int) -> Any:
        return np.random.default_rng(seed).integers(0, 100, size=(4, 5)).astype(np.uint16)

    def make_empty(self) -> Any:
        return np.zeros((4, 5), dtype=np.uint16)

    def make_mismatched(self) -> Any:
        return np.zeros((2, 2), dtype=np.uint16)

    def assert_restored(self, original: Any, restored: Any) -> None:
        assert_tree_equal(original, restored)



class TestJsonConfig(AdapterTests):
    """A JSON config, resolved automatically to the JsonAdapter."""

    def make_value(self, seed: int) -> Any:
        return {"lr": 0.001 * (seed + 1), "layers": [64, 64 + seed], "name": f"run-{seed}",
                "flags": {"amp": bool(seed % 2), "clip": None}, "unicode": "é☃"}

    def make_empty(self) -> Any:
        return {}

    def assert_restored(self, original: Any, restored: Any) -> None:
        assert_tree_equal(original, restored)

    def test_automatic_choice_is_the_json_adapter(self) -> None:
        from opencheckpoint.adapters.base import resolve_adapter

        assert isinstance(resolve_adapter(self.make_value(0)), JsonAdapter)


class Vocabulary:
    """A user object with dump/load: a token list written as a text file and a count file."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens

    def dump(self, directory: Path) -> None:
        (Path(directory) / "tokens.txt").write_text("\n".join(self.tokens), encoding="utf-8")
        (Path(directory) / "count").write_text(str(len(self.tokens)), encoding="ascii")

    def load(self, directory: Path) -> None:
        text = (Path(directory) / "tokens.txt").read_text(encoding="utf-8")
        self.tokens = text.split("\n") if text else []
        assert len(self.tokens) == int((Path(directory) / "count").read_text(encoding="ascii"))


class TestDumpLoadObject(AdapterTests):
    adapter = DumpLoadAdapter()
    declared_files = ("tokens.txt", "count")

    def make_value(self, seed: int) -> Any:
        return Vocabulary([f"tok{i}" for i in range(seed, seed + 5)] + ["ünï"])

    def make_empty(self) -> Any:
        return Vocabulary([])

    def assert_restored(self, original: Any, restored: Any) -> None:
        assert restored.tokens == original.tokens


class TestNumpyGenerator(AdapterTests):
    """``np.random.Generator``: its bit generator state, restored in place (automatic adapter)."""

    def make_value(self, seed: int) -> Any:
        generator = np.random.default_rng(seed)
        generator.random(seed + 3)  # move the stream away from its seed state
        return generator

    def make_empty(self) -> Any:
        return np.random.default_rng(12345)

    def make_mismatched(self) -> Any:
        return np.random.Generator(np.random.Philox(0))

    def assert_restored(self, original: Any, restored: Any) -> None:
        assert restored.bit_generator.state == original.bit_generator.state


class StatefulCounter:
    """A user class with state_dict/load_state_dict that refuses foreign keys (like torch does)."""

    def __init__(self, counts: dict[str, np.ndarray]) -> None:
        self.counts = counts

    def state_dict(self) -> dict[str, Any]:
        return dict(self.counts)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state) != set(self.counts):
            raise KeyError(f"expected keys {sorted(self.counts)}, got {sorted(state)}")
        self.counts = {k: np.array(v) for k, v in state.items()}


class TestStateDictObject(AdapterTests):
    adapter = StateDictAdapter()

    def make_value(self, seed: int) -> Any:
        return StatefulCounter({"seen": np.arange(4) + seed, "total": np.array(seed * 10)})

    def make_empty(self) -> Any:
        return StatefulCounter({"seen": np.zeros(4, dtype=np.int64), "total": np.array(0)})

    def make_mismatched(self) -> Any:
        return StatefulCounter({"other": np.zeros(1)})

    def assert_restored(self, original: Any, restored: Any) -> None:
        assert_tree_equal(original.counts, restored.counts)

    def make_value_with(self, leaf: Any) -> Any:
        return StatefulCounter({"leaf": leaf, "total": np.array(3)})


# -- torch ---------------------------------------------------------------------------------------------
class _TorchBase(AdapterTests):
    @pytest.fixture(autouse=True)
    def _torch(self) -> None:
        pytest.importorskip("torch")


def _torch_model(seed: int, width: int = 4) -> Any:
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, width), torch.nn.BatchNorm1d(width), torch.nn.Linear(width, 2))


def _assert_state_dicts_equal(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert list(a) == list(b)
    for key in a:
        x, y = a[key], b[key]
        if hasattr(x, "detach"):
            assert x.dtype == y.dtype and x.shape == y.shape, key
            assert x.detach().cpu().numpy().tobytes() == y.detach().cpu().numpy().tobytes(), key
        elif isinstance(x, dict):
            _assert_state_dicts_equal(x, y)
        else:
            assert x == y, key


@pytest.mark.torch
class TestTorchModule(_TorchBase):
    def make_value(self, seed: int) -> Any:
        model = _torch_model(seed)
        model.train()
        model(__import__("torch").randn(5, 3))  # moves the BatchNorm running statistics
        return model

    def make_empty(self) -> Any:
        return _torch_model(999)

    def make_mismatched(self) -> Any:
        return _torch_model(0, width=6)

    def assert_restored(self, original: Any, restored: Any) -> None:
        _assert_state_dicts_equal(original.state_dict(), restored.state_dict())


@pytest.mark.torch
class TestTorchOptimizer(_TorchBase):
    """Adam after a few steps (int-keyed state, step tensors, param groups)."""

    def make_value(self, seed: int) -> Any:
        import torch

        model = _torch_model(seed)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3 * (seed + 1))
        for _ in range(seed + 1):
            optimizer.zero_grad()
            model(torch.randn(4, 3)).sum().backward()
            optimizer.step()
        return optimizer

    def make_empty(self) -> Any:
        import torch

        return torch.optim.Adam(_torch_model(999).parameters(), lr=1.0)

    def make_mismatched(self) -> Any:
        import torch

        return torch.optim.Adam(torch.nn.Linear(3, 2).parameters())

    def assert_restored(self, original: Any, restored: Any) -> None:
        a, b = original.state_dict(), restored.state_dict()
        assert a["param_groups"] == b["param_groups"]
        assert list(a["state"]) == list(b["state"])
        for key in a["state"]:
            _assert_state_dicts_equal(a["state"][key], b["state"][key])


# -- jax -------------------------------------------------------------------------------------------------
@pytest.mark.jax
class TestNnxModule(AdapterTests):
    """A Flax NNX module with a typed RNG stream, updated in place."""

    @pytest.fixture(autouse=True)
    def _flax(self) -> None:
        pytest.importorskip("flax.nnx")

    def _module(self, seed: int, width: int = 4) -> Any:
        from flax import nnx

        class Small(nnx.Module):
            def __init__(self, rngs: nnx.Rngs) -> None:
                self.dense = nnx.Linear(3, width, rngs=rngs)
                self.dropout = nnx.Dropout(0.1, rngs=rngs)

        return Small(nnx.Rngs(seed, dropout=seed + 1))

    def make_value(self, seed: int) -> Any:
        return self._module(seed)

    def make_empty(self) -> Any:
        return self._module(999)

    def make_mismatched(self) -> Any:
        return self._module(0, width=6)

    def assert_restored(self, original: Any, restored: Any) -> None:
        import jax
        from flax import nnx

        def host(leaf: Any) -> Any:
            if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
                return ("key", str(jax.random.key_impl(leaf)), np.asarray(jax.random.key_data(leaf)))
            return np.asarray(leaf)

        a = jax.tree_util.tree_map(host, nnx.to_pure_dict(nnx.state(original)))
        b = jax.tree_util.tree_map(host, nnx.to_pure_dict(nnx.state(restored)))
        assert_tree_equal(_plain(a), _plain(b))


def _plain(value: Any) -> Any:
    """NNX pure dicts as plain dicts, so assert_tree_equal compares them by value."""
    if isinstance(value, dict) or hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


# -- the tensor-kinds matrix can fail ----------------------------------------------------------------------
class _SubstitutingAdapter(TreeAdapter):
    """Stores a substitute (one zero) whatever the array is: a writer that never refuses and loses values."""

    def save(self, value: Any, writer: Any) -> None:
        writer.write_tree({"leaf": np.zeros(1, np.float32)})


class _Substituting(AdapterTests):
    adapter = _SubstitutingAdapter()

    def make_value_with(self, leaf: Any) -> Any:
        return {"leaf": leaf}


def test_the_tensor_kinds_matrix_fails_an_adapter_that_stores_other_values(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="numpy-float64: ") as caught:
        _Substituting().test_tensor_kinds_are_stored_exactly_or_refused(tmp_path)
    assert "numpy-object: " in str(caught.value)  # stored a substitute instead of refusing

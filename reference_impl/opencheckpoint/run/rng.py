"""Process-global random number generator state as a checkpoint component.

:class:`GlobalRNGState` captures Python's ``random``, NumPy's legacy global
``np.random`` state, the torch CPU generator and every CUDA generator (when
CUDA is initialized), and JAX's default PRNG configuration. Framework parts
are captured only when the framework is already imported: capturing never
imports torch or JAX. The component is restored after every other component
(its adapter has ``restore_last=True``), so random numbers drawn while other
components are restored do not disturb the resumed streams.

The stored value is plain arrays and scalars (no torch or JAX types), so any
reader can inspect it.

>>> import random, os, tempfile
>>> import numpy as np
>>> from opencheckpoint import Checkpoint
>>> random.seed(1); np.random.seed(1)
>>> ckpt = Checkpoint(rng=GlobalRNGState())
>>> path = ckpt.save(os.path.join(tempfile.mkdtemp(), "ckpt"))
>>> expected = (random.random(), float(np.random.rand()))
>>> _ = ckpt.load(path)
>>> (random.random(), float(np.random.rand())) == expected
True
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..adapters.base import ComponentReader, PreparedRestore, StateDictAdapter, register_adapter
from ..format.errors import IncompatibleComponent


class GlobalRNGState:
    """Checkpointable global RNG state (``state_dict`` / ``load_state_dict``).

    Keys of the state dict: ``python``, ``numpy`` always; ``torch_cpu`` and
    ``torch_cuda`` when torch is imported (CUDA only once initialized);
    ``jax_config`` when JAX is imported.
    """

    def state_dict(self) -> dict[str, Any]:
        version, internal, gauss_next = random.getstate()
        name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
        state: dict[str, Any] = {
            "python": {"version": version, "state": np.asarray(internal, dtype=np.uint32),
                       "gauss_next": gauss_next},
            "numpy": {"bit_generator": name, "key": np.asarray(keys, dtype=np.uint32), "pos": int(pos),
                      "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        }
        torch = sys.modules.get("torch")
        if torch is not None:
            state["torch_cpu"] = torch.random.get_rng_state().numpy().copy()
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                state["torch_cuda"] = [s.numpy().copy() for s in torch.cuda.get_rng_state_all()]
        jax = sys.modules.get("jax")
        if jax is not None:
            state["jax_config"] = {
                "jax_default_prng_impl": str(jax.config.jax_default_prng_impl),
                "jax_enable_x64": bool(jax.config.jax_enable_x64),
            }
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        python = state["python"]
        random.setstate((int(python["version"]), tuple(int(x) for x in np.asarray(python["state"])),
                         python["gauss_next"]))
        legacy = state["numpy"]
        np.random.set_state((str(legacy["bit_generator"]), np.asarray(legacy["key"], dtype=np.uint32),
                             int(legacy["pos"]), int(legacy["has_gauss"]), float(legacy["cached_gaussian"])))
        if "torch_cpu" in state or "torch_cuda" in state:
            import torch  # the checkpoint holds torch streams: restoring them needs torch

            if "torch_cpu" in state:
                torch.random.set_rng_state(_byte_tensor(torch, state["torch_cpu"]))
            if "torch_cuda" in state:
                if not torch.cuda.is_available():
                    raise IncompatibleComponent("the checkpoint holds CUDA RNG state but CUDA is unavailable")
                torch.cuda.set_rng_state_all([_byte_tensor(torch, s) for s in state["torch_cuda"]])
        if "jax_config" in state:
            _restore_jax_config(state["jax_config"])


def _byte_tensor(torch: Any, data: Any) -> Any:
    if isinstance(data, torch.Tensor):
        return data.to("cpu", torch.uint8)
    return torch.from_numpy(np.array(data, dtype=np.uint8))


def _restore_jax_config(config: Mapping[str, Any]) -> None:
    """Apply JAX's PRNG config now if JAX is imported, else through the environment it reads on import."""
    impl = str(config["jax_default_prng_impl"])
    x64 = bool(config["jax_enable_x64"])
    jax = sys.modules.get("jax")
    if jax is None:
        # Never import JAX just for this: JAX reads these variables when it is imported later.
        os.environ["JAX_DEFAULT_PRNG_IMPL"] = impl
        os.environ["JAX_ENABLE_X64"] = "1" if x64 else "0"
        return
    jax.config.update("jax_default_prng_impl", impl)
    jax.config.update("jax_enable_x64", x64)


class GlobalRNGStateAdapter(StateDictAdapter):
    """State-dict adapter that restores after every other component."""

    restore_last = True

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        state = reader.tree("numpy")
        if not isinstance(state, dict) or "python" not in state or "numpy" not in state:
            raise IncompatibleComponent("not a global RNG state: 'python' and 'numpy' streams are required")
        if "torch_cuda" in state:
            torch = sys.modules.get("torch")
            if torch is None or not torch.cuda.is_available():
                raise IncompatibleComponent("the checkpoint holds CUDA RNG state but CUDA is unavailable")

        def apply() -> None:
            try:
                value.load_state_dict(state)
            except (KeyError, ValueError, TypeError, IndexError) as exc:
                raise IncompatibleComponent(f"not a global RNG state: {exc!r}") from exc

        return PreparedRestore(apply, checked=False)


register_adapter(GlobalRNGState, GlobalRNGStateAdapter())

__all__ = ["GlobalRNGState", "GlobalRNGStateAdapter"]

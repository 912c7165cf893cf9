"""Benchmark state: N float32 arrays totalling a given size, and the live objects that hold them.

The NumPy arrays are the single copy of the bytes; torch tensors made from
them share that memory (``torch.from_numpy``), so a 1 GiB run holds 1 GiB
of source state, not 2.

>>> arrays = make_arrays(4096, 4)
>>> [a.nbytes for a in arrays.values()], float(arrays["t0001"][0])
([1024, 1024, 1024, 1024], 1.5)
"""

from __future__ import annotations

from typing import Any

import numpy as np


def make_arrays(total_bytes: int, count: int) -> dict[str, np.ndarray]:
    """``count`` float32 arrays of equal size (together about ``total_bytes``), every page touched."""
    per = max(1, total_bytes // count // 4)
    # A non-zero fill touches every page (no zero-page sharing) and is cheap for 1 GiB.
    return {f"t{i:04d}": np.full(per, 0.5 + i, dtype=np.float32) for i in range(count)}


def make_tiny_arrays(count: int = 20_000, nbytes: int = 1024) -> dict[str, np.ndarray]:
    """``count`` float32 arrays of ``nbytes`` each (the many-small-arrays case)."""
    per = nbytes // 4
    return {f"a{i:05d}": np.full(per, i, dtype=np.float32) for i in range(count)}


def touched_like(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Destination arrays of the same shapes whose pages are already faulted in."""
    out = {}
    for key, array in arrays.items():
        target = np.empty_like(array)
        target.fill(0)
        out[key] = target
    return out


class ArrayModule:
    """A NumPy 'model': ``state_dict()`` / ``load_state_dict()`` copy into existing arrays in place.

    >>> m = ArrayModule({"w": np.zeros(2, np.float32)})
    >>> m.load_state_dict({"w": np.ones(2, np.float32)}); m.arrays["w"].tolist()
    [1.0, 1.0]
    """

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays

    def state_dict(self) -> dict[str, np.ndarray]:
        return dict(self.arrays)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.keys() != self.arrays.keys():
            raise KeyError("state keys differ from the module's arrays")
        for key, value in state.items():
            np.copyto(self.arrays[key], np.asarray(value))


def torch_module(arrays: dict[str, np.ndarray], *, share: bool) -> Any:
    """An ``nn.Module`` with one frozen parameter per array (named like the array).

    ``share=True`` wraps the NumPy memory (a save source); ``share=False``
    allocates fresh, touched parameters (a restore target).
    """
    import torch

    module = torch.nn.Module()
    for key, array in arrays.items():
        tensor = torch.from_numpy(array) if share else torch.zeros(array.shape, dtype=torch.float32)
        module.register_parameter(key, torch.nn.Parameter(tensor, requires_grad=False))
    return module


def torch_tensors(arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """Tensors sharing the arrays' memory."""
    import torch

    return {key: torch.from_numpy(array) for key, array in arrays.items()}

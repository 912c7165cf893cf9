"""``make demo``: interrupt a torch training run, resume it bit for bit, open it from Flax, validate it.

1. Train a tiny actor-critic on CartPole (A2C) in a subprocess that saves
   every 50 updates and sends itself SIGTERM midway; it stops cleanly with a
   checkpoint (:class:`~opencheckpoint.run.StopOnSignal`).
2. Resume that run in a new process and train to the end.
3. Train the same run uninterrupted in a third process.
4. Check the two final checkpoints hold bit-for-bit equal parameters,
   optimizer state, environment and RNG state.
5. Load the policy into the equivalent Flax NNX module (``framework="jax"``
   and :mod:`opencheckpoint.tools.interchange`) and compare outputs with torch.
6. Run ``opencheckpoint validate`` and ``opencheckpoint inspect`` on it.

Exits non-zero if any check fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from .. import read_component
from ..run.checkpointer import resolve_checkpoint_path

UPDATES = 300
INTERVAL = 50
SIGTERM_AT = 137
COMPARED = ("policy", "optimizer", "env", "rng", "progress")


def _step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def _train(run_dir: Path, *extra: str) -> int:
    command = [sys.executable, "-m", "opencheckpoint.examples.train", str(run_dir), "--updates", str(UPDATES),
               "--interval", str(INTERVAL), "--log-every", "100", *extra]
    return subprocess.run(command, check=False).returncode


def bit_differences(a: Any, b: Any, path: str = "$") -> list[str]:
    """Paths where two decoded trees differ (arrays by shape, dtype and raw bytes; NaNs compare by bits).

    >>> bit_differences({"w": np.array([np.nan])}, {"w": np.array([np.nan])})
    []
    >>> bit_differences({"w": np.zeros(2)}, {"w": -np.zeros(2), "x": 1})
    ['$: keys differ', '$.w: bits differ']
    """
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        same = (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape
                and a.dtype == b.dtype and a.tobytes() == b.tobytes())
        return [] if same else [f"{path}: bits differ"]
    if isinstance(a, dict) and isinstance(b, dict):
        out = [] if list(a) == list(b) else [f"{path}: keys differ"]
        return out + [d for k in a if k in b for d in bit_differences(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            return [f"{path}: sequences differ"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in bit_differences(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        return [] if np.float64(a).tobytes() == np.float64(b).tobytes() else [f"{path}: {a!r} != {b!r}"]
    return [] if type(a) is type(b) and a == b else [f"{path}: {a!r} != {b!r}"]


def compare_runs(resumed: Path, reference: Path) -> list[str]:
    problems = []
    for name in COMPARED:
        diffs = bit_differences(read_component(resumed, name), read_component(reference, name))
        print(f"   {name:10s} {'bit-for-bit equal' if not diffs else 'DIFFERENT: ' + '; '.join(diffs[:5])}")
        problems += [f"{name}{d[1:]}" for d in diffs]
    return problems


def compare_with_flax(path: Path) -> float:
    """Largest |torch - flax| over policy logits and values on 256 random observations."""
    import torch
    from flax import nnx

    from .actor_critic import ActorCritic
    from .nnx_actor_critic import TORCH_TO_NNX, NNXActorCritic, load_torch_policy

    torch_model = ActorCritic()
    torch_model.load_state_dict(read_component(path, "policy", framework="torch"))
    jax_state = read_component(path, "policy", framework="jax")
    print(f"   read {len(jax_state)} policy arrays as {type(next(iter(jax_state.values()))).__name__} "
          f"(framework='jax')")
    flax_model = NNXActorCritic(rngs=nnx.Rngs(0))
    load_torch_policy(flax_model, jax_state)
    for torch_prefix, nnx_path in TORCH_TO_NNX.items():
        layer: Any = flax_model  # walks down to an nnx.Linear by attribute names
        for part in nnx_path.split("."):
            layer = getattr(layer, part)
        kernel = np.asarray(layer.kernel[...])
        if kernel.tobytes() != np.ascontiguousarray(np.asarray(jax_state[f"{torch_prefix}.weight"]).T).tobytes():
            print(f"   {nnx_path}.kernel is not the bit-exact transpose of {torch_prefix}.weight")
            return float("inf")
    print("   NNX kernels are the bit-exact transposes of the torch weights")
    obs = np.random.default_rng(1).standard_normal((256, 4)).astype(np.float32)
    with torch.no_grad():
        t_logits, t_value = torch_model(torch.from_numpy(obs))
    f_logits, f_value = flax_model(obs)
    return max(float(np.max(np.abs(t_logits.numpy() - np.asarray(f_logits)))),
               float(np.max(np.abs(t_value.numpy() - np.asarray(f_value)))))


def _cli(*args: str) -> int:
    return subprocess.run([sys.executable, "-m", "opencheckpoint", *args], check=False).returncode


def main() -> int:
    started = time.perf_counter()
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="opencheckpoint-demo-") as tmp:
        interrupted, reference = Path(tmp) / "run-interrupted", Path(tmp) / "run-reference"

        _step(f"1. train {UPDATES} A2C updates, checkpoint every {INTERVAL}; SIGTERM after update {SIGTERM_AT}")
        if _train(interrupted, "--sigterm-at", str(SIGTERM_AT)) != 0:
            failures.append("interrupted run did not exit cleanly")
        stopped = resolve_checkpoint_path(interrupted)
        print(f"   run directory now holds: {sorted(p.name for p in interrupted.iterdir())}")
        if not stopped.name.endswith(f"{SIGTERM_AT:012d}"):
            failures.append(f"expected a checkpoint at update {SIGTERM_AT}, latest is {stopped.name}")

        _step("2. resume in a new process and train to the end")
        if _train(interrupted) != 0:
            failures.append("resumed run failed")

        _step("3. the same run, uninterrupted, in another process")
        if _train(reference) != 0:
            failures.append("reference run failed")

        resumed_final, reference_final = resolve_checkpoint_path(interrupted), resolve_checkpoint_path(reference)
        assert isinstance(resumed_final, Path) and isinstance(reference_final, Path)  # local run directories
        _step(f"4. compare {resumed_final.name} of both runs")
        failures += compare_runs(resumed_final, reference_final)

        _step("5. load the policy into the equivalent Flax NNX module and compare outputs")
        error = compare_with_flax(resumed_final)
        print(f"   max |torch - flax| over logits and values: {error:.3g} (float32 tolerance 1e-5)")
        if not error <= 1e-5:
            failures.append(f"flax outputs differ from torch by {error}")

        _step(f"6. opencheckpoint validate {resumed_final.name}")
        if _cli("validate", str(resumed_final)) != 0:
            failures.append("validate failed")
        _step(f"   opencheckpoint inspect {resumed_final.name}")
        if _cli("inspect", str(resumed_final)) != 0:
            failures.append("inspect failed")

    elapsed = time.perf_counter() - started
    if failures:
        print(f"\nDEMO FAILED ({elapsed:.1f} s):", *failures, sep="\n  ")
        return 1
    print(f"\nall checks passed in {elapsed:.1f} s: the interrupted-and-resumed run is bit-for-bit the "
          "uninterrupted one, Flax reproduces the torch policy, the checkpoint validates.")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())

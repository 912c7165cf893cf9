"""A JAX training loop stopped by a real SIGTERM, resumed in a new process, equals an uninterrupted run."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from opencheckpoint.run.rotation_state import STATE_NAME

pytest.importorskip("jax")
pytest.importorskip("flax.nnx")
pytest.importorskip("optax")

pytestmark = pytest.mark.jax

TOTAL_STEPS = 8
SIGNAL_AFTER = 3

WORKER = textwrap.dedent(f"""
    import hashlib, sys, time
    import jax, jax.numpy as jnp, numpy as np, optax
    from flax import nnx
    from opencheckpoint import Checkpoint
    from opencheckpoint.run import RunCheckpointer, StopOnSignal

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.hidden = nnx.Linear(3, 8, rngs=rngs)
            self.out = nnx.Linear(8, 1, rngs=rngs)
            self.dropout = nnx.Dropout(0.2, rngs=rngs)

        def __call__(self, x):
            return self.out(self.dropout(jax.nn.relu(self.hidden(x))))

    @nnx.jit
    def train_step(model, optimizer, key):
        x_key, noise_key = jax.random.split(key)
        x = jax.random.normal(x_key, (16, 3))
        y = jnp.sin(x).sum(-1, keepdims=True) + 0.1 * jax.random.normal(noise_key, (16, 1))
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        optimizer.update(model, grads)
        return loss

    def run_once(run_dir, mode, out):
        model = MLP(nnx.Rngs(0, dropout=1))
        optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
        data = {{"key": jax.random.key(42, impl="rbg")}}
        run = RunCheckpointer(Checkpoint(model=model, optimizer=optimizer, data=data), run_dir, interval=1000)
        start = (run.restore() or 0) if mode != "plain" else 0
        with StopOnSignal() as stop:
            for step in range(start, {TOTAL_STEPS}):
                data["key"], key = jax.random.split(data["key"])
                train_step(model, optimizer, key)
                print(f"step {{step + 1}}", flush=True)
                if mode == "interrupt" and step + 1 == {SIGNAL_AFTER}:
                    deadline = time.monotonic() + 120
                    while not stop.requested and time.monotonic() < deadline:
                        time.sleep(0.01)  # handshake: the parent sends SIGTERM after reading this step
                if stop.requested:
                    run.save(step + 1, force=True)
                    print(f"stopped {{step + 1}}", flush=True)
                    sys.exit(3)
        leaves = jax.tree_util.tree_leaves(nnx.to_pure_dict(nnx.state((model, optimizer))))
        digest = hashlib.sha256()
        for leaf in leaves + [data["key"]]:
            if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
                leaf = jax.random.key_data(leaf)
            digest.update(str(leaf.dtype).encode() + np.asarray(leaf).tobytes())
        open(out, "w").write(digest.hexdigest())

    # RUN_DIR MODE OUT, or several of them with "+" between, run one after the other: the resumed run and the
    # uninterrupted reference share one process (each from fresh objects and the seeds), one JAX start fewer
    args = sys.argv[1:]
    while args:
        run_once(*args[:3])
        args = args[4:]
""")


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)


@pytest.mark.slow(seconds=25)  # two JAX processes, each compiling the step
def test_sigterm_stop_and_resume_is_bitwise_equal(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    run_dir = tmp_path / "run"

    child = subprocess.Popen([sys.executable, str(script), str(run_dir), "interrupt", str(tmp_path / "x.txt")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.strip() == f"step {SIGNAL_AFTER}":
                os.kill(child.pid, signal.SIGTERM)
                break
        rest, errors = child.communicate(timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 3, errors
    assert f"stopped {SIGNAL_AFTER}" in rest
    assert not (tmp_path / "x.txt").exists()  # the interrupted run did not finish
    assert sorted(p.name for p in run_dir.iterdir() if p.name != STATE_NAME) == [f"checkpoint-{SIGNAL_AFTER:012d}"]

    # the resumed run, then in the same process the uninterrupted reference run, from fresh objects
    resumed = _run(script, str(run_dir), "resume", str(tmp_path / "resumed.txt"),
                   "+", str(tmp_path / "unused"), "plain", str(tmp_path / "plain.txt"))
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.split()[:2] == ["step", str(SIGNAL_AFTER + 1)]  # it did resume, not restart
    assert (tmp_path / "resumed.txt").read_text() == (tmp_path / "plain.txt").read_text()
    assert len((tmp_path / "plain.txt").read_text()) == len(hashlib.sha256().hexdigest())

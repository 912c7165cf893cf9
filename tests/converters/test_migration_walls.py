"""What stopped a torchrl or nnx_ppo user from moving over: torchrl's optional components, converted replay
buffers (loaded without naming an adapter, their pickle left out), torchrl rotation directories, nnx_ppo's
``step_*`` layout (its ``metadata.pkl`` never unpickled) and NNX states that load into the module."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opencheckpoint import Checkpoint, manifest, read_component, validate
from opencheckpoint.run import RunCheckpointer


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opencheckpoint", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def test_logger_and_replay_buffer_are_optional_by_default(tmp_path: Path) -> None:
    policy, logger, buffer = {"w": np.ones(2)}, {"rows": [1]}, {"items": [1, 2]}
    writer = RunCheckpointer(Checkpoint(policy=policy, logger=logger, replay_buffer=buffer), tmp_path / "run",
                             interval=1, exclude=("logger", "replay_buffer"))
    writer.save(3)
    fresh = {"w": np.zeros(2)}
    resumed = RunCheckpointer(Checkpoint(policy=fresh, logger={"rows": []}, replay_buffer={"items": []}),
                              tmp_path / "run", interval=1)
    assert resumed.restore() == 3 and fresh["w"].tolist() == [1.0, 1.0]
    assert resumed.optional == {"logger", "replay_buffer"}
    assert RunCheckpointer(Checkpoint(policy=fresh), tmp_path / "run", interval=1).optional == frozenset()


def test_converted_torchrl_replay_buffer_loads_without_naming_an_adapter(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from tensordict import TensorDict
    from torchrl.checkpoint import Checkpoint as TorchRLCheckpoint
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    buffer = ReplayBuffer(storage=LazyTensorStorage(10))
    buffer.extend(TensorDict({"obs": torch.arange(6.0).reshape(3, 2)}, batch_size=[3]))
    source = TorchRLCheckpoint(replay_buffer=buffer).save(tmp_path / "trl")
    assert (Path(source) / "components" / "0000-replay_buffer" / "prefetch.pkl").is_file()
    result = cli("convert", source, tmp_path / "ckpt")
    assert result.returncode == 0, result.stderr
    assert "not converted: replay_buffer/prefetch.pkl: a Python pickle" in result.stderr
    out = tmp_path / "ckpt"
    assert validate(out).ok and not list(out.rglob("*.pkl"))
    assert "replay_buffer/prefetch.pkl" in manifest(out)["metadata"]["converted_from"]["not_converted"]
    restored = ReplayBuffer(storage=LazyTensorStorage(10))
    assert Checkpoint(replay_buffer=restored).load(out).loaded == {"replay_buffer"}
    assert len(restored) == 3 and torch.equal(restored[:3]["obs"], torch.arange(6.0).reshape(3, 2))


def test_torchrl_rotation_directory_converts_its_newest_or_chosen_step(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from torchrl.checkpoint import Checkpoint as TorchRLCheckpoint
    from torchrl.checkpoint import CheckpointRotation

    rotation = CheckpointRotation(tmp_path / "trl-run", keep_last=3)
    for step in (10, 20):  # what torchrl's RunCheckpointer writes: checkpoint-000000000010, ...
        rotation.save(TorchRLCheckpoint(progress={"w": step}), step=step, metadata={"step": step})
    assert sorted(p.name for p in (tmp_path / "trl-run").iterdir()) == ["checkpoint-000000000010",
                                                                        "checkpoint-000000000020"]
    assert cli("convert", tmp_path / "trl-run", tmp_path / "latest").returncode == 0
    assert read_component(tmp_path / "latest", "progress") == {"w": 20}
    assert manifest(tmp_path / "latest")["metadata"]["converted_from"]["step"] == 20
    assert cli("convert", tmp_path / "trl-run", tmp_path / "ten", "--step", "10").returncode == 0
    assert read_component(tmp_path / "ten", "progress") == {"w": 10}
    resumed = {"w": -1}
    assert RunCheckpointer(Checkpoint(progress=resumed), tmp_path / "oc-run", interval=10,
                           resume_path=tmp_path / "latest").restore() == 20
    assert resumed == {"w": 20}


class _Tripwire:
    """Unpickling this creates the file ``path``: a converter that unpickles leaves a trace."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


@pytest.mark.slow(seconds=10)  # NNX and torch in one subprocess
def test_nnx_ppo_step_layout_converts_and_loads_into_the_module(tmp_path: Path) -> None:
    ocp = pytest.importorskip("orbax.checkpoint")
    nnx = pytest.importorskip("flax.nnx")
    import jax

    optax = pytest.importorskip("optax")
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    optimizer.update(model, nnx.state(model, nnx.Param))  # a step: count 1, moments non-zero
    run_dir = tmp_path / "nnx-run"
    marker = tmp_path / "unpickled"
    for step in (100, 200):  # what make_checkpoint_fn writes: networks/, optimizer/ (orbax), metadata.pkl
        step_dir = run_dir / f"step_{step:010d}"
        step_dir.mkdir(parents=True)
        with ocp.StandardCheckpointer() as checkpointer:
            checkpointer.save((step_dir / "networks").absolute(), nnx.state(model))
            checkpointer.save((step_dir / "optimizer").absolute(), nnx.state(optimizer))
        (step_dir / "metadata.pkl").write_bytes(pickle.dumps({"step": step, "trap": _Tripwire(marker)}))
    result = cli("convert", run_dir, tmp_path / "ckpt")
    assert result.returncode == 0, result.stderr
    assert "not converted: metadata.pkl: a Python pickle" in result.stderr
    assert not marker.exists()  # never unpickled
    out = tmp_path / "ckpt"
    assert validate(out).ok
    converted_from = manifest(out)["metadata"]["converted_from"]
    assert converted_from["step"] == 200 and "metadata.pkl" in converted_from["not_converted"]
    assert read_component(out, "optimizer")["step"] == 1  # no "value" level
    fresh = nnx.Linear(3, 2, rngs=nnx.Rngs(1))
    fresh_optimizer = nnx.Optimizer(fresh, optax.adam(1e-3), wrt=nnx.Param)
    assert Checkpoint(networks=fresh, optimizer=fresh_optimizer).load(out).loaded == {"networks", "optimizer"}
    assert np.array_equal(np.asarray(fresh.kernel[...]), np.asarray(model.kernel[...]))
    assert jax.numpy.array_equal(fresh.bias[...], model.bias[...])
    assert int(fresh_optimizer.step[...]) == 1
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(
        lambda x, y: bool(jax.numpy.array_equal(x, y)), nnx.state(fresh_optimizer), nnx.state(optimizer)))
    assert os.listdir(run_dir) == sorted(os.listdir(run_dir))  # the source is left as it was

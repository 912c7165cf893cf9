"""torchrl's ``Trainer`` saving and resuming through OpenCheckpoint, end to end, with the real torchrl 0.14.

A tiny DQN run (tests/integrations/torchrl_run.py: a collector over a small ``EnvBase``, a replay buffer,
a DQN loss with target parameters, Adam, epsilon-greedy exploration) is SIGKILLed mid-run and resumed with
``trainer.load_from_file(run_dir)``; its final checkpoint equals an uninterrupted run's bit for bit, in
every component (parameters and target parameters, optimizer state, the buffer's contents and its
sampler/writer state, the collector's state and rollout carrier, the trainer's counters, the global RNGs).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl")

import torchrl_run  # noqa: E402  (tests/integrations, on pytest's pythonpath)
from run_scripts import finish, start  # noqa: E402
from torchrl.checkpoint import Checkpoint as TorchRLCheckpoint  # noqa: E402
from torchrl.checkpoint import CheckpointRotation  # noqa: E402

from opencheckpoint import manifest, read_component  # noqa: E402
from opencheckpoint.format.errors import IntegrityError, UnsupportedValue  # noqa: E402
from opencheckpoint.integrations.torchrl import RNG_COMPONENT, Trainer, TrainerCheckpoint  # noqa: E402
from opencheckpoint.run import Rotation  # noqa: E402
from opencheckpoint.tree.compare import assert_tree_equal  # noqa: E402

SCRIPT = Path(torchrl_run.__file__)
KILL_AT = 3 * torchrl_run.FRAMES_PER_BATCH  # the checkpoint of 2 batches is the latest when it dies
COMPONENTS = {"collector", "loss_module", "optimizer", "policy", "replay_buffer", "rng", "trainer_state"}


def _run(*args: Any) -> subprocess.Popen[bytes]:
    return start(SCRIPT, *args)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A killed run, then in one new process the killed run resumed and an uninterrupted run after it (its own
    trainer, every generator seeded again)."""
    root = tmp_path_factory.mktemp("torchrl")
    full, killed = root / "full", root / "killed"
    assert finish(_run("kill", killed, KILL_AT)) == -9
    latest_when_killed = Rotation(killed).latest()
    assert finish(_run("resume", killed, "+", "full", full)) == 0
    return {"full": full, "resumed": killed, "killed_at": latest_when_killed}


@pytest.mark.slow(seconds=25)  # the module's runs: torchrl processes killed and resumed
def test_a_killed_run_resumes_bit_exact(runs: dict[str, Path]) -> None:
    assert runs["killed_at"].name == f"checkpoint-{KILL_AT - torchrl_run.FRAMES_PER_BATCH:012d}"
    full, resumed = Rotation(runs["full"]).latest(), Rotation(runs["resumed"]).latest()
    assert full.name == resumed.name == f"checkpoint-{torchrl_run.TOTAL_FRAMES:012d}"
    assert set(manifest(full)["components"]) == COMPONENTS
    for name in sorted(COMPONENTS - {"replay_buffer"}):  # every array bit for bit, every scalar exactly
        assert_tree_equal(read_component(full, name), read_component(resumed, name), f"${name}")
    # The buffer's state likewise, but for two things torchrl's own LazyTensorStorage.load_state_dict does to
    # the storage it rebuilds, whatever the checkpoint format: the order of its keys (the policy's outputs
    # come in another order) and the device the tensordict notes in the mapping attributes (None in a buffer
    # filled by extend, "cpu" once rebuilt). Every entry of the state is compared, in key order.
    stored_full, stored_resumed = read_component(full, "replay_buffer"), read_component(resumed, "replay_buffer")
    assert_tree_equal(_key_sorted(stored_full["state"]), _key_sorted(stored_resumed["state"]), "$replay_buffer")


def _key_sorted(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {key: _key_sorted(tree[key]) for key in sorted(tree, key=str)}
    return tree


def test_the_stored_state_is_what_a_resume_needs(runs: dict[str, Path]) -> None:
    latest = Rotation(runs["full"]).latest()
    loss = read_component(latest, "loss_module", framework="torch")
    assert any(key.startswith("target_value_network_params.") for key in loss)
    buffer = read_component(latest, "replay_buffer")["state"]
    assert int(buffer["_writer"]["_write_count"]) == torchrl_run.TOTAL_FRAMES
    stored = buffer["_storage"]["_storage"]
    assert stored["observation"].shape == (torchrl_run.TOTAL_FRAMES, 3)
    collector = read_component(latest, "collector")["state"]
    assert int(collector["state_dict"]["frames"]) == torchrl_run.TOTAL_FRAMES
    assert "observation" in collector["carrier"]
    assert int(read_component(latest, "trainer_state")["collected_frames"]) == torchrl_run.TOTAL_FRAMES
    assert {"python", "numpy", "torch_cpu"} <= set(read_component(latest, RNG_COMPONENT))


def test_a_restore_is_verified_before_anything_changes(runs: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(runs["full"], copy)
    latest = Rotation(copy).latest()
    data = latest / "components" / "replay_buffer" / "data.bin"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0xFF
    data.write_bytes(bytes(raw))
    trainer = torchrl_run.build(str(tmp_path / "fresh"))
    before = {k: v.clone() for k, v in trainer.loss_module.state_dict().items()}
    with pytest.raises(IntegrityError):
        trainer.load_from_file(latest)  # the checkpoint itself: its run directory would fall back past it
    after = trainer.loss_module.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # the loss module (loaded first) is untouched
    assert set(after) == set(before)  # its value estimator (gamma) was built for the check only
    assert trainer.collected_frames == 0


def test_unpickling_arguments_are_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    trainer = torchrl_run.build(str(tmp_path / "fresh"))
    with pytest.raises(UnsupportedValue, match="weights_only"):
        trainer.load_from_file(runs["full"], weights_only=False)
    with pytest.raises(UnsupportedValue, match="pickle_module"):
        TrainerCheckpoint().load(Rotation(runs["full"]).latest(), tensor_load_kwargs={"pickle_module": None})
    marker = tmp_path / "ran"
    legacy = tmp_path / "trainer.pt"  # a legacy torchrl file whose unpickling would create ``marker``
    torch.save({"state": _Creates(str(marker))}, legacy)
    with pytest.raises(UnsupportedValue, match="weights_only"):
        trainer.load_from_file(legacy, weights_only=False)
    assert not marker.exists()


class _Creates:
    """Unpickled, it creates a file (the code a pickle runs)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


def test_a_run_directory_falls_back_past_a_corrupt_newest_checkpoint(runs: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(runs["full"], copy)
    newest, older = Rotation(copy).checkpoints()[-1:-3:-1]
    data = newest / "components" / "loss_module" / "data.bin"
    raw = bytearray(data.read_bytes())
    raw[0] ^= 0xFF
    data.write_bytes(bytes(raw))
    trainer = torchrl_run.build(str(tmp_path / "fresh"))
    trainer.load_from_file(copy)
    assert trainer.collected_frames == read_component(older, "trainer_state")["collected_frames"] > 0


def test_torchrl_checkpoint_objects_are_taken_over(tmp_path: Path) -> None:
    reference = torchrl_run.build(str(tmp_path / "a"))
    extra = {"config": {"lr": 0.01}}
    trainer = Trainer(collector=reference.collector, total_frames=8, frame_skip=1, optim_steps_per_batch=1,
                      loss_module=reference.loss_module, optimizer=reference.optimizer, progress_bar=False,
                      checkpoint=TorchRLCheckpoint(**extra),
                      checkpoint_rotation=CheckpointRotation(tmp_path / "b", keep_last=3, prefix="ckpt"))
    assert isinstance(trainer.checkpoint, TrainerCheckpoint)
    assert isinstance(trainer.checkpoint_rotation, Rotation)
    assert (trainer.checkpoint_rotation.keep_last, trainer.checkpoint_rotation.prefix) == (3, "ckpt")
    assert {"config", RNG_COMPONENT, "loss_module"} <= set(trainer.checkpoint.components)
    trainer._save_trainer()
    saved = trainer.checkpoint_rotation.latest()
    assert read_component(saved, "config") == extra["config"]
    assert np.array_equal(read_component(saved, RNG_COMPONENT)["torch_cpu"],
                          torch.random.get_rng_state().numpy())

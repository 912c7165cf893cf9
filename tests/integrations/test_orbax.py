"""An orbax ``CheckpointManager`` writing OpenCheckpoint items, end to end, with the real orbax-checkpoint.

A Flax NNX / optax run (tests/integrations/orbax_run.py: dropout, a typed JAX key choosing the batches, Adam)
saves through ``ocp.args.Composite(state=OpenCheckpointSave(...))``, is SIGKILLed mid-run, and resumes from
``manager.latest_step()`` into an abstract target; its final state equals an uninterrupted run's bit for bit.
The item is readable in torch with ``read_component``; a restore checks everything before it returns, and
leaves the target it is given as it was.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
ocp = pytest.importorskip("orbax.checkpoint")
nnx = pytest.importorskip("flax.nnx")

import orbax_run  # noqa: E402  (tests/integrations, on pytest's pythonpath)
from run_scripts import finish, start  # noqa: E402

from opencheckpoint import read_component, validate  # noqa: E402
from opencheckpoint.format.errors import CheckpointError, IntegrityError  # noqa: E402
from opencheckpoint.integrations.orbax import (  # noqa: E402
    COMPONENT,
    OpenCheckpointRestore,
    OpenCheckpointSave,
    item_path,
)
from opencheckpoint.tree.compare import assert_tree_equal  # noqa: E402

SCRIPT = Path(orbax_run.__file__)
KILL_AT = 5  # after the save of step 4: the latest step when it dies


def _run(*args: Any) -> subprocess.Popen[bytes]:
    return start(SCRIPT, *args)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A killed run, then in one new process the killed run resumed and an uninterrupted run (after it, from
    the same seeds: its own model, optimizer and manager; one interpreter importing JAX fewer)."""
    root = tmp_path_factory.mktemp("orbax")
    assert finish(_run("kill", root / "killed", root / "x", KILL_AT)) == -9
    steps_when_killed = sorted(int(p.name) for p in (root / "killed").iterdir() if p.name.isdigit())
    assert finish(_run("resume", root / "killed", root / "resumed.ocp", "+", "full", root / "full",
                       root / "full.ocp")) == 0
    return {"root": root, "steps_when_killed": steps_when_killed}


@pytest.mark.slow(seconds=30)  # the module's runs: JAX processes killed and resumed
def test_a_killed_manager_run_resumes_bit_exact(runs: dict[str, Any]) -> None:
    root = runs["root"]
    assert runs["steps_when_killed"] == [2, 4]  # orbax's max_to_keep=2; step 4 was finalized before the kill
    assert_tree_equal(read_component(root / "full.ocp", "final"), read_component(root / "resumed.ocp", "final"))
    manager = ocp.CheckpointManager(root / "killed", options=ocp.CheckpointManagerOptions(max_to_keep=2))
    assert (manager.all_steps(), manager.latest_step()) == ([6, 8], 8)  # orbax's step management, unchanged


def test_an_item_is_an_opencheckpoint_checkpoint_read_in_torch(runs: dict[str, Any]) -> None:
    import torch

    path = item_path(runs["root"] / "full", orbax_run.STEPS, "state")
    validate(path)
    in_torch = read_component(path, COMPONENT, framework="torch")
    final = read_component(runs["root"] / "full.ocp", "final")
    kernel = in_torch["model"]["hidden"]["kernel"]
    assert isinstance(kernel, torch.Tensor)
    assert np.array_equal(kernel.numpy(), final["model"]["hidden"]["kernel"])
    assert in_torch["data_key"].impl == "threefry2x32"  # a typed PRNG key stays a key (orbax refuses them)


def test_a_restore_is_verified_first_and_leaves_the_target(runs: dict[str, Any], tmp_path: Path) -> None:
    root = tmp_path / "run"
    shutil.copytree(runs["root"] / "full", root)
    model, optimizer = orbax_run.build()
    target = orbax_run.state_of(model, optimizer, jax.random.key(0))
    before = jax.tree_util.tree_leaves(target)
    manager = ocp.CheckpointManager(root)
    restored = manager.restore(orbax_run.STEPS, args=ocp.args.Composite(state=OpenCheckpointRestore(target))).state
    assert all(a is b for a, b in zip(jax.tree_util.tree_leaves(target), before, strict=True))  # untouched
    assert isinstance(restored["model"], nnx.State)
    final = read_component(runs["root"] / "full.ocp", "final")
    assert np.array_equal(np.asarray(restored["model"]["out"]["bias"][...]), final["model"]["out"]["bias"])
    data = item_path(root, orbax_run.STEPS, "state") / "components" / COMPONENT / "data.bin"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError):
        manager.restore(orbax_run.STEPS, args=ocp.args.Composite(state=OpenCheckpointRestore(target)))
    manager.close()


def test_what_cannot_be_stored_is_refused_naming_the_key(tmp_path: Path) -> None:
    manager = ocp.CheckpointManager(tmp_path / "run")
    with pytest.raises(CheckpointError, match="callback"):
        manager.save(1, args=ocp.args.Composite(state=OpenCheckpointSave({"callback": print})))
        manager.wait_until_finished()
    manager.close()
    assert manager.latest_step() is None


@pytest.mark.long
def test_a_run_killed_inside_a_save_resumes_from_the_step_before(runs: dict[str, Any], tmp_path: Path) -> None:
    """Old or new under a crash: killed after the item was written but before orbax finalized the step, the
    unfinished step is not a step; the run resumes from the one before and ends as an uninterrupted run."""
    root = tmp_path / "run"
    assert finish(_run("kill-in-save", root, tmp_path / "x", 6)) == -9
    manager = ocp.CheckpointManager(root, options=ocp.CheckpointManagerOptions(max_to_keep=2))
    assert manager.latest_step() == 4
    manager.close()
    assert finish(_run("resume", root, tmp_path / "resumed.ocp")) == 0
    final = read_component(runs["root"] / "full.ocp", "final")
    assert_tree_equal(final, read_component(tmp_path / "resumed.ocp", "final"))

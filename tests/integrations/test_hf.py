"""The Hugging Face integrations end to end: ``transformers.Trainer`` and an Accelerate loop, killed and resumed.

One child process (``hf_runs.py``) imports the libraries once, trains a tiny GPT-2 (dropout on) in two
forked children that SIGKILL themselves after a checkpoint, resumes both, and runs both uninterrupted;
the final weights and optimizer states must be equal bit for bit. The refusals run in this process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
torch = pytest.importorskip("torch")

from accelerate import Accelerator  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments  # noqa: E402

from opencheckpoint import IntegrityError, UnsupportedValue, is_checkpoint, read_component  # noqa: E402
from opencheckpoint.format.errors import CheckpointError  # noqa: E402
from opencheckpoint.integrations.hf_accelerate import load_state, save_state  # noqa: E402
from opencheckpoint.integrations.hf_trainer import OpenCheckpointTrainer, TrainerRotation  # noqa: E402
from opencheckpoint.tree.compare import assert_tree_equal  # noqa: E402

RUNS = Path(__file__).with_name("hf_runs.py")
FOREIGN = "checkpoint-1"  # a folder of the user's that looks like a Trainer checkpoint


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = tmp_path_factory.mktemp("hf-runs")
    foreign = workdir / "trainer" / FOREIGN
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("mine")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(RUNS), str(workdir)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return workdir


@pytest.mark.parametrize("library", ["trainer", "accelerate"])
def test_killed_run_resumes_bit_exact(runs: Path, library: str) -> None:
    """Weights and optimizer state after kill + resume equal an uninterrupted run's, bit for bit."""
    for component in ("model", "optimizer"):
        resumed = read_component(runs / f"final-{library}-resumed", component, framework="numpy")
        reference = read_component(runs / f"final-{library}-reference", component, framework="numpy")
        assert_tree_equal(reference, resumed, f"{library}:{component}")
    state = read_component(runs / f"final-{library}-reference", "optimizer", framework="numpy")["state"]
    assert state, "the optimizer took steps"


@pytest.mark.slow(seconds=25)  # the module's runs: Trainer and Accelerate processes
def test_trainer_rotation_deletes_only_its_own_checkpoints(runs: Path) -> None:
    """save_total_limit=1 left the newest checkpoint and the user's look-alike folder, nothing else."""
    names = sorted(p.name for p in (runs / "trainer").iterdir() if not p.name.startswith("."))
    assert names == [FOREIGN, "checkpoint-9"]
    assert (runs / "trainer" / FOREIGN / "notes.txt").read_text() == "mine"
    assert is_checkpoint(runs / "trainer" / "checkpoint-9")
    state = read_component(runs / "trainer" / "checkpoint-9", "trainer_state")
    assert state["global_step"] == 9 and state["max_steps"] == 9


class Counter:
    """A custom object registered for checkpointing: its state dict holds a value the format cannot store."""

    def __init__(self, extra: object) -> None:
        self.extra = extra

    def state_dict(self) -> dict[str, object]:
        return {"count": 3, "extra": self.extra}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.extra = state["extra"]


def _accelerator_with(model: torch.nn.Module, *objects: object) -> Accelerator:
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    accelerator.register_for_checkpointing(*objects)
    return accelerator


def test_accelerate_refuses_unstorable_custom_state(tmp_path: Path) -> None:
    """A registered object whose state is an arbitrary Python object is refused, naming it; nothing is written."""
    accelerator = _accelerator_with(torch.nn.Linear(2, 2), Counter(object()))
    with pytest.raises(UnsupportedValue) as caught:
        save_state(accelerator, tmp_path / "state")
    assert "custom_0" in str(caught.value) and "extra" in str(caught.value)
    assert not (tmp_path / "state").exists()


def test_accelerate_load_is_verify_first(tmp_path: Path) -> None:
    """A flipped byte in the model's data: load_state raises, and neither the model nor a custom object changed."""
    model = torch.nn.Linear(2, 2)
    counter = Counter(5)
    accelerator = _accelerator_with(model, counter)
    path = save_state(accelerator, tmp_path / "state")
    counter.extra = 6
    data = next((path / "components" / "model").glob("*.bin"))
    original = data.read_bytes()
    data.write_bytes(bytes([original[0] ^ 0xFF]) + original[1:])
    with torch.no_grad():
        model.weight.fill_(42.0)
    with pytest.raises(IntegrityError):
        load_state(accelerator, path)
    assert bool((model.weight == 42.0).all()) and counter.extra == 6
    data.write_bytes(original)  # the intact checkpoint restores both
    load_state(accelerator, path)
    assert not bool((model.weight == 42.0).any()) and counter.extra == 5


def _small_trainer(output_dir: Path) -> OpenCheckpointTrainer:
    config = GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=4)
    args = TrainingArguments(output_dir=str(output_dir), report_to=[], use_cpu=True, max_steps=1)
    return OpenCheckpointTrainer(model=GPT2LMHeadModel(config), args=args, train_dataset=[])


def test_trainer_refuses_a_checkpoint_of_its_own_format(tmp_path: Path) -> None:
    """Resuming from a folder of Trainer's pickled format is refused before anything is loaded."""
    native = tmp_path / "checkpoint-4"
    native.mkdir()
    (native / "trainer_state.json").write_text("{}")
    with pytest.raises(CheckpointError, match="Trainer's own format"):
        _small_trainer(tmp_path).train(resume_from_checkpoint=True)


def test_trainer_loads_the_best_model_from_its_checkpoint(tmp_path: Path) -> None:
    """load_best_model_at_end: the best checkpoint's weights (GPT-2's tied lm_head included) come back."""
    trainer = _small_trainer(tmp_path)
    best = TrainerRotation(tmp_path).save(trainer._oc_checkpoint(model_only=True), 2)
    saved = {name: tensor.clone() for name, tensor in trainer.model.state_dict().items()}
    with torch.no_grad():
        for parameter in trainer.model.parameters():
            parameter.add_(1.0)
    trainer.state.best_model_checkpoint = str(best)
    trainer._load_best_model()
    restored = trainer.model.state_dict()
    assert all(torch.equal(restored[name], tensor) for name, tensor in saved.items())
    assert restored["lm_head.weight"].data_ptr() == restored["transformer.wte.weight"].data_ptr()


def test_trainer_refuses_an_optimizer_of_another_class_before_restoring_the_model(tmp_path: Path) -> None:
    """A checkpoint of optim="adamw_torch" resumed with optim="sgd": refused naming the key, weights untouched."""
    config = GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=4)
    rows = [{"input_ids": torch.tensor([1, 2, 3, 4]), "labels": torch.tensor([1, 2, 3, 4])}] * 2

    def trainer(optim: str, steps: int) -> OpenCheckpointTrainer:
        args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True, max_steps=steps, optim=optim,
                                 save_steps=1, per_device_train_batch_size=2, disable_tqdm=True)
        return OpenCheckpointTrainer(model=GPT2LMHeadModel(config), args=args, train_dataset=rows)

    trainer("adamw_torch", 1).train()
    resumed = trainer("sgd", 2)
    before = {name: tensor.clone() for name, tensor in resumed.model.state_dict().items()}
    with pytest.raises(CheckpointError, match=r"optimizer.*'momentum'"):
        resumed.train(resume_from_checkpoint=True)
    assert all(torch.equal(before[name], tensor) for name, tensor in resumed.model.state_dict().items())

"""``Trainer(plugins=[OpenCheckpointIO()])``: Lightning's checkpoints through OpenCheckpoint, end to end.

A real ``lightning`` 2.x run (tests/integrations/lightning_train.py: a tiny MLP with
dropout, shuffled data, Adam, StepLR, a callback with state, ``ModelCheckpoint``
with ``save_top_k``/``save_last``) is SIGKILLed in its second epoch and resumed
with ``ckpt_path="last"``; its final state equals an uninterrupted run's bit for
bit. Every dict Lightning hands the plugin comes back exactly (types, key order,
tensors' bytes); what cannot is refused naming the key; ``remove_checkpoint``
deletes only checkpoints the plugin wrote.
"""

from __future__ import annotations

import copy
import os
import re
import struct
import subprocess
import sys
from collections import OrderedDict, namedtuple
from pathlib import Path
from typing import Any, Literal

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")

import lightning_train  # noqa: E402  (tests/integrations, on pytest's pythonpath)

from opencheckpoint import Checkpoint, manifest, validate  # noqa: E402
from opencheckpoint.format.errors import CheckpointError, LimitExceeded, TargetExists, UnsupportedValue  # noqa: E402
from opencheckpoint.integrations.lightning import OpenCheckpointIO  # noqa: E402
from opencheckpoint.integrations.lightning_io import MARK_KEY  # noqa: E402

SCRIPT = Path(lightning_train.__file__)
STEPS = 2 * lightning_train.BATCHES_PER_EPOCH


def assert_exact(given: Any, loaded: Any, path: str = "checkpoint") -> None:
    """``loaded`` is ``given``: same types (tuple, list, OrderedDict, int, float...), same key order,
    same mapping attributes, tensors with the same dtype, shape, device and bytes."""
    assert type(loaded) is type(given), f"{path}: {type(loaded).__name__} != {type(given).__name__}"
    if isinstance(given, dict):
        assert list(loaded) == list(given), f"{path}: keys {list(loaded)} != {list(given)}"
        if isinstance(given, OrderedDict):
            assert sorted(vars(loaded)) == sorted(vars(given)), f"{path}: attributes"
            for name in vars(given):
                assert_exact(getattr(given, name), getattr(loaded, name), f"{path}.{name}")
        for key in given:
            assert_exact(given[key], loaded[key], f"{path}[{key!r}]")
    elif isinstance(given, (list, tuple)):
        assert len(loaded) == len(given), f"{path}: length"
        for index, (a, b) in enumerate(zip(given, loaded, strict=True)):
            assert_exact(a, b, f"{path}[{index}]")
    elif isinstance(given, torch.Tensor):
        assert (loaded.dtype, loaded.shape, loaded.device) == (given.dtype, given.shape, given.device), path
        assert torch.equal(loaded.reshape(-1).view(torch.uint8), given.reshape(-1).view(torch.uint8)), path
    elif isinstance(given, float):
        assert struct.pack("<d", loaded) == struct.pack("<d", given), f"{path}: {loaded} != {given}"
    else:
        assert loaded == given, f"{path}: {loaded!r} != {given!r}"


class RecordingIO(OpenCheckpointIO):
    """The plugin, keeping a deep copy of every dict Lightning gave it, by path."""

    def __init__(self) -> None:
        super().__init__()
        self.given: dict[str, Any] = {}

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        super().save_checkpoint(checkpoint, path, storage_options)
        self.given[os.fspath(path)] = copy.deepcopy(checkpoint)


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RecordingIO]:
    """Two epochs in this process through a recording plugin (ModelCheckpoint, then trainer.save_checkpoint)."""
    run_dir = tmp_path_factory.mktemp("lightning-run")
    io = RecordingIO()
    fit_here(run_dir, io)
    return run_dir, io


def fit_here(run_dir: Path, io: Any = None, *, resume: bool = False) -> tuple[Any, lightning_train.RngState]:
    """``lightning_train.fit`` in this process (what the script does in its own), the process-wide flag of
    deterministic algorithms given back afterwards to the other tests."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        return lightning_train.fit(str(run_dir), io, resume=resume)
    finally:
        torch.use_deterministic_algorithms(deterministic)


def test_every_saved_dict_round_trips_exactly(recorded_run: tuple[Path, RecordingIO]) -> None:
    run_dir, io = recorded_run
    final = io.given[str(run_dir / "final.ckpt")]
    for key in ("state_dict", "optimizer_states", "lr_schedulers", "loops", "callbacks", "hyper_parameters",
                "epoch", "global_step", "pytorch-lightning_version"):
        assert key in final, key
    assert isinstance(final["state_dict"], OrderedDict) and hasattr(final["state_dict"], "_metadata")
    assert all(type(key) is int for key in final["optimizer_states"][0]["state"])  # keyed by parameter index
    # A file only exists once the save was published: every recorded one that still exists must load exactly.
    assert len(io.given) >= 3
    for path, given in io.given.items():
        if os.path.exists(path):
            assert_exact(given, OpenCheckpointIO().load_checkpoint(path), path)


def test_model_checkpoint_files_are_checkpoints_and_rotation_removed_only_its_own(
        recorded_run: tuple[Path, RecordingIO]) -> None:
    run_dir, io = recorded_run
    names = sorted(os.listdir(run_dir / "checkpoints"))
    written = sorted(Path(p).name for p in io.given if Path(p).parent == run_dir / "checkpoints")
    # save_top_k=1 removed the worse epoch's file through remove_checkpoint; last.ckpt was replaced in place.
    assert len(written) == 3 and len(names) == 2 and "last.ckpt" in names, (written, names)
    for name in names:
        path = run_dir / "checkpoints" / name
        assert path.is_file() and validate(path).ok  # the archive form: one file at the .ckpt path


@pytest.mark.slow(seconds=9)  # Lightning processes killed and resumed
def test_resume_after_sigkill_matches_an_uninterrupted_run_bit_for_bit(
        recorded_run: tuple[Path, RecordingIO], tmp_path: Path) -> None:
    """Killed in the second epoch (a process of its own, SIGKILLed), resumed with ``ckpt_path="last"`` in this
    process (from the files alone, as a new process would: importing Lightning again costs 10 s of CPU): the
    final checkpoint (weights, Adam's state, the scheduler, loops, callbacks' state, the RNG state) equals the
    uninterrupted run's (the module's fixture, same seeds) in every bit; only the run directory in paths differs."""
    # Killed in the second epoch, after the first epoch's checkpoint (and last.ckpt) were published.
    dead = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--kill-at",
                           str(lightning_train.BATCHES_PER_EPOCH + 2)], capture_output=True, text=True, timeout=240,
                          cwd=tmp_path)
    assert dead.returncode == -9, dead.stderr[-3000:]
    assert not (tmp_path / "final.ckpt").exists() and (tmp_path / "checkpoints" / "last.ckpt").is_file()
    resumed, rng = fit_here(tmp_path, resume=True)
    assert resumed.ckpt_path == str(tmp_path / "checkpoints" / "last.ckpt")
    assert rng.here == lightning_train.BATCHES_PER_EPOCH  # it resumed in the second epoch, not from the start
    whole_dir, _io = recorded_run
    expected = in_run(OpenCheckpointIO().load_checkpoint(whole_dir / "final.ckpt"), str(whole_dir), str(tmp_path))
    final = OpenCheckpointIO().load_checkpoint(tmp_path / "final.ckpt")
    assert (final["global_step"], final["epoch"]) == (STEPS, 2)  # after the second epoch
    assert_exact(expected, final)


def in_run(value: Any, old: str, new: str) -> Any:
    """``value`` with the run directory ``old`` in every string (keys too) replaced by ``new`` (ModelCheckpoint's
    paths)."""
    if isinstance(value, dict):
        copied = type(value)((in_run(key, old, new), in_run(item, old, new)) for key, item in value.items())
        for name, attribute in vars(value).items() if isinstance(value, OrderedDict) else ():
            setattr(copied, name, attribute)
        return copied
    if isinstance(value, (list, tuple)):
        return type(value)(in_run(item, old, new) for item in value)
    return value.replace(old, new) if isinstance(value, str) else value


def test_what_cannot_come_back_exactly_is_refused_naming_the_key(tmp_path: Path) -> None:
    """A hyper-parameter that is a class instance (Lightning would pickle it) is refused, naming the key."""
    torch.manual_seed(0)
    model = lightning_train.TinyMLP()
    model.hparams["activation"] = torch.nn.Tanh()
    trainer = lightning_train.trainer(str(tmp_path), enable_checkpointing=False, max_steps=1,
                                      callbacks=[lightning_train.RngState()])
    trainer.fit(model, lightning_train.data())
    target = tmp_path / "refused.ckpt"
    with pytest.raises(UnsupportedValue, match=r"'hyper_parameters\.activation'"):
        trainer.save_checkpoint(target)
    assert not target.exists() and not any(p.name.startswith(".") for p in tmp_path.iterdir())
    Pair = namedtuple("Pair", "a b")
    with pytest.raises(UnsupportedValue, match=r"'extra\.pair'"):
        OpenCheckpointIO().save_checkpoint({"extra": {"pair": Pair(1, 2)}}, target)
    with pytest.raises(UnsupportedValue, match=r"'loops'.*0\.5"):
        OpenCheckpointIO().save_checkpoint({"loops": {0.5: 1}}, target)
    assert not target.exists()


def test_remove_checkpoint_deletes_only_what_the_plugin_wrote(tmp_path: Path) -> None:
    io = OpenCheckpointIO()
    ours = tmp_path / "epoch=0.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.ones(3)}, "epoch": 0}, ours)
    assert manifest(ours)["metadata"][MARK_KEY] == {"version": 1, "state_dict_at": 0}
    foreign = tmp_path / "torch.ckpt"
    torch.save({"state_dict": {"w": torch.ones(3)}}, foreign)
    folder = tmp_path / "mine.ckpt"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    other = Checkpoint(weights={"w": torch.ones(3)}, format="archive").save(tmp_path / "other.ckpt")
    for path in (foreign, folder, other):
        before = sorted(p.name for p in tmp_path.rglob("*"))
        with pytest.raises(TargetExists, match="refusing to delete"):
            io.remove_checkpoint(path)
        assert sorted(p.name for p in tmp_path.rglob("*")) == before
    with pytest.raises(TargetExists):  # a save never replaces what is not a checkpoint either
        io.save_checkpoint({"epoch": 1}, foreign)
    assert torch.load(foreign, weights_only=True)["state_dict"]["w"].sum() == 3
    io.remove_checkpoint(ours)
    assert not ours.exists()
    io.remove_checkpoint(ours)  # nothing there: nothing to do
    with pytest.raises(CheckpointError, match="not a Lightning checkpoint written by OpenCheckpointIO"):
        io.load_checkpoint(other)


def test_the_standalone_pytorch_lightning_package_checkpoints_through_its_own_class(tmp_path: Path) -> None:
    """``pytorch_lightning``'s Trainer accepts only its own package's CheckpointIO: the plugin class of
    ``opencheckpoint.integrations.pytorch_lightning`` saves (ModelCheckpoint) and resumes there too."""
    import pytorch_lightning as pl  # the dev extra installs it

    from opencheckpoint.integrations.pytorch_lightning import OpenCheckpointIO as PlainIO

    class Linear(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def fit(epochs: int, ckpt_path: str | None) -> Any:
        trainer = pl.Trainer(max_epochs=epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
                             default_root_dir=tmp_path, plugins=[PlainIO()],
                             callbacks=[pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpts", save_last=True)])
        trainer.fit(Linear(), lightning_train.data(), ckpt_path=ckpt_path)
        return trainer

    fit(1, None)
    last = tmp_path / "ckpts" / "last.ckpt"
    assert validate(last).ok
    resumed = fit(2, "last")
    assert resumed.ckpt_path == str(last) and resumed.global_step == STEPS
    assert PlainIO().load_checkpoint(last)["global_step"] == STEPS


@pytest.mark.parametrize("form", ["archive", "directory"])
def test_a_save_replaces_only_a_checkpoint_the_plugin_wrote(tmp_path: Path,
                                                            form: Literal["archive", "directory"]) -> None:
    """Another writer's checkpoint at the path (a plain ``Checkpoint.save``) is refused with TargetExists naming
    the path and left whole, in either form and whichever form the plugin writes; the plugin's own is replaced."""
    target = tmp_path / "epoch=0-step=4.ckpt"
    Checkpoint(precious={"w": torch.arange(3.0)}).save(target, format=form)
    for io in (OpenCheckpointIO(), OpenCheckpointIO(format="directory")):
        with pytest.raises(TargetExists, match=r"refusing to replace.*nothing was written") as refused:
            io.save_checkpoint({"state_dict": {"w": torch.zeros(1)}, "epoch": 0}, target)
        assert refused.value.file == str(target)
        assert validate(target).ok and list(manifest(target)["components"]) == ["precious"]
    ours = tmp_path / "last.ckpt"
    io = OpenCheckpointIO(format=form)
    io.save_checkpoint({"state_dict": {"w": torch.zeros(1)}, "epoch": 0}, ours)
    io.save_checkpoint({"state_dict": {"w": torch.ones(1)}, "epoch": 1}, ours)
    assert io.load_checkpoint(ours)["epoch"] == 1


def _crafted(path: Path, weights: dict[str, Any] | None, trainer: dict[str, Any]) -> Path:
    """A checkpoint that validates and carries the plugin's mark, its documents written by hand."""
    components: dict[str, Any] = {"trainer": trainer} if weights is None else {"state_dict": weights,
                                                                               "trainer": trainer}
    Checkpoint(**components).save(path, format="archive", metadata={MARK_KEY: {"version": 1, "state_dict_at": 0}})
    assert validate(path).ok
    return path


def _document(value: Any, **recorded: Any) -> dict[str, Any]:
    return {"value": value, "attributes": [], "ordered": [], "numpy": [], **recorded}


@pytest.mark.parametrize("case, field, message", [
    ("trainer_a_list", "$.value", "'trainer' component holds a list"),
    ("attribute_keys", "$.attributes[0]", "only torch's state_dict()._metadata is kept, not 'keys'"),
    ("metadata_a_number", "$.attributes[0]", "_metadata is not torch's mapping"),
    ("state_dict_twice", "$.value.state_dict", "duplicate key 'state_dict'"),
    ("no_state_dict", f"$.metadata['{MARK_KEY}'].state_dict_at", "'state_dict': a position but no component"),
])
def test_a_crafted_checkpoint_is_refused_naming_the_file_and_field(tmp_path: Path, case: str, field: str,
                                                                   message: str) -> None:
    """Hostile documents in a valid, marked checkpoint: a CheckpointError naming file and field, never a raw
    exception, an attribute set from the file, or one of two ``state_dict`` s chosen silently."""
    weights = {"w": torch.ones(2).numpy()}
    documents = {
        "trainer_a_list": (_document(weights), _document([1, 2])),
        "attribute_keys": (_document(weights, ordered=[["value"]], attributes=[[["value"], "keys", 5]]),
                           _document({"epoch": 1})),
        "metadata_a_number": (_document(weights, ordered=[["value"]], attributes=[[["value"], "_metadata", 5]]),
                              _document({"epoch": 1})),
        "state_dict_twice": (_document(weights), _document({"state_dict": weights, "epoch": 1})),
        "no_state_dict": (None, _document({"epoch": 1})),
    }
    path = _crafted(tmp_path / f"{case}.ckpt", *documents[case])
    with pytest.raises(CheckpointError, match=re.escape(message)) as refused:
        OpenCheckpointIO().load_checkpoint(path)
    assert (refused.value.file, refused.value.field) == (str(path), field)


def test_only_torchs_metadata_attribute_is_saved(tmp_path: Path) -> None:
    """What a load would refuse is refused at save, naming the key: another attribute, another _metadata shape."""
    target = tmp_path / "refused.ckpt"
    for name, value in (("note", "x"), ("_metadata", {"": {"version": torch.ones(1)}})):
        extra: OrderedDict[str, int] = OrderedDict(a=1)
        setattr(extra, name, value)
        with pytest.raises(UnsupportedValue, match=rf"'extra'.*attribute '{name}'"):
            OpenCheckpointIO().save_checkpoint({"extra": extra}, target)
    assert not target.exists()


def test_a_value_containing_itself_is_refused_as_the_core_refuses_it(tmp_path: Path) -> None:
    loop: list[Any] = []
    loop.append(loop)
    target = tmp_path / "loop.ckpt"
    with pytest.raises(LimitExceeded, match="nested deeper than 128"):
        OpenCheckpointIO().save_checkpoint({"state_dict": {}, "hyper_parameters": {"x": loop}}, target)
    with pytest.raises(LimitExceeded, match="nested deeper than 128"):
        Checkpoint(cfg={"x": loop}).save(tmp_path / "core")
    assert not target.exists()
    deep: list[Any] = [0]
    for _ in range(100):  # deep, within the limit: kept
        deep = [deep]
    OpenCheckpointIO().save_checkpoint({"hyper_parameters": {"x": deep}}, target)
    assert OpenCheckpointIO().load_checkpoint(target)["hyper_parameters"]["x"] == deep


@pytest.mark.parametrize("wrapped", [False, True], ids=["async_save", "AsyncCheckpointIO"])
def test_async_saves(tmp_path: Path, wrapped: bool) -> None:
    """``OpenCheckpointIO(async_save=True)``: removals wait for the save to their path, so save_top_k keeps its
    count, and the end of fit waits for every save. Lightning's ``AsyncCheckpointIO`` around the plugin saves
    in its thread but removes at once: the removal of a file still queued finds nothing (Lightning's race,
    the same with its own plugin), so a file save_top_k dropped is left, never a half-written one."""
    from lightning.pytorch.plugins.io import AsyncCheckpointIO

    torch.manual_seed(0)
    io = AsyncCheckpointIO(OpenCheckpointIO()) if wrapped else OpenCheckpointIO(async_save=True)
    trainer = lightning_train.trainer(str(tmp_path), io)
    trainer.fit(lightning_train.TinyMLP(), lightning_train.data())
    names = sorted(os.listdir(tmp_path / "checkpoints"))
    assert "last.ckpt" in names and (len(names) == 2 or wrapped), names
    for name in names:
        assert validate(tmp_path / "checkpoints" / name).ok
    assert OpenCheckpointIO().load_checkpoint(tmp_path / "checkpoints" / "last.ckpt")["global_step"] == STEPS


def test_remove_checkpoint_on_an_object_store(mem_url: str) -> None:
    """On an fsspec store (a directory form there) the same rule: the plugin's checkpoint goes, another stays."""
    io = OpenCheckpointIO(format="directory")
    ours, other = f"{mem_url}/epoch=0.ckpt", f"{mem_url}/other.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.ones(2)}, "epoch": 0}, ours)
    Checkpoint(weights={"w": torch.ones(2)}).save(other)
    assert io.load_checkpoint(ours)["epoch"] == 0
    with pytest.raises(TargetExists, match="refusing to delete"):
        io.remove_checkpoint(other)
    assert validate(other).ok
    io.remove_checkpoint(ours)
    with pytest.raises(CheckpointError):
        io.load_checkpoint(ours)

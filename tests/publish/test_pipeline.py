"""Every public save entry point runs the one save pipeline: its plan, write and commit stages, in that order.

The stages are spied on (``stage_spy``), not the private code around them: ``Checkpoint.save`` in both forms,
``progress=``, ``save_async``, a collective save of two ranks (threads with a ``LocalCollective`` here; real
gloo ranks in ``tests/sharding/test_torch_distributed.py``), a remote save to ``memory://`` (S3 through moto
in ``tests/remote/test_s3.py``), ``Rotation`` (local and remote, sync and async) and ``RunCheckpointer``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from shard_helpers import ThreadWorld
from stage_spy import StageSpy

from opencheckpoint import Checkpoint, read_component, validate
from opencheckpoint.run import Rotation, RunCheckpointer

ONE_SAVE = ["plan", "write", "commit"]


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> StageSpy:
    return StageSpy().install(monkeypatch.setattr)


def _checkpoint() -> Checkpoint:
    return Checkpoint(weights={"w": np.arange(8, dtype=np.float32)}, config={"lr": 0.1})


@pytest.mark.parametrize(("name", "form"), [("ckpt", "directory"), ("ckpt.zip", "archive")])
def test_save_runs_plan_write_commit(tmp_path: Path, spy: StageSpy, name: str, form: str) -> None:
    path = _checkpoint().save(tmp_path / name, format=form)  # type: ignore[arg-type]
    assert spy.stages_for(path) == ONE_SAVE
    assert validate(path).ok and path.is_file() == (form == "archive")


def test_progress_reads_the_plans_total_through_the_same_stages(tmp_path: Path, spy: StageSpy) -> None:
    updates: list[tuple[int, int]] = []
    path = _checkpoint().save(tmp_path / "c", progress=lambda done, total: updates.append((done, total)))
    assert spy.stages_for(path) == ONE_SAVE
    assert updates[0] == (0, 64) and updates[-1] == (64, 64)  # the plan's bytes: 8 float32, 64-byte aligned


def test_save_async_plans_now_and_writes_and_commits_later(tmp_path: Path, spy: StageSpy) -> None:
    weights = {"w": np.arange(8, dtype=np.float32)}
    handle = Checkpoint(weights=weights).save_async(tmp_path / "c")
    weights["w"][:] = -1  # after the plan and the snapshot: the save still writes 0..7
    path = handle.result()
    assert spy.stages_for(path) == ONE_SAVE
    assert read_component(path, "weights")["w"].tolist() == list(range(8))


def test_a_collective_save_plans_and_writes_on_every_rank_and_commits_once(tmp_path: Path, spy: StageSpy) -> None:
    target = tmp_path / "c"
    results = ThreadWorld(2).run(lambda group: _checkpoint().save(target, process_group=group))
    assert results == [target, target]
    assert sorted(spy.stages_for(target)) == sorted(["plan", "plan", "write", "write", "commit"])
    assert spy.stages_for(target)[-1] == "commit" and validate(target).ok


def test_a_remote_save_runs_the_same_stages(spy: StageSpy) -> None:
    pytest.importorskip("fsspec")
    path = _checkpoint().save("memory://pipeline/c")
    assert spy.stages_for(path) == ONE_SAVE
    assert validate(path).ok


@pytest.mark.parametrize("where", ["local", "remote"])
def test_one_rotation_saves_through_the_pipeline_on_any_storage(tmp_path: Path, spy: StageSpy, where: str) -> None:
    if where == "remote":
        pytest.importorskip("fsspec")
    directory: Any = tmp_path / "run" if where == "local" else f"memory://pipeline-rotation-{tmp_path.name}/run"
    rotation = Rotation(directory, keep_last=1)
    assert type(rotation) is Rotation
    first = rotation.save(_checkpoint(), 1)
    second = rotation.save_async(_checkpoint(), 2).result()
    assert spy.stages_for(first) == ONE_SAVE and spy.stages_for(second) == ONE_SAVE
    assert rotation.checkpoints() == [second]  # pruned after the async save's commit


def test_run_checkpointer_saves_through_the_pipeline(tmp_path: Path, spy: StageSpy) -> None:
    for async_save in (False, True):
        with RunCheckpointer(_checkpoint(), tmp_path / f"run-{async_save}", interval=2,
                             async_save=async_save) as run:
            saved = [run.save(step) for step in range(1, 4)]
        paths = [path for path in saved if path is not None] + [run.rotation.path_for(3)]  # the final save
        assert [spy.stages_for(path) for path in paths] == [ONE_SAVE, ONE_SAVE]

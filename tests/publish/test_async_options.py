"""The async and progress save paths honour per-component options (``component_options=`` and registered
``CheckpointOptions``): the adapter they choose, ``sha256``, and the arguments of the object's own save method."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from opencheckpoint import Checkpoint, CheckpointOptions, manifest, read_component
from opencheckpoint.adapters import JsonAdapter, StateDictAdapter


class _Stateful:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def state_dict(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        return {"value": np.arange(3.0)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise AssertionError("not loaded here")


def _file_fields(path: Path, name: str) -> set[str]:
    files = manifest(path)["components"][name]["files"]
    return {field for entry in files.values() for field in entry}


def test_save_async_applies_component_options(tmp_path: Path) -> None:
    obj = _Stateful()
    ckpt = Checkpoint(config={"lr": 0.1}, plain={"w": np.ones(2)})
    ckpt.register("obj", obj, options=CheckpointOptions(adapter=StateDictAdapter(), save_kwargs={"keep_vars": True}))
    path = ckpt.save_async(tmp_path / "c", component_options={
        "plain": CheckpointOptions(sha256=True), "config": CheckpointOptions(adapter=JsonAdapter())}).result()
    assert obj.calls == [{"keep_vars": True}]  # the registered save arguments reached state_dict
    assert "sha256" in _file_fields(path, "plain") and "sha256" not in _file_fields(path, "obj")
    assert manifest(path)["components"]["config"]["kind"] == "json"
    assert read_component(path, "obj")["value"].tolist() == [0.0, 1.0, 2.0]


def test_save_with_progress_applies_component_options(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    ckpt = Checkpoint(plain={"w": np.ones(4)}, other={"w": np.zeros(4)})
    path = ckpt.save(tmp_path / "c", progress=lambda done, total: seen.append((done, total)),
                     component_options={"plain": CheckpointOptions(sha256=True)})
    assert seen and seen[-1][0] == seen[-1][1] > 0
    assert "sha256" in _file_fields(path, "plain") and "sha256" not in _file_fields(path, "other")

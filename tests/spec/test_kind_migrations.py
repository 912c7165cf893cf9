"""register_migration: a user's own (third-party) kind moves kind_version k -> k+1; reads migrate (issue 12 §3).

Also the format's payload hook (migrations.migrate_component), which every component read now calls.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opencheckpoint import (
    Checkpoint,
    IncompatibleComponent,
    UnknownComponentKind,
    read_component,
    register_migration,
)
from opencheckpoint.adapters import Adapter, ComponentReader, ComponentWriter
from opencheckpoint.format import migrations as migrations_module
from opencheckpoint.format.migrations import MigrationChainRunner, MigrationStep


def _kind() -> str:
    """A kind of its own per test: the registry is process-wide."""
    return f"com.example/thing-{uuid.uuid4().hex[:12]}"


class ThingAdapter(Adapter):
    """v1 writes ``items.txt`` (one item a line); v2 ``items.json``; v3 ``state.json`` with a count."""

    def __init__(self, kind: str, version: int) -> None:
        self.kind = kind
        self.kind_version = version

    def save(self, value: Any, writer: ComponentWriter) -> None:
        items = value["items"]
        if self.kind_version == 1:
            writer.write_file("items.txt", "\n".join(items).encode())
        elif self.kind_version == 2:
            writer.write_file("items.json", json.dumps(items).encode())
        else:
            writer.write_file("state.json", json.dumps({"items": items, "count": len(items)}).encode())

    def load(self, value: Any, reader: ComponentReader, *, strict: str) -> Any:
        files = reader.files()
        assert self.kind_version == 3, "this test reads with the v3 adapter only"
        value.clear()
        value.update(json.loads(files["state.json"]))
        return None


def _v1_to_v2(files: dict[str, bytes]) -> dict[str, bytes]:
    return {"items.json": json.dumps(files["items.txt"].decode().split("\n")).encode()}


def _v2_to_v3(files: dict[str, bytes]) -> dict[str, bytes]:
    items = json.loads(files["items.json"])
    return {"state.json": json.dumps({"items": items, "count": len(items)}).encode()}


def _save_v1(tmp_path: Path, kind: str) -> Path:
    return Checkpoint().register("thing", {"items": ["a", "b"]}, ThingAdapter(kind, 1)).save(tmp_path / "c")


def test_load_applies_every_step_in_order_and_never_writes_back(tmp_path: Path) -> None:
    kind = _kind()
    path = _save_v1(tmp_path, kind)
    before = {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}
    register_migration(kind, 2, _v2_to_v3)
    register_migration(kind, 1, _v1_to_v2)
    live: dict[str, Any] = {}
    result = Checkpoint().register("thing", live, ThingAdapter(kind, 3)).load(path)
    assert result.loaded == {"thing"} and live == {"items": ["a", "b"], "count": 2}
    assert {p: p.read_bytes() for p in path.rglob("*") if p.is_file()} == before


def test_read_component_returns_the_files_migrated_to_the_newest_registered_version(tmp_path: Path) -> None:
    kind = _kind()
    path = _save_v1(tmp_path, kind)
    with pytest.raises(UnknownComponentKind):  # R-CMP-21: nothing registered, the kind is unknown here
        read_component(path, "thing")
    register_migration(kind, 1, _v1_to_v2)
    assert read_component(path, "thing") == {"items.json": b'["a", "b"]'}
    register_migration(kind, 2, _v2_to_v3)
    assert json.loads(read_component(path, "thing")["state.json"]) == {"items": ["a", "b"], "count": 2}


def test_a_missing_step_names_the_kind_and_versions_and_restores_nothing(tmp_path: Path) -> None:
    kind = _kind()
    path = _save_v1(tmp_path, kind)
    register_migration(kind, 1, _v1_to_v2)  # 2 -> 3 is missing
    live: dict[str, Any] = {"untouched": True}
    ckpt = Checkpoint(other={"x": np.zeros(1)}).register("thing", live, ThingAdapter(kind, 3))
    with pytest.raises(IncompatibleComponent) as info:
        ckpt.load(path, components=["thing"])
    assert kind in info.value.message and "kind_version 2 -> 3" in info.value.message
    assert live == {"untouched": True}
    result = ckpt.load(path, components=["thing"], strict="ignore")
    assert "thing" in result.incompatible and live == {"untouched": True}


@pytest.mark.parametrize("step", [
    lambda files: 1 / 0,
    lambda files: ["not", "a", "mapping"],
    lambda files: {"ok.json": "text, not bytes"},
    lambda files: {"../escape.json": b"{}"},
])
def test_a_failing_step_is_incompatible_and_names_kind_and_versions(tmp_path: Path, step: Any) -> None:
    kind = _kind()
    path = _save_v1(tmp_path, kind)
    register_migration(kind, 1, step)
    register_migration(kind, 2, _v2_to_v3)
    with pytest.raises(IncompatibleComponent) as info:
        Checkpoint().register("thing", {}, ThingAdapter(kind, 3)).load(path)
    assert f"{kind} kind_version 1 -> 2" in info.value.message
    with pytest.raises(IncompatibleComponent, match="kind_version 1 -> 2"):
        read_component(path, "thing")


def test_a_step_cannot_change_what_the_next_one_or_the_reader_sees(tmp_path: Path) -> None:
    kind = _kind()
    path = _save_v1(tmp_path, kind)

    def mutating(files: dict[str, bytes]) -> dict[str, bytes]:
        out = _v1_to_v2(files)
        files.clear()  # a careless step: its input is a copy, so nothing else changes
        return out

    register_migration(kind, 1, mutating)
    assert read_component(path, "thing") == {"items.json": b'["a", "b"]'}
    assert read_component(path, "thing") == {"items.json": b'["a", "b"]'}


def test_a_stored_version_newer_than_the_adapter_is_incompatible(tmp_path: Path) -> None:
    kind = _kind()
    path = Checkpoint().register("thing", {"items": ["a"]}, ThingAdapter(kind, 3)).save(tmp_path / "c")
    with pytest.raises(IncompatibleComponent, match=r"kind_version 3 is newer than supported \(1\)"):
        Checkpoint().register("thing", {}, ThingAdapter(kind, 1)).load(path)


@pytest.mark.parametrize(("kind", "version", "error"), [
    ("tree", 1, ValueError), ("json", 1, ValueError), ("files", 1, ValueError), ("thing", 1, ValueError),
    ("com.example/x", 0, ValueError), ("com.example/x", True, ValueError), ("com.example/x", "1", ValueError),
])
def test_register_migration_refuses_built_in_kinds_and_bad_versions(kind: str, version: Any,
                                                                     error: type[Exception]) -> None:
    with pytest.raises(error):
        register_migration(kind, version, _v1_to_v2)


def test_register_migration_needs_a_callable() -> None:
    with pytest.raises(TypeError):
        register_migration("com.example/x", 1, "not callable")  # type: ignore[arg-type]


def test_every_component_read_passes_the_format_payload_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """A reader of a (test-only) format version 2 migrates version-1 payloads of the kinds its step lists."""
    path = Checkpoint(config={"lr": 0.1}, weights={"w": np.arange(2.0)}).save(tmp_path / "c")
    chain = MigrationChainRunner(current_version=2, steps=[MigrationStep(
        1, 2, "json values wrapped; trees gain a version", dict,
        {"json": lambda record, value: {"value": value},
         "tree": lambda record, tree: {**tree, "v": 2}})])
    monkeypatch.setattr(migrations_module, "DEFAULT_CHAIN", chain)
    assert read_component(path, "config") == {"value": {"lr": 0.1}}
    tree = read_component(path, "weights")
    assert tree["v"] == 2 and tree["w"].tolist() == [0.0, 1.0]
    live: dict[str, Any] = {}
    Checkpoint(config=live).load(path)
    assert live == {"value": {"lr": 0.1}}

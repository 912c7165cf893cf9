"""The torchrl checkpoint API's pieces (issue 12 §3): is_checkpoint, manifest, read_component(default=),
per-component options, and the adapter inference order (decision record 0010)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import opencheckpoint
from opencheckpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointOptions,
    IncompatibleComponent,
    IntegrityError,
    NotACheckpoint,
    UnsupportedLocation,
    is_checkpoint,
    manifest,
    read_component,
)
from opencheckpoint.adapters import DumpLoadAdapter, JsonAdapter, StateDictAdapter, TreeAdapter
from opencheckpoint.format.migrations import DEFAULT_CHAIN


def _saved(tmp_path: Path, **extra: Any) -> Path:
    return Checkpoint(weights={"w": np.arange(3.0)}, config={"lr": 0.1}).save(tmp_path / "ckpt", **extra)


# -- is_checkpoint / manifest ---------------------------------------------------------------------

def test_is_checkpoint_is_true_for_both_forms(tmp_path: Path) -> None:
    directory = _saved(tmp_path)
    archive = Checkpoint(w=np.zeros(2), format="archive").save(tmp_path / "a.ocp")
    assert is_checkpoint(directory) and is_checkpoint(str(archive))


def test_is_checkpoint_is_false_and_never_raises_for_what_is_not_one(tmp_path: Path) -> None:
    plain_dir = tmp_path / "folder"
    plain_dir.mkdir()
    (plain_dir / "notes.txt").write_text("hi")
    plain_file = tmp_path / "file.bin"
    plain_file.write_bytes(b"\x00" * 10)
    bad_manifest = _saved(tmp_path)
    (bad_manifest / "manifest.json").write_text("{}")
    missing_file = Checkpoint(w=np.zeros(2)).save(tmp_path / "m")
    (missing_file / "components" / "w" / "data.bin").unlink()
    for path in (tmp_path / "nowhere", plain_dir, plain_file, bad_manifest, missing_file):
        assert is_checkpoint(path) is False, path


def test_is_checkpoint_raises_for_a_location_it_cannot_read() -> None:
    with pytest.raises(UnsupportedLocation):  # a protocol no installed fsspec implementation serves
        is_checkpoint("nosuchproto://bucket/run/checkpoint-1")


def test_manifest_returns_the_validated_manifest_without_reading_payloads(tmp_path: Path) -> None:
    path = _saved(tmp_path, metadata={"step": 7})
    (path / "components" / "weights" / "data.bin").write_bytes(b"\xff" * 24)  # same size, wrong bytes
    found = manifest(path)
    assert found["format"] == "opencheckpoint" and found["metadata"] == {"step": 7}
    assert set(found["components"]) == {"weights", "config"}
    written = json.loads((path / "manifest.json").read_text())
    assert written["format_version"] == 1  # no sharded array: written as version 1 ...
    # ... and returned with the file's own format_version (issue 24: it said the reader's 2); the other
    # members are read through the migration chain (R-VER-5), and 1 -> 2 changes nothing else
    assert DEFAULT_CHAIN.current_version == 2 and found == written
    with pytest.raises(IntegrityError):  # the payload was never read by manifest(); a read checks it
        read_component(path, "weights")


def test_manifest_raises_a_checkpoint_error_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(NotACheckpoint) as info:
        manifest(tmp_path)
    assert str(tmp_path) in str(info.value)
    path = _saved(tmp_path)
    raw = (path / "manifest.json").read_bytes().replace(b'"weights"', b'"weightz"', 1)
    (path / "manifest.json").write_bytes(raw)  # an edit its manifest_crc32c does not match
    with pytest.raises(CheckpointError) as edited:
        manifest(path)
    assert edited.value.file == "manifest.json"


def test_checkpoint_has_the_seed_classmethod_spellings(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    assert Checkpoint.is_checkpoint(path) and not Checkpoint.is_checkpoint(tmp_path)
    assert Checkpoint.manifest(path) == manifest(path)


# -- read_component(default=) ---------------------------------------------------------------------

def test_read_component_default_for_a_missing_component(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    assert read_component(path, "logger", default=None) is None
    marker = object()
    assert read_component(path, "logger", default=marker) is marker
    assert read_component(path, "config", default=None) == {"lr": 0.1}
    with pytest.raises(CheckpointError, match="no component named 'logger'"):
        read_component(path, "logger")


def test_read_component_default_does_not_hide_other_errors(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    (path / "components" / "config" / "value.json").write_text('{"lr": 0.2}\n')
    with pytest.raises(IntegrityError):
        read_component(path, "config", default=None)
    with pytest.raises(NotACheckpoint):
        read_component(tmp_path / "nowhere", "config", default=None)


# -- per-component options ------------------------------------------------------------------------

def test_registered_strict_makes_one_component_optional(tmp_path: Path) -> None:
    path = Checkpoint(weights={"w": np.ones(2)}).save(tmp_path / "c")
    weights = {"w": np.zeros(2)}
    ckpt = Checkpoint(weights=weights, strict="error")
    ckpt.register("buffer", {"obs": np.zeros(3)}, options=CheckpointOptions(strict="ignore"))
    result = ckpt.load(path)
    assert result.loaded == {"weights"} and result.missing == {"buffer"}
    assert weights["w"].tolist() == [1.0, 1.0]
    strict = Checkpoint(weights={"w": np.zeros(2)}, buffer={"obs": np.zeros(3)})
    with pytest.raises(IncompatibleComponent, match="buffer: missing"):
        strict.load(path)


def test_operation_options_override_registered_ones(tmp_path: Path) -> None:
    path = Checkpoint(weights={"w": np.ones(2)}).save(tmp_path / "c")
    ckpt = Checkpoint(weights={"w": np.zeros(2)})
    ckpt.register("buffer", {}, options=CheckpointOptions(strict="ignore"))
    with pytest.raises(IncompatibleComponent, match="buffer"):
        ckpt.load(path, component_options={"buffer": CheckpointOptions(strict="error")})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ckpt.load(path, component_options={"buffer": CheckpointOptions(strict="warn")})
    assert any("buffer" in str(w.message) for w in caught)


def test_per_component_sha256_on_save(tmp_path: Path) -> None:
    ckpt = Checkpoint(weights={"w": np.ones(2)}, config={"a": 1})
    path = ckpt.save(tmp_path / "c", component_options={"weights": CheckpointOptions(sha256=True)})
    records = manifest(path)["components"]
    assert all("sha256" in entry for entry in records["weights"]["files"].values())
    assert all("sha256" not in entry for entry in records["config"]["files"].values())


def test_per_component_verify_opt_out(tmp_path: Path) -> None:
    path = Checkpoint(weights={"w": np.arange(4.0)}).save(tmp_path / "c")
    data = path / "components" / "weights" / "data.bin"
    raw = bytearray(data.read_bytes())
    raw[0] ^= 1  # one flipped bit in the array bytes
    data.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError):
        Checkpoint(weights={"w": np.zeros(4)}).load(path)
    target = {"w": np.zeros(4)}
    Checkpoint(weights=target).load(path, component_options={"weights": CheckpointOptions(verify=False)})
    assert target["w"][1:].tolist() == [1.0, 2.0, 3.0]


def test_per_component_rename(tmp_path: Path) -> None:
    path = Checkpoint(a={"module.w": np.ones(2)}, b={"module.w": np.ones(2)}).save(tmp_path / "c")
    a, b = {"w": np.zeros(2)}, {"module.w": np.zeros(2)}
    Checkpoint(a=a, b=b).load(path, component_options={"a": CheckpointOptions(rename={"module.": ""})})
    assert a["w"].tolist() == [1.0, 1.0] and b["module.w"].tolist() == [1.0, 1.0]


class _Stateful:
    """A state_dict object recording the arguments its methods get."""

    def __init__(self) -> None:
        self.value = np.zeros(2)
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("state_dict", args, kwargs))
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        self.calls.append(("load_state_dict", args, kwargs))
        self.value = np.asarray(state["value"])


def test_method_arguments_reach_state_dict_and_load_state_dict(tmp_path: Path) -> None:
    source = _Stateful()
    source.value = np.ones(2)
    options = CheckpointOptions(save_kwargs={"prefix": "a"}, load_kwargs={"strict": False})
    path = Checkpoint().register("obj", source, options=options).save(tmp_path / "c")
    assert source.calls == [("state_dict", (), {"prefix": "a"})]
    target = _Stateful()
    ckpt = Checkpoint().register("obj", target, options=options)
    ckpt.load(path, component_options={"obj": CheckpointOptions(load_kwargs={"assign": True})})
    assert ("load_state_dict", (), {"strict": False, "assign": True}) in target.calls
    assert target.value.tolist() == [1.0, 1.0]


class _Dumpable:
    def __init__(self, text: str = "") -> None:
        self.text = text
        self.seen: list[Any] = []

    def dump(self, path: Path, *args: Any, **kwargs: Any) -> None:
        self.seen.append(("dump", args, kwargs))
        (Path(path) / "text.txt").write_text(self.text)

    def load(self, path: Path, *args: Any, **kwargs: Any) -> None:
        self.seen.append(("load", args, kwargs))
        self.text = (Path(path) / "text.txt").read_text()


def test_method_arguments_reach_dump_and_load(tmp_path: Path) -> None:
    source = _Dumpable("hello")
    options = CheckpointOptions(save_args=("fast",), load_args=("lazy",))
    path = Checkpoint().register("obj", source, options=options).save(tmp_path / "c")
    target = _Dumpable()
    Checkpoint().register("obj", target, options=options).load(path)
    assert source.seen == [("dump", ("fast",), {})] and target.seen == [("load", ("lazy",), {})]
    assert target.text == "hello"


def test_method_arguments_for_an_adapter_that_ignores_them_are_refused(tmp_path: Path) -> None:
    ckpt = Checkpoint().register("w", {"w": np.ones(2)}, options=CheckpointOptions(save_kwargs={"x": 1}))
    with pytest.raises(TypeError, match="would be ignored"):
        ckpt.save(tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_options_choose_the_adapter(tmp_path: Path) -> None:
    ckpt = Checkpoint().register("cfg", {"a": 1}, options=CheckpointOptions(adapter=TreeAdapter()))
    path = ckpt.save(tmp_path / "c")
    assert manifest(path)["components"]["cfg"]["kind"] == "tree"
    path = ckpt.save(tmp_path / "d", component_options={"cfg": CheckpointOptions(adapter=JsonAdapter())})
    assert manifest(path)["components"]["cfg"]["kind"] == "json"


def test_component_options_for_an_unselected_component_is_a_key_error(tmp_path: Path) -> None:
    ckpt = Checkpoint(a={"x": 1}, b={"y": 2})
    with pytest.raises(KeyError, match="'b'"):
        ckpt.save(tmp_path / "c", components=["a"], component_options={"b": CheckpointOptions(sha256=True)})
    path = ckpt.save(tmp_path / "c")
    with pytest.raises(KeyError, match="'nope'"):
        ckpt.load(path, component_options={"nope": CheckpointOptions()})


def test_options_validate_their_members() -> None:
    with pytest.raises(ValueError, match="strict"):
        CheckpointOptions(strict="loose")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="save_args"):
        CheckpointOptions(save_args=["a"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="once"):
        Checkpoint().register("x", {}, JsonAdapter(), options=CheckpointOptions(adapter=TreeAdapter()))


# -- adapter inference order (decision record 0010) -------------------------------------------------

class _Both(_Stateful, _Dumpable):
    """An object with state_dict/load_state_dict and dump/load."""

    def __init__(self) -> None:
        _Stateful.__init__(self)
        _Dumpable.__init__(self, "dumped")


def test_an_object_with_both_protocols_is_stored_as_a_tree_by_default(tmp_path: Path) -> None:
    path = Checkpoint(obj=_Both()).save(tmp_path / "c")
    assert manifest(path)["components"]["obj"]["kind"] == "tree"
    assert read_component(path, "obj")["value"].tolist() == [0.0, 0.0]


def test_the_seed_order_is_one_option_away(tmp_path: Path) -> None:
    options = CheckpointOptions(adapter=DumpLoadAdapter())
    path = Checkpoint().register("obj", _Both(), options=options).save(tmp_path / "c")
    assert manifest(path)["components"]["obj"]["kind"] == "files"
    target = _Both()
    target.text = ""
    Checkpoint().register("obj", target, options=options).load(path)
    assert target.text == "dumped"
    assert isinstance(opencheckpoint.adapters.resolve_adapter(_Both()), StateDictAdapter)


# -- issue 26: bugs found by torchrl's own checkpoint tests, ported ------------------------------
def test_a_dict_saved_holding_a_tensor_scalar_loads_into_an_empty_dict(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = Checkpoint(state={"step": torch.tensor(3), "name": "run"}).save(tmp_path / "c")
    target: dict[str, Any] = {}
    result = Checkpoint(state=target).load(path)
    assert result.loaded == {"state"}
    assert list(target) == ["step", "name"] and int(target["step"]) == 3 and target["name"] == "run"


def test_a_json_component_still_loads_into_a_dict_holding_arrays(tmp_path: Path) -> None:
    path = Checkpoint(config={"lr": 0.1}).save(tmp_path / "c")
    target: dict[str, Any] = {"lr": np.float64(0.0)}
    Checkpoint(config=target).load(path)
    assert target == {"lr": 0.1}


def test_the_library_version_is_compared_and_its_skew_reported(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    path = Checkpoint(config={"lr": 0.1}).save(tmp_path / "c", producer={
        "name": "opencheckpoint-python", "version": "0.0.1", "environment": {"opencheckpoint": "0.0.1"}})
    with caplog.at_level("WARNING", logger="opencheckpoint"):
        result = Checkpoint(config={}).load(path)
    assert result.version_skew
    assert result.versions["opencheckpoint"] == {"checkpoint": "0.0.1", "runtime": opencheckpoint.__version__,
                                                 "matches": False}
    assert "opencheckpoint" in caplog.text
    same = Checkpoint(config={"lr": 0.1}).save(tmp_path / "d")
    assert not Checkpoint(config={}).load(same).version_skew


def test_a_linear_saved_with_an_explicit_state_dict_adapter_loads_with_the_default_adapter(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    saved = torch.nn.Linear(2, 3)
    path = Checkpoint().register("m", saved, StateDictAdapter()).save(tmp_path / "c")
    live = torch.nn.Linear(2, 3)
    Checkpoint().register("m", live).load(path)
    assert torch.equal(live.weight, saved.weight) and torch.equal(live.bias, saved.bias)
    other = torch.nn.Linear(3, 3)  # a module it does not fit is refused, not half loaded
    before = other.weight.detach().clone()
    with pytest.raises(IncompatibleComponent):
        Checkpoint().register("m", other).load(path)
    assert torch.equal(other.weight, before)

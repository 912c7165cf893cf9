"""Converters: real torch.save, safetensors, torchrl 0.14 and orbax inputs become valid, bit-exact checkpoints."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opencheckpoint import Checkpoint, PRNGKeyValue, open_checkpoint, read_component, validate
from opencheckpoint.tools.converters import ConversionError, convert, detect_source

torch = pytest.importorskip("torch")


def manifest_metadata(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / "manifest.json").read_text())["metadata"]
    return data


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def torch_bits(tensor: Any) -> np.ndarray:
    from opencheckpoint.adapters.torch import tensor_to_numpy

    return tensor_to_numpy(tensor)


# -- torch.save ---------------------------------------------------------------------------------------------

def test_torch_state_dict_converts_bit_exact_with_odd_dtypes(tmp_path: Path) -> None:
    state = {"w": torch.randn(3, 4), "b": torch.randn(4).to(torch.bfloat16),
             "f8": torch.ones(2).to(torch.float8_e4m3fn), "n": torch.tensor(7),
             "nan": torch.tensor([float("nan"), -0.0])}
    torch.save(state, tmp_path / "model.pt")
    assert detect_source(tmp_path / "model.pt") == "torch"
    out = convert(tmp_path / "model.pt", tmp_path / "ckpt")
    assert validate(out).ok
    stored = read_component(out, "model")
    assert list(stored) == list(state)
    for key, tensor in state.items():
        assert same_bits(stored[key], torch_bits(tensor)), key
    assert manifest_metadata(out)["converted_from"] == {"format": "torch", "name": "model.pt"}


def test_torch_split_makes_components_that_load_into_live_objects(tmp_path: Path) -> None:
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters())
    net(torch.ones(1, 3)).sum().backward()
    opt.step()
    torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(), "epoch": 4}, tmp_path / "train.pt")
    out = convert(tmp_path / "train.pt", tmp_path / "ckpt", source="torch", split=True, format="archive")
    assert out.is_file() and validate(out).ok
    net2 = torch.nn.Linear(3, 2)
    opt2 = torch.optim.Adam(net2.parameters())
    result = Checkpoint(model=net2, optimizer=opt2).load(out, strict="warn")
    assert result.loaded == {"model", "optimizer"}
    assert torch.equal(net2.weight, net.weight)
    assert torch.equal(opt2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
    assert read_component(out, "epoch") == 4


def test_torch_pickle_only_file_is_refused_with_an_explanation(tmp_path: Path) -> None:
    torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pt")  # a whole module: needs unpickling code
    with pytest.raises(ConversionError) as info:
        convert(tmp_path / "module.pt", tmp_path / "ckpt")
    assert "never runs code" in info.value.message and "state_dict" in info.value.message
    assert info.value.file == str(tmp_path / "module.pt")
    assert not (tmp_path / "ckpt").exists()


def test_undetectable_input_names_the_formats(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ConversionError, match="torchrl, orbax, safetensors, torch"):
        convert(tmp_path / "notes.txt", tmp_path / "ckpt")


# -- safetensors --------------------------------------------------------------------------------------------

def test_safetensors_keeps_metadata_and_bits(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    tensors = {"layer.weight": torch.randn(2, 3), "layer.bias": torch.randn(3).to(torch.bfloat16),
               "mask": torch.tensor([True, False]), "ids": torch.arange(4, dtype=torch.int32)}
    save_file(tensors, tmp_path / "m.safetensors", metadata={"format": "pt", "note": "α"})
    assert detect_source(tmp_path / "m.safetensors") == "safetensors"
    out = convert(tmp_path / "m.safetensors", tmp_path / "ckpt", component="weights")
    assert validate(out).ok
    stored = read_component(out, "weights")
    for key, tensor in tensors.items():
        assert same_bits(stored[key], torch_bits(tensor)), key
    assert manifest_metadata(out)["safetensors_metadata"] == {"format": "pt", "note": "α"}


def test_corrupt_safetensors_raises_conversion_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes((20).to_bytes(8, "little") + b'{"a": {"dtype": "F32"' + b"\0" * 10)
    with pytest.raises(ConversionError):
        convert(bad, tmp_path / "ckpt", source="safetensors")


# -- torchrl ---------------------------------------------------------------------------------------------------

@pytest.fixture
def trained() -> tuple[Any, Any]:
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters())
    net(torch.ones(1, 3)).sum().backward()
    opt.step()
    return net, opt


@pytest.mark.parametrize("form", ["directory", "archive"])
def test_torchrl_checkpoint_converts(tmp_path: Path, trained: tuple[Any, Any], form: str) -> None:
    from torchrl.checkpoint import Checkpoint as TorchRLCheckpoint

    net, opt = trained
    source = TorchRLCheckpoint(policy=net, optim=opt, config={"lr": 0.1}, format=form).save(
        tmp_path / "trl", metadata={"step": 7})
    assert detect_source(source) == "torchrl"
    out = convert(source, tmp_path / "ckpt")
    assert validate(out).ok
    metadata = manifest_metadata(out)
    assert metadata["step"] == 7 and metadata["converted_from"]["format"] == "torchrl"
    assert read_component(out, "config") == {"lr": 0.1}
    policy = read_component(out, "policy")
    assert same_bits(policy["weight"], torch_bits(net.weight.detach()))
    net2, opt2 = torch.nn.Linear(3, 2), torch.optim.Adam(torch.nn.Linear(3, 2).parameters())
    assert Checkpoint(policy=net2, optim=opt2).load(out, strict="warn").loaded == {"policy", "optim"}
    assert torch.equal(net2.bias, net.bias)
    assert torch.equal(opt2.state_dict()["state"][1]["exp_avg_sq"], opt.state_dict()["state"][1]["exp_avg_sq"])


def test_torchrl_plain_tensors_need_neither_torchrl_nor_tensordict(tmp_path: Path, trained: tuple[Any, Any],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from torchrl.checkpoint import Checkpoint as TorchRLCheckpoint

    net, _ = trained
    source = TorchRLCheckpoint(policy=net).save(tmp_path / "trl")
    import sys

    for name in [m for m in sys.modules if m.split(".")[0] in ("torchrl", "tensordict")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr("builtins.__import__", _refusing_import(("torchrl", "tensordict")))
    out = convert(source, tmp_path / "ckpt")
    assert same_bits(read_component(out, "policy")["bias"], torch_bits(net.bias.detach()))


def _refusing_import(blocked: tuple[str, ...]) -> Any:
    import builtins

    real = builtins.__import__

    def guarded(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] in blocked:
            raise ImportError(f"blocked {name}")
        return real(name, *args, **kwargs)

    return guarded


def test_torchrl_torch_payload_and_dump_load_components(tmp_path: Path, trained: tuple[Any, Any]) -> None:
    from torchrl.checkpoint import Checkpoint as TorchRLCheckpoint
    from torchrl.checkpoint import StateDictCheckpointAdapter

    net, _ = trained

    class Buffer:
        def dump(self, path: Path) -> None:
            (Path(path) / "data.bin").write_bytes(b"\x01\x02\x03")

        def load(self, path: Path) -> None:
            pass

    source = TorchRLCheckpoint()
    source.register("policy", net, adapter=StateDictCheckpointAdapter("torch"))
    source.register("buffer", Buffer())
    saved = source.save(tmp_path / "trl")
    out = convert(saved, tmp_path / "ckpt")
    assert validate(out).ok
    assert same_bits(read_component(out, "policy")["weight"], torch_bits(net.weight.detach()))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["components"]["buffer"]["kind"] == "files"
    assert (out / "components" / "buffer" / "data.bin").read_bytes() == b"\x01\x02\x03"


# -- orbax -----------------------------------------------------------------------------------------------------

def _orbax_state() -> dict[str, Any]:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    return {"params": {"w": jnp.arange(6, dtype=jnp.float32).reshape(2, 3), "b": jnp.ones(3, jnp.bfloat16)},
            "key": jax.random.key(3), "step": 5}


def test_orbax_pytree_keeps_typed_keys_and_bits(tmp_path: Path) -> None:
    ocp = pytest.importorskip("orbax.checkpoint")
    import jax

    state = _orbax_state()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with ocp.StandardCheckpointer() as checkpointer:
            checkpointer.save(tmp_path / "orbax", state)
    assert detect_source(tmp_path / "orbax") == "orbax"
    out = convert(tmp_path / "orbax", tmp_path / "ckpt")
    assert validate(out).ok
    stored = read_component(out, "state")
    assert isinstance(stored["key"], PRNGKeyValue) and stored["key"].impl == "threefry2x32"
    assert np.array_equal(stored["key"].data, np.asarray(jax.random.key_data(state["key"])))
    assert same_bits(stored["params"]["b"], np.asarray(state["params"]["b"]))
    assert stored["step"] == 5
    restored = read_component(out, "state", framework="jax")
    assert jax.dtypes.issubdtype(restored["key"].dtype, jax.dtypes.prng_key)


def test_orbax_manager_directory_converts_newest_step_items(tmp_path: Path) -> None:
    ocp = pytest.importorskip("orbax.checkpoint")
    state = _orbax_state()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with ocp.CheckpointManager(tmp_path / "run") as manager:
            for step in (1, 2):
                manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                            config=ocp.args.JsonSave({"lr": step / 10})))
            manager.wait_until_finished()
    out = convert(tmp_path / "run", tmp_path / "ckpt")
    assert validate(out).ok
    assert read_component(out, "config") == {"lr": 0.2}
    assert manifest_metadata(out)["converted_from"]["step"] == 2
    older = convert(tmp_path / "run", tmp_path / "ckpt1", step=1)
    assert read_component(older, "config") == {"lr": 0.1}
    with pytest.raises(ConversionError, match=r"has: \[1, 2\]"):
        convert(tmp_path / "run", tmp_path / "ckpt9", step=9)


def test_torch_module_state_keeps_its_module_versions(tmp_path: Path) -> None:
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))  # BatchNorm's _version is 2
    torch.save(net.state_dict(), tmp_path / "net.pt")
    out = convert(tmp_path / "net.pt", tmp_path / "ckpt", source="torch")
    with open_checkpoint(out) as ckpt:
        record = ckpt.manifest["components"]["model"]
    assert record["metadata"]["torch_module_versions"]["1"] == {"version": 2}
    fresh = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    assert Checkpoint(model=fresh).load(out).loaded == {"model"}
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), net.state_dict().values(), strict=True))

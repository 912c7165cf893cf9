"""The tensor-kinds matrix (issue 20): every kind of tensor and array, through every save route.

One row per kind (:data:`opencheckpoint.testing.tensor_kinds.KINDS`: torch, JAX and
NumPy), one column per route that turns values into array bytes: ``Checkpoint.save``
(directory and archive), ``save_async``'s snapshot, ``progress=``, a remote
``memory://`` location, ``Rotation``, ``RunCheckpointer``, and the value nested in
plain dicts, lists, tuples and named tuples, in an object's optimizer-style
``state_dict()``, in a dataclass component and in a module's buffers. Each cell
either reads back equal, bit for bit, to what the framework says the value is
(``t.detach().cpu().clone()`` with conjugate and negative bits resolved), or is
refused at save with a ``CheckpointError`` and leaves nothing behind.

Kinds of several processes (DTensor parameters, ``distribute_module``,
``fully_shard``, ``p.data = distribute_tensor(...)`` on two ranks) are in
``tests/sharding/test_kinds_distributed.py``; a DTensor on a mesh of one rank is here.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections import namedtuple
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opencheckpoint import Checkpoint, read_component
from opencheckpoint.format.errors import CheckpointError
from opencheckpoint.run import Rotation, RunCheckpointer
from opencheckpoint.sharding import LocalCollective
from opencheckpoint.testing.tensor_kinds import KINDS, Kind, assert_same_values, check_kind, expected_values

Save = Callable[[Any, Path], Any]
Read = Callable[[Any], Any]
Pair = namedtuple("Pair", "leaf other")


def _available(kind: Kind) -> None:
    if kind.framework != "numpy":
        pytest.importorskip(kind.framework)


def _plain(value: Any, target: Path, **options: Any) -> Path:
    return Checkpoint(s={"leaf": value}, durable=False).save(target, **options)


def _leaf(path: Any) -> Any:
    return read_component(path, "s")["leaf"]


class Holder:
    """An object with an optimizer-style state dict (integer keys, nested state), saved by StateDictAdapter."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def state_dict(self) -> dict[str, Any]:
        return {"state": {0: {"exp_avg": self.value, "step": 3}}, "param_groups": [{"lr": 0.1, "params": [0]}]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = state["state"][0]["exp_avg"]


@dataclasses.dataclass
class Config:
    leaf: Any
    name: str = "cfg"


def _routes() -> dict[str, tuple[Save, Read]]:
    """Route name -> (save(value, target) -> path, read(path) -> the stored leaf as NumPy)."""
    return {
        "directory": (_plain, _leaf),
        "archive": (lambda v, t: _plain(v, t.with_suffix(".ocp"), format="archive"), _leaf),
        "save-async": (lambda v, t: Checkpoint(s={"leaf": v}, durable=False).save_async(t).result(), _leaf),
        "progress": (lambda v, t: _plain(v, t, progress=lambda done, total: None), _leaf),
        "local-collective": (lambda v, t: _plain(v, t, process_group=LocalCollective()), _leaf),
        "rotation": (lambda v, t: Rotation(t).save(Checkpoint(s={"leaf": v}, durable=False), 1), _leaf),
        "rotation-async": (lambda v, t: Rotation(t).save_async(Checkpoint(s={"leaf": v}, durable=False), 1).result(),
                           _leaf),
        "run-checkpointer": (lambda v, t: RunCheckpointer(Checkpoint(s={"leaf": v}, durable=False), t,
                                                          interval=1).save(1), _leaf),
        "nested": (lambda v, t: Checkpoint(s={"a": [{"b": (Pair(v, 1),)}]}, durable=False).save(t),
                   lambda p: read_component(p, "s")["a"][0]["b"][0].leaf),
        "state-dict": (lambda v, t: Checkpoint(opt=Holder(v), durable=False).save(t),
                       lambda p: read_component(p, "opt")["state"][0]["exp_avg"]),
        "dataclass": (lambda v, t: Checkpoint(cfg=Config(v), durable=False).save(t),
                      lambda p: read_component(p, "cfg")["leaf"]),
    }


ROUTES = _routes()


@pytest.fixture
def empty_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "saves"
    directory.mkdir()
    return directory


def _published(directory: Path) -> list[str]:
    """Every checkpoint a save left below ``directory`` (a rotation folder may hold only its id file)."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("manifest.json")) + sorted(
        str(p.relative_to(directory)) for p in directory.rglob("*.ocp"))


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("kind", KINDS, ids=[kind.name for kind in KINDS])
def test_every_kind_is_stored_exactly_or_refused_on_every_route(kind: Kind, route: str, empty_dir: Path) -> None:
    _available(kind)
    save, read = ROUTES[route]
    if route == "archive" and kind.name == "jax-sharded-local-devices" and len(__import__("jax").devices()) > 1:
        # sharded arrays are written in the directory form only: the archive form refuses them (nothing written)
        kind = dataclasses.replace(kind, stored=False)
    if route.startswith(("rotation", "run-checkpointer")):  # these create their directory (and its id file) first
        value = kind.build()
        if kind.stored:
            expected = expected_values(value)
            assert_same_values(expected, read(save(value, empty_dir / "run")))
            return
        with pytest.raises(CheckpointError):
            save(value, empty_dir / "run")
        assert _published(empty_dir) == [] and not list(empty_dir.glob("run/.*.oc-*")), os.listdir(empty_dir)
        return
    check_kind(kind, empty_dir, save, read)


@pytest.fixture
def memory_fs() -> Iterator[Any]:
    fsspec = pytest.importorskip("fsspec")
    yield fsspec.filesystem("memory")


@pytest.mark.parametrize("kind", KINDS, ids=[kind.name for kind in KINDS])
def test_every_kind_saved_to_a_remote_location_is_stored_exactly_or_refused(kind: Kind, memory_fs: Any) -> None:
    _available(kind)
    prefix = f"kinds-{uuid.uuid4().hex}"
    value = kind.build()
    if kind.stored:
        expected = expected_values(value)
        path = Checkpoint(s={"leaf": value}).save(f"memory://{prefix}/ckpt")
        assert_same_values(expected, _leaf(path))
        return
    with pytest.raises(CheckpointError):
        Checkpoint(s={"leaf": value}).save(f"memory://{prefix}/ckpt")
    assert not memory_fs.exists(f"/{prefix}/ckpt/manifest.json")
    assert memory_fs.find(f"/{prefix}") == []


TORCH_KINDS = [kind for kind in KINDS if kind.framework == "torch"]


@pytest.mark.parametrize("kind", TORCH_KINDS, ids=[kind.name for kind in TORCH_KINDS])
def test_every_torch_kind_as_a_module_buffer_is_stored_exactly_or_refused(kind: Kind, empty_dir: Path) -> None:
    """A module's ``state_dict()`` detaches each buffer first: what torch hands over is what must be stored
    (a ``torch.func.grad`` wrapper that outlived its transform comes out as its plain value), or refused."""
    torch = pytest.importorskip("torch")
    value = kind.build()
    if isinstance(value, list):
        pytest.skip("a list of views is not one buffer (the shared-storage row runs on the other routes)")
    module = torch.nn.Module()
    try:
        module.register_buffer("leaf", value)
        handed_over = module.state_dict()["leaf"]
    except RuntimeError as exc:  # torch itself refuses it (a vmap-batched tensor that escaped its transform)
        pytest.skip(f"torch's own state_dict() refuses it: {str(exc)[:80]}")
    try:
        path = Checkpoint(model=module, durable=False).save(empty_dir / "c")
    except CheckpointError:
        assert not kind.stored and os.listdir(empty_dir) == []
        return
    assert kind.stored or type(handed_over) is torch.Tensor, f"{kind.name} was stored"
    assert_same_values(expected_values(handed_over), read_component(path, "model")["leaf"])


#: Kinds refused for what the tensor is (not for a dtype the format lacks, which interchange does not store).
REFUSED_TORCH_KINDS = [k for k in TORCH_KINDS if not k.stored and k.why != "no spec dtype"]


@pytest.mark.parametrize("kind", REFUSED_TORCH_KINDS, ids=[k.name for k in REFUSED_TORCH_KINDS])
def test_interchange_refuses_every_refused_torch_kind(kind: Kind) -> None:
    pytest.importorskip("torch")
    from opencheckpoint.tools.interchange import torch_state_to_nnx

    value = kind.build()
    with pytest.raises(CheckpointError):
        torch_state_to_nnx({"0.bias": value}, {"0": "encoder"})


def test_a_torch_compiled_modules_parameters_are_stored_exactly(tmp_path: Path) -> None:
    """``torch.compile`` on CPU with the ``aot_eager`` backend (no C++ toolchain needed; inductor would
    compile C++ for minutes on two busy cores): its parameters are the plain module's, saved bit for bit."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    compiled = torch.compile(plain, backend="aot_eager")
    compiled(torch.randn(5, 4)).sum().backward()  # run it once: parameters as a compiled run leaves them
    expected = {key: expected_values(value) for key, value in compiled.state_dict().items()}
    path = Checkpoint(model=compiled, durable=False).save(tmp_path / "c")
    stored = read_component(path, "model")
    assert sorted(stored) == sorted(expected) and all(key.startswith("_orig_mod.") for key in stored)
    for key, value in expected.items():
        assert_same_values(value, stored[key], key)


@pytest.mark.parametrize("device", ["cuda"])
def test_a_device_tensor_is_copied_once_and_stored_exactly(device: str, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("CUDA row: no CUDA device on this machine")
    value = torch.arange(12, dtype=torch.bfloat16, device=device).reshape(3, 4).t()
    check_kind(Kind("cuda", "torch", lambda: value, True), tmp_path, _plain, _leaf)


# -- a DTensor in one process (a gloo group of one): the sharded path, or refused when reached another way ---
@pytest.fixture
def mesh(tmp_path: Path) -> Iterator[Any]:
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    from torch.distributed.device_mesh import init_device_mesh

    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0,
                                         world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        torch.distributed.destroy_process_group()


def test_a_one_rank_dtensor_is_stored_exactly_on_every_route_that_writes_directories(
        mesh: Any, empty_dir: Path) -> None:
    from torch.distributed.tensor import Shard, distribute_tensor

    full = np.arange(12, dtype=np.float32).reshape(4, 3)
    import torch

    for route in ("directory", "save-async", "progress", "nested", "state-dict", "local-collective", "rotation",
                  "run-checkpointer"):
        value = distribute_tensor(torch.from_numpy(full.copy()), mesh, [Shard(0)])
        save, read = ROUTES[route]
        assert_same_values(expected_values(value.full_tensor()), read(save(value, empty_dir / route)), route)


def test_a_parameter_whose_data_was_replaced_by_a_dtensor_is_refused_naming_the_fix(
        mesh: Any, empty_dir: Path) -> None:
    import torch
    from torch.distributed.tensor import Shard, distribute_tensor

    net = torch.nn.Linear(3, 4)
    for parameter in net.parameters():
        parameter.data = distribute_tensor(parameter.data.clone(), mesh, [Shard(0)])
    for route in ROUTES:
        if route.startswith(("rotation", "run-checkpointer")):
            continue  # their directory bookkeeping is checked with every kind above
        save, _ = ROUTES[route]
        with pytest.raises(CheckpointError, match=r"p\.data = distribute_tensor.*collective form") as caught:
            save(net.weight, empty_dir / route)
        assert "$." in str(caught.value) and os.listdir(empty_dir) == [], route
    with pytest.raises(CheckpointError, match="storage holds no data"):
        Checkpoint(model=net).save(empty_dir / "model")
    assert os.listdir(empty_dir) == []


def test_a_dtensor_subclass_is_refused_not_taken_for_a_dtensor(mesh: Any, empty_dir: Path) -> None:
    import torch
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    class Mine(DTensor):
        pass

    value = distribute_tensor(torch.ones(4, 2), mesh, [Shard(0)])
    value.__class__ = Mine
    with pytest.raises(CheckpointError, match="Mine"):
        _plain(value, empty_dir / "c")
    assert os.listdir(empty_dir) == []


def test_an_abstract_nnx_state_is_refused(empty_dir: Path) -> None:
    """``nnx.eval_shape`` gives a module whose variables hold ``ShapeDtypeStruct``s: no values to save."""
    pytest.importorskip("jax")
    nnx = pytest.importorskip("flax.nnx")
    abstract = nnx.eval_shape(lambda: nnx.Linear(3, 2, rngs=nnx.Rngs(0)))
    with pytest.raises(CheckpointError, match="abstract ShapeDtypeStruct"):
        Checkpoint(model=abstract, durable=False).save(empty_dir / "c")
    assert os.listdir(empty_dir) == []


#: Real tensors whose bytes take a torch operation to reach (detach, resolve_conj, resolve_neg, a bit carrier).
UNDER_MODE_VALUES = {
    "parameter": lambda torch: torch.nn.Parameter(torch.arange(4.0)),
    "conjugate-view": lambda torch: torch.tensor([1 + 2j, 3 - 4j]).conj(),
    "negative-view": lambda torch: torch.tensor([1.0, 2.0])._neg_view(),
    "bfloat16": lambda torch: torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
}


@pytest.mark.parametrize("route", ["directory", "archive", "save-async", "progress", "state-dict"])
@pytest.mark.parametrize("value_name", sorted(UNDER_MODE_VALUES))
def test_a_save_under_an_active_fake_tensor_mode_stores_the_real_tensors_bytes(
        value_name: str, route: str, empty_dir: Path) -> None:
    """Saving while ``FakeTensorMode`` is active (tracing tools) reads real tensors' real bytes: torch's
    operations on them run outside the mode, instead of failing with torch's AssertionError inside it."""
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    value = UNDER_MODE_VALUES[value_name](torch)
    expected = expected_values(value)
    save, read = ROUTES[route]
    with FakeTensorMode():
        path = save(value, empty_dir / "c")
    assert_same_values(expected, read(path))


def test_a_fake_tensor_saved_under_its_mode_is_refused_and_leaves_nothing(empty_dir: Path) -> None:
    pytest.importorskip("torch")
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), pytest.raises(CheckpointError, match="FakeTensor"):
        _plain(torch.empty(3), empty_dir / "c")
    assert os.listdir(empty_dir) == []

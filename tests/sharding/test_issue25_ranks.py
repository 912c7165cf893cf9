"""Issue 25 on real process groups: gloo ranks (FSDP2) and a JAX mesh of 8 CPU devices, each launch bounded.

* differing plain values refused on every rank naming the key; ``PerRank`` stored per rank and restored to each;
  a collective save to ``memory://`` (one process's memory) refused on every rank (``values``);
* ``rename=`` into an FSDP2 model, each rank opening only the shard files of its rows (``rename``);
* FSDP2 (2 ranks) -> Flax NNX on a 4x2 JAX mesh -> FSDP2, bit-exact, names and transposes done by the restore
  plan inside region reads (``torch-save``, the JAX side in this process: the root conftest gives it 8 CPU
  devices, ``torch-load-nnx``).

Two launches: ``values``, ``rename`` and ``torch-save`` share one (a module fixture, each scenario's output after
its ``== name`` line), ``torch-load-nnx`` needs the JAX side's checkpoint first.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.tensor")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

pytestmark = pytest.mark.slow(seconds=3)  # 3 tests, 9 s: launches of 2 ranks (forked from a preloaded interpreter)

import rank_launch  # noqa: E402  (tests/sharding, on pytest's pythonpath: imports torch)

WORKER = Path(__file__).with_name("restore_worker.py")
#: Seconds a whole launch may take (process start and imports included) on 2 busy cores.
LAUNCH_BOUND = 150
#: The scenarios of the shared launch, each with its path below the fixture's directory.
SHARED = {"values": "values", "rename": "rename/ckpt", "torch-save": "torch"}


def launch(scenario: str, world: int, *paths: Path | str) -> list[str]:
    """Run ``world`` ranks of ``scenario`` (``A+B``: one path each); each rank's output (its exit code checked)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    joined = os.pathsep.join(map(str, paths))
    argvs = [[scenario, str(rank), str(world), str(port), joined] for rank in range(world)]
    ranks = rank_launch.launch(WORKER, argvs, LAUNCH_BOUND, {**os.environ, "OMP_NUM_THREADS": "1"})
    for rank in ranks:
        assert rank.returncode == 0, rank.stdout + rank.stderr[-3000:]
    return [rank.stdout for rank in ranks]


def section(output: str, scenario: str) -> str:
    """One scenario's lines of a rank's output: after ``== scenario``, up to the next scenario's line."""
    return output.split(f"== {scenario}\n", 1)[1].split("\n== ", 1)[0]


@pytest.fixture(scope="module")
def shared_launch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The scenarios of ``SHARED`` in one launch of 2 ranks: their root directory and each rank's output."""
    root = tmp_path_factory.mktemp("issue25")
    for path in SHARED.values():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / SHARED["values"]).mkdir()  # its saves go below it
    return root, launch("+".join(SHARED), 2, *(root / path for path in SHARED.values()))


def outputs_of(shared_launch: tuple[Path, list[str]], scenario: str) -> tuple[Path, list[str]]:
    root, outputs = shared_launch
    return root / SHARED[scenario], [section(out, scenario) for out in outputs]


def test_differing_values_are_refused_per_rank_values_restore_to_each_rank_and_process_memory_is_refused(
        shared_launch: tuple[Path, list[str]]) -> None:
    path, outputs = outputs_of(shared_launch, "values")
    for rank, out in enumerate(outputs):
        assert f"rank {rank}: differing: raised UnsupportedValue field=$.plain: " in out, out
        assert "saved the value at $.plain of components/extra differing from the coordinator's" in out
        assert f"rank {rank}: per-rank: ok" in out and f"rank {rank}: load: ok" in out, out
        assert f"rank {rank}: restored {10 + rank} {[rank] * 3}" in out, out
        assert f"rank {rank}: url: raised UnsupportedLocation" in out and "memory of one process" in out, out
        assert "opencheckpoint-upload" not in out
    assert not (path / "a").exists()


def test_rename_into_fsdp2_reads_each_ranks_rows_by_the_renamed_key_and_refuses_an_unmatched_key(
        shared_launch: tuple[Path, list[str]]) -> None:
    """7 rows saved as 4+3 by 2 ranks: each rank opens only its own rank file (the layouts agree)."""
    for rank, out in enumerate(outputs_of(shared_launch, "rename")[1]):
        assert f"rank {rank}: rename: ok" in out, out
        assert f"rank {rank}: bit-exact True" in out, out
        opened = json.loads(next(line for line in out.splitlines() if line.startswith(f"rank {rank}: opened "))
                            .split(": opened ", 1)[1])
        assert opened == [f"components/model/shards/rank-0000{rank}.bin"], opened
        assert f"rank {rank}: unmatched: raised IncompatibleComponent" in out, out
        assert "rename= key 'module.' matches no stored key path" in out, out


def nnx_side(torch_path: Path, nnx_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """In this process: the FSDP2 checkpoint restored into Flax NNX on a 4x2 mesh of CPU devices (renamed and
    transposed by the restore plan), checked bit for bit, saved again; the shard files its region reads opened."""
    jax = pytest.importorskip("jax")
    nnx = pytest.importorskip("flax.nnx")
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from opencheckpoint import Checkpoint
    from opencheckpoint.adapters.jax import restore_nnx
    from opencheckpoint.read.sharded import ShardedReads
    from opencheckpoint.tools.interchange import torch_to_nnx_rename

    class MLP(nnx.Module):  # type: ignore[misc]  # flax is untyped here
        def __init__(self, rngs: Any) -> None:
            self.hidden = nnx.Linear(8, 16, rngs=rngs)
            self.out = nnx.Linear(16, 8, rngs=rngs)

    if len(jax.devices()) < 8:
        pytest.skip("needs 8 JAX devices (the root conftest asks XLA for 8 CPU devices)")
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: MLP(nnx.Rngs(0))))
    abstract = jax.tree_util.tree_map(lambda s: jax.ShapeDtypeStruct(
        s.shape, s.dtype, sharding=NamedSharding(mesh, P("x", "y") if len(s.shape) == 2 else P("x"))), abstract)
    reads: list[str] = []
    original = ShardedReads.shard

    def shard(self: ShardedReads, record: Any, *, verify: bool) -> Any:
        reads.append(record.file)
        return original(self, record, verify=verify)

    monkeypatch.setattr(ShardedReads, "shard", shard)
    rename = torch_to_nnx_rename({"0": "hidden", "2": "out"}, transpose=True)  # names and transposes
    model = restore_nnx(torch_path, "model", (graphdef, abstract), rename=rename)
    expected = np.load(f"{torch_path}.expected.npz")
    kernel = model.hidden.kernel.get_value()
    assert kernel.sharding == NamedSharding(mesh, P("x", "y")), kernel.sharding
    for name, torch_name in (("hidden", "0"), ("out", "2")):
        layer = getattr(model, name)
        assert np.array_equal(np.asarray(layer.kernel.get_value()), expected[torch_name + ".weight"].T), name
        assert np.array_equal(np.asarray(layer.bias.get_value()), expected[torch_name + ".bias"]), name
    opened = sorted(set(reads))
    Checkpoint(model=model).save(nnx_path)
    return opened


def test_fsdp2_on_two_ranks_to_nnx_on_a_jax_mesh_and_back_is_bit_exact(
        shared_launch: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    torch_path, outputs = outputs_of(shared_launch, "torch-save")
    for rank, out in enumerate(outputs):
        assert f"rank {rank}: saved" in out, out
    nnx_path = torch_path.with_name("nnx")
    assert nnx_side(torch_path, nnx_path, monkeypatch) == ["shards/rank-00000.bin", "shards/rank-00001.bin"]
    for rank, out in enumerate(launch("torch-load-nnx", 2, nnx_path)):
        assert f"rank {rank}: nnx->fsdp2: ok" in out, out
        assert f"rank {rank}: bit-exact True" in out, out

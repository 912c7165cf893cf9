"""DTensors in one process (a gloo group of one, no subprocess): saved as sharded arrays, restored verified.

Multi-rank behaviour is in ``test_torch_distributed.py``; these check, cheaply,
the conversions both directions and that a restore into DTensors verifies every
shard before any parameter changes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.tensor")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import torch.distributed as dist  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor  # noqa: E402

from opencheckpoint import Checkpoint, read_component  # noqa: E402
from opencheckpoint.format.errors import IntegrityError, UnsupportedValue  # noqa: E402


@pytest.fixture
def mesh(tmp_path: Path) -> Iterator[object]:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def _module(mesh: object) -> torch.nn.Module:
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 6)
    for name, param in list(net.named_parameters()):
        setattr(net, name, torch.nn.Parameter(distribute_tensor(param.detach(), mesh, [Shard(0)])))
    return net


def test_a_dtensor_module_is_saved_as_sharded_arrays_and_read_whole_in_a_plain_read(
        mesh: object, tmp_path: Path) -> None:
    net = _module(mesh)
    path = Checkpoint(model=net, extra={"copy": distribute_tensor(torch.ones(3), mesh, [Replicate()])}).save(
        tmp_path / "c")
    body = json.loads((path / "manifest.json").read_bytes())
    assert body["format_version"] == 2 and body["components"]["model"]["kind_version"] == 2
    stored = read_component(path, "model")
    np.testing.assert_array_equal(stored["weight"], net.weight.full_tensor().detach().numpy())
    np.testing.assert_array_equal(read_component(path, "extra")["copy"], np.ones(3, np.float32))


def test_a_corrupt_shard_fails_the_restore_before_any_parameter_changes(mesh: object, tmp_path: Path) -> None:
    path = Checkpoint(model=_module(mesh)).save(tmp_path / "c")
    target = _module(mesh)
    with torch.no_grad():
        target.weight.zero_()
    Checkpoint(model=target).load(path)  # whole-shard fast path: restores the saved values
    np.testing.assert_array_equal(target.weight.full_tensor().detach().numpy(),
                                  _module(mesh).weight.full_tensor().detach().numpy())
    shard = path / "components/model/shards/rank-00000.bin"
    data = bytearray(shard.read_bytes())
    data[0] ^= 0xFF
    shard.write_bytes(bytes(data))
    with torch.no_grad():
        target.weight.zero_()
        target.bias.zero_()
    with pytest.raises(IntegrityError):
        Checkpoint(model=target).load(path)
    assert not target.weight.full_tensor().any() and not target.bias.full_tensor().any()


def test_a_partial_dtensor_is_refused(mesh: object, tmp_path: Path) -> None:
    from torch.distributed.tensor import DTensor

    pending = DTensor.from_local(torch.ones(3), mesh, [Partial()])
    with pytest.raises(UnsupportedValue, match="Partial"):
        Checkpoint(state={"p": pending}).save(tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_fsdp_over_tensor_parallel_strided_shards_are_written_by_every_rank_as_contiguous_blocks() -> None:
    """FSDP2 on a (dp, tp) mesh: (_StridedShard(0, sf=2), Shard(0)) shards over both mesh dims, each rank one block."""
    from types import SimpleNamespace

    from torch.distributed.tensor.placement_types import _StridedShard

    from opencheckpoint.adapters.torch_dtensor import _writes_replica, strided_block_is_contiguous

    placements = (_StridedShard(0, split_factor=2), Shard(0))
    for coordinate in [(0, 0), (0, 1), (1, 0), (1, 1)]:
        mesh = SimpleNamespace(get_coordinate=lambda c=coordinate: list(c))
        assert _writes_replica(SimpleNamespace(device_mesh=mesh, placements=placements))  # type: ignore[arg-type]
        strided_block_is_contiguous((8, 6), (2, 2), coordinate, placements)  # one block: accepted
    replicated = SimpleNamespace(device_mesh=SimpleNamespace(get_coordinate=lambda: [1, 0]),
                                 placements=(Replicate(), Shard(0)))
    assert not _writes_replica(replicated)  # type: ignore[arg-type]


def test_strided_shards_that_scatter_a_ranks_rows_are_refused_naming_the_placement() -> None:
    from torch.distributed.tensor.placement_types import _StridedShard

    from opencheckpoint.adapters.torch_dtensor import strided_block_is_contiguous

    with pytest.raises(UnsupportedValue, match=r"_StridedShard.*not supported") as caught:
        strided_block_is_contiguous((8, 6), (2,), (0,), (_StridedShard(0, split_factor=2),))  # rows 0, 1, 4, 5
    assert "[0, 1, 4, 5]" in str(caught.value)


@pytest.mark.parametrize(("shape", "mesh_shape", "placements", "count"), [
    ((6, 8), (4,), "strided", 6), ((6, 8), (2, 2), "shard-strided", 6), ((7, 5), (2, 2), "strided-shard", 4),
    ((5, 9), (2,), "strided-columns", 4)])
def test_scattered_strided_rows_become_one_shard_per_run_that_tile_the_array(
        shape: tuple[int, int], mesh_shape: tuple[int, ...], placements: str, count: int) -> None:
    """(FSDP2 + TP, "strided-shard", keeps one block per rank; the others scatter a rank's rows or columns.)"""
    import itertools

    from torch.distributed.tensor.placement_types import _StridedShard

    from opencheckpoint.adapters.torch_strided import dim_indices, local_blocks
    from opencheckpoint.tree.shard_plan import check_cover

    strided = _StridedShard(0, split_factor=2)
    chosen = {"strided": (strided,), "shard-strided": (Shard(0), strided), "strided-shard": (strided, Shard(0)),
              "strided-columns": (_StridedShard(1, split_factor=2),)}[placements]
    full = np.arange(int(np.prod(shape))).reshape(shape)
    rebuilt = np.full(shape, -1)
    records = []
    for coordinate in itertools.product(*(range(n) for n in mesh_shape)):
        rows = dim_indices(shape, mesh_shape, coordinate, chosen)
        local = full[np.ix_(*(rows.get(d, list(range(n))) for d, n in enumerate(shape)))]  # the rank's tensor
        for start, offset, size in local_blocks(shape, mesh_shape, coordinate, chosen):
            piece = local[tuple(slice(o, o + n) for o, n in zip(offset, size, strict=True))]
            rebuilt[tuple(slice(s, s + n) for s, n in zip(start, size, strict=True))] = piece
            records.append(["f", list(start), list(size), 0, piece.nbytes, len(records)])
    check_cover(shape, records, "$.w")  # disjoint boxes covering every element: the coordinator's tiling check
    np.testing.assert_array_equal(rebuilt, full)
    assert len(records) == count  # one shard per run of consecutive rows (or columns) of each rank


def test_runs_of_consecutive_indices() -> None:
    from opencheckpoint.adapters.torch_strided import runs

    assert runs([0, 1, 4, 5, 6, 9]) == [(0, 0, 2), (4, 2, 3), (9, 5, 1)]
    assert runs([]) == []
